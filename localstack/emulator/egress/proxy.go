package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// This file is the proxy's front door: options, construction, Serve, and
// the handler that sorts proxy requests into refusals, raw tunnels, and
// requests the proxy reads (l7.go).

// Identity names the sandbox a session belongs to; forwardURL tokens carry it.
type Identity struct{ TeamID, ProjectID, SandboxID, SandboxName string }

// Session is asked per request, so a policy update applies to the next
// request. Policy must not return nil; nil is treated as deny-all, so a
// policy that failed to compile fails closed.
type Session interface {
	Policy() *Policy
	Identity() Identity
}

// Options configure a Proxy. Zero durations take the defaults below.
type Options struct {
	// Hosts maps an exact domain (or "domain:port") to the "ip:port" the
	// proxy dials instead of resolving it: tests' upstreams under
	// real-looking names. A mapped destination is exempt from the
	// private-address rule (its address is chosen by the operator) but not
	// from the policy's subnets.
	Hosts map[string]string
	// UpstreamRoots are extra CAs trusted for upstream TLS, besides the
	// system roots.
	UpstreamRoots *x509.CertPool
	// AllowPrivateDestinations lets sandboxes reach loopback, private,
	// link-local and unspecified addresses (by IP literal or DNS answer).
	// Off by default: on Vercel those are not the host's, and here they are
	// the developer's etcd and emulator.
	AllowPrivateDestinations bool
	// Issuer is the iss of forward tokens (the emulator's URL); the
	// emulator serves JWKS() at Issuer+"/.well-known/jwks".
	Issuer string
	Now    func() time.Time
	// Logf receives one line per decision. It never gets secret values:
	// header values, forward URLs, tokens, request paths or queries.
	Logf func(format string, args ...any)
	// OnTransfer receives the bytes a sandbox connection moved, once per
	// client connection when it closes (Serve closes them all before it
	// returns): egress is what the sandbox sent to the proxy, ingress what
	// the proxy sent back, both counted on the wire (TLS and HTTP framing
	// included, like a NIC counter). Sum them for a session's
	// networkTransfer. It may run concurrently.
	OnTransfer func(s Session, egress, ingress int64)

	DialTimeout         time.Duration // connect and DNS; default 10 s
	TLSHandshakeTimeout time.Duration // both sides; default 10 s
	HeaderTimeout       time.Duration // reading a request's headers; default 30 s
	IdleTimeout         time.Duration // a keep-alive or tunnel with no traffic; default 5 min
	MaxHeaderBytes      int           // default 64 KiB
}

// Proxy is one emulator's egress firewall; Serve runs it for one session.
type Proxy struct {
	opts  Options
	hosts map[string]netip.AddrPort
	ca    *authority
	sig   *signer
}

// New creates a proxy with its own CA (ECDSA) and RSA signing key.
func New(opts Options) (*Proxy, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	setDefault(&opts.DialTimeout, 10*time.Second)
	setDefault(&opts.TLSHandshakeTimeout, 10*time.Second)
	setDefault(&opts.HeaderTimeout, 30*time.Second)
	setDefault(&opts.IdleTimeout, 5*time.Minute)
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = 64 << 10
	}
	hosts := make(map[string]netip.AddrPort, len(opts.Hosts))
	for name, addr := range opts.Hosts {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, fmt.Errorf("egress: Options.Hosts[%q]: %q is not ip:port", name, addr)
		}
		key := normalizeHost(name)
		if h, port, err := net.SplitHostPort(name); err == nil {
			key = net.JoinHostPort(normalizeHost(h), port)
		}
		hosts[key] = ap
	}
	ca, err := newAuthority(opts.Now)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	sig, err := newSigner()
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	return &Proxy{opts: opts, hosts: hosts, ca: ca, sig: sig}, nil
}

func setDefault(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// CACertPEM is the CA sandboxes trust; its key never leaves the process.
func (p *Proxy) CACertPEM() []byte { return p.ca.certPEM() }

// JWKS is the JSON Web Key Set verifying forward tokens.
func (p *Proxy) JWKS() []byte { return p.sig.jwks() }

// Serve serves proxy requests for one session until l is closed, then
// closes the session's connections, waits for its handlers and returns nil.
func (p *Proxy) Serve(l net.Listener, s Session) error {
	st := &serveState{p: p, sess: s, conns: map[net.Conn]struct{}{}}
	tr := p.transport()
	defer tr.CloseIdleConnections()
	inner := newChanListener()
	errLog := log.New(io.Discard, "", 0) // net/http's messages may quote URLs
	innerSrv := &http.Server{
		Handler:           st.wrap(func(w http.ResponseWriter, r *http.Request) { p.serveInner(st, tr, w, r) }),
		ReadHeaderTimeout: p.opts.HeaderTimeout,
		IdleTimeout:       p.opts.IdleTimeout,
		MaxHeaderBytes:    p.opts.MaxHeaderBytes,
		ErrorLog:          errLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, innerKey{}, c.(*innerConn))
		},
	}
	outer := &http.Server{
		Handler:           st.wrap(func(w http.ResponseWriter, r *http.Request) { p.serveOuter(st, tr, inner, w, r) }),
		ReadHeaderTimeout: p.opts.HeaderTimeout,
		IdleTimeout:       p.opts.IdleTimeout,
		MaxHeaderBytes:    p.opts.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	innerDone := make(chan struct{})
	go func() {
		defer close(innerDone)
		_ = innerSrv.Serve(inner)
	}()
	err := outer.Serve(&countingListener{Listener: l, st: st})
	_ = outer.Close()
	_ = innerSrv.Close()
	<-innerDone
	st.shutdown()
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

type innerKey struct{}

// wrap counts a handler in the Serve's wait group.
func (st *serveState) wrap(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !st.enter() {
			return
		}
		defer st.leave()
		h(w, r)
	})
}

// refuse answers with the proxy's own short text.
func (p *Proxy) refuse(w http.ResponseWriter, method, host string, rf *refusal) {
	p.opts.Logf("egress: refused %s %s: %s", method, host, rf.reason)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Connection", "close")
	w.WriteHeader(rf.status)
	_, _ = io.WriteString(w, rf.body)
}

// serveOuter handles what the sandbox sends to the proxy's port: CONNECT,
// or an absolute-URI plain-HTTP request.
func (p *Proxy) serveOuter(st *serveState, tr *http.Transport, inner *chanListener, w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.serveConnect(st, inner, w, r)
		return
	}
	if r.URL.Host == "" || !strings.EqualFold(r.URL.Scheme, "http") {
		p.refuse(w, r.Method, "", &refusal{status: http.StatusBadRequest, reason: "not a proxy request",
			body: "This is the sandbox's egress proxy: send http:// requests with an absolute URI and https:// through CONNECT (HTTP_PROXY/HTTPS_PROXY).\n"})
		return
	}
	t, rf := p.decide(r.Context(), st.sess.Policy(), r.URL.Host, "80")
	if rf != nil {
		p.refuse(w, r.Method, hostOnly(r.URL.Host), rf)
		return
	}
	p.serveL7(st, tr, w, r, "http", t)
}

// serveInner handles requests read from a CONNECT the proxy terminated. The
// policy is checked again per request: an update applies to the next
// request on a kept-alive connection.
func (p *Proxy) serveInner(st *serveState, tr *http.Transport, w http.ResponseWriter, r *http.Request) {
	ic := r.Context().Value(innerKey{}).(*innerConn)
	defPort := "443"
	if ic.scheme == "http" {
		defPort = "80"
	}
	t, rf := p.decide(r.Context(), st.sess.Policy(), ic.dest, defPort)
	if rf != nil {
		p.refuse(w, r.Method, hostOnly(ic.dest), rf)
		return
	}
	p.serveL7(st, tr, w, r, ic.scheme, t)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
