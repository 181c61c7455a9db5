package emulator

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator/egress"
	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// Network policy enforcement. Where the runtime can isolate a session's
// network (exec mode namespace with user namespaces, as root), each running
// session that runs a command gets a network namespace of its own with only
// a loopback interface, and in it, at 127.0.0.1:EgressProxyPort, the egress
// proxy (package egress) serving that session: its only way out. The proxy
// asks the session's CURRENT policy on every request, so an update applies to
// the next one. Commands get HTTP(S)_PROXY pointing at it and trust its CA.
// The namespace and listener end with the session. Elsewhere (exec=host, or
// Options.Egress.Enforcement "off") commands share the host's network and no
// policy is enforced; New logs that once and EgressDescription says it.

// EgressProxyPort is the port of the egress proxy on 127.0.0.1 inside each
// session's network namespace. It is outside the ports servers usually pick
// (and below Linux's ephemeral range), so a sandbox's own servers keep theirs.
const EgressProxyPort = 27180

// egressProxyURL is what commands get as HTTP_PROXY and HTTPS_PROXY.
var egressProxyURL = "http://127.0.0.1:" + strconv.Itoa(EgressProxyPort)

// EgressEnforcement says whether sessions' network policies are enforced.
type EgressEnforcement string

const (
	// EgressAuto enforces where the exec mode can isolate a session's
	// network, and otherwise logs that it does not.
	EgressAuto EgressEnforcement = ""
	// EgressOn enforces, and makes New fail where it cannot.
	EgressOn EgressEnforcement = "on"
	// EgressOff lets commands share the host's network, unfiltered.
	EgressOff EgressEnforcement = "off"
)

// EgressOptions configure the enforcement of network policies.
type EgressOptions struct {
	Enforcement EgressEnforcement
	// Hosts maps a domain (or "domain:port") to the "ip:port" the proxy
	// connects to instead of resolving it: tests' upstreams on loopback under
	// real-looking names.
	Hosts map[string]string
	// UpstreamRoots are CAs trusted for upstream TLS besides the system's.
	UpstreamRoots *x509.CertPool
	// AllowPrivateDestinations lets sandboxes reach loopback and private
	// addresses through the proxy. Off: the host's loopback services stay
	// out of reach (Hosts entries excepted).
	AllowPrivateDestinations bool
	// Issuer is the `iss` of forwardURL tokens; "" = the emulator's URL
	// (Start). The emulator serves their keys at <URL>/.well-known/jwks.
	Issuer string
}

// egressState is the emulator's side of enforcement.
type egressState struct {
	on  bool
	why string // why not, when off

	mu     sync.Mutex
	proxy  *egress.Proxy // created on first use: the issuer is the URL Start gives
	bundle string        // host file: the system roots plus the proxy's CA
	err    error
}

// initEgress decides whether policies are enforced; called once by New.
func (e *Emulator) initEgress() error {
	ok, why := e.runner.NetworkIsolation()
	switch e.opts.Egress.Enforcement {
	case EgressAuto:
		e.egress.on, e.egress.why = ok, why
	case EgressOn:
		if !ok {
			return fmt.Errorf("emulator: Egress.Enforcement %q: %s", EgressOn, why)
		}
		e.egress.on = true
	case EgressOff:
		e.egress.why = "Egress.Enforcement is off"
	default:
		return fmt.Errorf("emulator: Egress.Enforcement must be \"\", \"on\" or \"off\", not %q", e.opts.Egress.Enforcement)
	}
	if !e.egress.on && e.runner.Mode() != sandboxruntime.ModeNone {
		e.log.Warn("emulator: network policies are NOT enforced: sandbox commands share the host's network and reach its loopback services",
			"why", e.egress.why)
	}
	return nil
}

// EgressEnforced reports whether network policies are enforced, and why not.
func (e *Emulator) EgressEnforced() (bool, string) { return e.egress.on, e.egress.why }

// EgressDescription is one line for the start-up banner.
func (e *Emulator) EgressDescription() string {
	if e.egress.on {
		return fmt.Sprintf("enforced: each session's commands have their own network; their way out is the egress proxy at %s inside it", egressProxyURL)
	}
	return "NOT enforced (" + e.egress.why + "): commands share the host's network"
}

// egressProxy returns the emulator's egress proxy and its CA bundle file,
// creating them on first use.
func (e *Emulator) egressProxy() (*egress.Proxy, string, error) {
	st := &e.egress
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.proxy != nil || st.err != nil {
		return st.proxy, st.bundle, st.err
	}
	o := e.opts.Egress
	issuer := o.Issuer
	if issuer == "" {
		issuer = e.URL()
	}
	p, err := egress.New(egress.Options{
		Hosts: o.Hosts, UpstreamRoots: o.UpstreamRoots, AllowPrivateDestinations: o.AllowPrivateDestinations,
		Issuer: issuer,
		Logf:   func(format string, args ...any) { e.log.Debug("emulator: egress: " + fmt.Sprintf(format, args...)) },
		OnTransfer: func(s egress.Session, out, in int64) {
			if v, ok := s.(*egressView); ok {
				e.countTransfer(v.s, out, in)
			}
		},
	})
	if err == nil {
		st.bundle, err = sandboxruntime.WriteCABundle(filepath.Join(e.dataDir, "egress"), p.CACertPEM())
	}
	if err != nil {
		st.err = fmt.Errorf("egress proxy: %w", err)
		return nil, "", st.err
	}
	st.proxy = p
	return p, st.bundle, nil
}

// countTransfer adds what a sandbox connection moved to its session.
func (e *Emulator) countTransfer(s *sessionRec, out, in int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s.egressBytes += out
	s.ingressBytes += in
}

// sessionNet is a running session's network: its namespace and the egress
// proxy serving it there.
type sessionNet struct {
	ns     *sandboxruntime.NetNS
	ln     net.Listener
	served chan struct{} // closed when the proxy's Serve returned
}

// egressCloseWait bounds how long a stop waits for the proxy's requests to
// end (Serve closes their connections, so they end at once in practice).
const egressCloseWait = 10 * time.Second

// close ends the proxy (its connections included) and releases the
// namespace; it disappears once the session's processes are gone.
func (n *sessionNet) close(e *Emulator, id string) {
	_ = n.ln.Close()
	t := time.NewTimer(egressCloseWait)
	defer t.Stop()
	select {
	case <-n.served:
	case <-t.C:
		e.log.Warn("emulator: the egress proxy of a stopped session still serves requests", "session", id)
	}
	_ = n.ns.Close()
}

// netLocked gives a running session its network on first need; nil when
// policies are not enforced.
func (e *Emulator) netLocked(s *sessionRec) (*sessionNet, *apiError) {
	if !e.egress.on || s.net != nil {
		return s.net, nil
	}
	p, _, err := e.egressProxy()
	if err != nil {
		return nil, egressError(err)
	}
	ns, err := e.runner.NewNetNS()
	if err != nil {
		return nil, egressError(err)
	}
	ln, err := ns.Listen("tcp", "127.0.0.1:"+strconv.Itoa(EgressProxyPort))
	if err != nil {
		_ = ns.Close()
		return nil, egressError(fmt.Errorf("egress listener: %w", err))
	}
	n := &sessionNet{ns: ns, ln: ln, served: make(chan struct{})}
	view := &egressView{e: e, s: s, id: egress.Identity{
		TeamID: s.sb.scope.team, ProjectID: s.sb.scope.project, SandboxID: s.id, SandboxName: s.sb.name,
	}}
	go func() {
		defer close(n.served)
		if err := p.Serve(ln, view); err != nil {
			e.log.Warn("emulator: egress proxy ended", "session", s.id, "err", err)
		}
	}()
	s.net = n
	return n, nil
}

// egressCommandLocked puts a command of s into the session's network, with
// the proxy in its environment and its CA trusted. Nothing changes when
// policies are not enforced.
func (e *Emulator) egressCommandLocked(s *sessionRec, spec *sandboxruntime.Command) *apiError {
	n, aerr := e.netLocked(s)
	if n == nil {
		return aerr
	}
	_, bundle, err := e.egressProxy()
	if err != nil {
		return egressError(err)
	}
	spec.NetNS, spec.CABundle = n.ns, bundle
	for k, v := range map[string]string{
		"HTTP_PROXY": egressProxyURL, "HTTPS_PROXY": egressProxyURL, "http_proxy": egressProxyURL, "https_proxy": egressProxyURL,
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
	} {
		if _, set := spec.Env[k]; !set { // a command's own choice wins: it cannot get out another way
			spec.Env[k] = v
		}
	}
	return nil
}

// egressView is what the proxy asks per request: the session's current
// policy, compiled once per change, and its identity.
type egressView struct {
	e  *Emulator
	s  *sessionRec
	id egress.Identity

	mu       sync.Mutex
	compiled bool
	src      *policySpec // the stored policy pol was compiled from
	pol      *egress.Policy
}

// Policy returns the session's current policy. One that does not compile
// is nil: the proxy denies everything (fail closed).
func (v *egressView) Policy() *egress.Policy {
	v.e.mu.Lock()
	spec := v.s.policy
	v.e.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.compiled && spec == v.src {
		return v.pol
	}
	var raw json.RawMessage
	if spec != nil {
		raw = spec.raw
	}
	pol, err := egress.Compile(raw)
	if err != nil {
		// Not the error itself: it may quote the policy's values.
		v.e.log.Error("emulator: a stored network policy does not compile; the session's egress is denied", "session", v.s.id)
		pol = nil
	}
	v.compiled, v.src, v.pol = true, spec, pol
	return pol
}

// Identity names the session's sandbox.
func (v *egressView) Identity() egress.Identity { return v.id }

// jwksPath is where the emulator serves the keys of forwardURL tokens.
const jwksPath = "/.well-known/jwks"

// serveJWKS answers the keys that verify forwardURL tokens.
func (e *Emulator) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !e.egress.on {
		writeError(w, notFound("Network policies are not enforced by this emulator: it signs no forward tokens."))
		return
	}
	p, _, err := e.egressProxy()
	if err != nil {
		writeError(w, egressError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(p.JWKS())
}

// egressError is the answer when a session's network cannot be set up.
func egressError(err error) *apiError {
	return &apiError{status: 500, code: "internal_server_error", message: "Could not prepare the session's network: " + err.Error()}
}
