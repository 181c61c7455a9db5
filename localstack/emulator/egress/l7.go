package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// This file applies a domain's L7 rules to one request the proxy has read
// (plain http://, or https:// after terminating TLS): the first rule whose
// match accepts the request acts; without one the request passes unchanged.

// Forwarding headers of the SDK's defineSandboxProxy (dist/proxy.js).
const (
	hdrForwardedHost   = "Vercel-Forwarded-Host"
	hdrForwardedScheme = "Vercel-Forwarded-Scheme"
	hdrForwardedPort   = "Vercel-Forwarded-Port"
	hdrForwardedPath   = "Vercel-Forwarded-Path"
	hdrOIDCToken       = "Vercel-Sandbox-Oidc-Token"
)

type dialKey struct{}

func (p *Proxy) serveL7(st *serveState, tr *http.Transport, w http.ResponseWriter, r *http.Request, scheme string, t *target) {
	var rl *rule
	idx := -1
	if t.dom.hasRules() {
		if hasDotSegment(r.URL.Path) {
			// Rules match on the path as sent; an upstream that resolves
			// "/v1/../admin" would otherwise get a credential meant for /v1/.
			p.refuse(w, r.Method, t.host, &refusal{status: http.StatusBadRequest, reason: "dot segment in path",
				body: "The egress proxy refuses paths with . or .. segments on domains with network policy rules.\n"})
			return
		}
		idx, rl = t.dom.firstRule(r)
	}
	switch {
	case rl == nil:
		p.opts.Logf("egress: %s %s://%s: passed (no rule)", r.Method, scheme, t.host)
		p.pass(tr, w, r, scheme, t, nil)
	case rl.kind == kindResponse:
		p.opts.Logf("egress: %s %s://%s: rule %d answered (response %d)", r.Method, scheme, t.host, idx, rl.response.status)
		respond(w, rl.response)
	case rl.kind == kindForward:
		p.opts.Logf("egress: %s %s://%s: rule %d forwarded to the rule's forwardURL", r.Method, scheme, t.host, idx)
		p.forward(st, tr, w, r, scheme, t, rl.forward)
	default:
		p.opts.Logf("egress: %s %s://%s: rule %d transformed (%d header sets)", r.Method, scheme, t.host, idx, len(rl.transform))
		p.pass(tr, w, r, scheme, t, rl.transform)
	}
}

func hasDotSegment(path string) bool {
	for _, seg := range strings.Split(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

func respond(w http.ResponseWriter, c *cannedResponse) {
	for k, v := range c.headers {
		w.Header().Set(k, v)
	}
	if c.contentType != nil {
		w.Header().Set("Content-Type", *c.contentType)
	}
	w.WriteHeader(c.status)
	if c.body != nil {
		_, _ = io.WriteString(w, *c.body)
	}
}

// hostHeader is host[:port], the port omitted when it is the scheme's default.
func hostHeader(scheme, host, port string) string {
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, port)
}

// pass sends the request to its destination, with transform headers set
// over whatever the sandbox sent under those names.
func (p *Proxy) pass(tr *http.Transport, w http.ResponseWriter, r *http.Request, scheme string, t *target, transform []map[string]string) {
	rp := p.reverseProxy(tr, t.host, func(pr *httputil.ProxyRequest) {
		pr.Out.URL = &url.URL{Scheme: scheme, Host: net.JoinHostPort(t.host, t.port),
			Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
		pr.Out.Host = hostHeader(scheme, t.host, t.port)
		for _, h := range transform {
			for k, v := range h {
				pr.Out.Header.Set(k, v)
			}
		}
	})
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), dialKey{}, t.addr)))
}

// forward sends the request to a forwardURL: the forward URL's path
// followed by the original path and query, with the forwarding headers
// and a fresh token naming the session's sandbox. The forward URL is the
// policy author's endpoint, so the sandbox's policy does not apply to it;
// the private-address rule does.
func (p *Proxy) forward(st *serveState, tr *http.Transport, w http.ResponseWriter, r *http.Request, scheme string, t *target, fu *url.URL) {
	ft := &target{host: normalizeHost(fu.Hostname()), port: fu.Port()}
	if ft.port == "" {
		ft.port = "443"
	}
	if err := p.resolveForward(r.Context(), ft); err != nil {
		p.opts.Logf("egress: %s %s://%s: forward URL refused: %s", r.Method, scheme, t.host, err)
		p.refuse(w, r.Method, t.host, &refusal{status: http.StatusBadGateway, reason: "forward URL unreachable",
			body: fmt.Sprintf("The egress proxy cannot reach the forward URL of the network policy rule for %s.\n", t.host)})
		return
	}
	token, err := p.sig.sign(p.opts.Issuer, audience(fu), st.sess.Identity(), p.opts.Now())
	if err != nil {
		p.refuse(w, r.Method, t.host, &refusal{status: http.StatusInternalServerError, reason: "token signing failed",
			body: "The egress proxy could not sign the forward token.\n"})
		return
	}
	base := strings.TrimRight(fu.Path, "/")
	rawBase := strings.TrimRight(fu.EscapedPath(), "/")
	rp := p.reverseProxy(tr, "the forward URL for "+t.host, func(pr *httputil.ProxyRequest) {
		out := &url.URL{Scheme: "https", Host: net.JoinHostPort(ft.host, ft.port),
			Path: base + r.URL.Path, RawQuery: r.URL.RawQuery}
		if r.URL.RawPath != "" {
			out.RawPath = rawBase + r.URL.RawPath
		}
		pr.Out.URL = out
		pr.Out.Host = hostHeader("https", ft.host, ft.port)
		h := pr.Out.Header
		h.Set(hdrForwardedHost, t.host)
		h.Set(hdrForwardedScheme, scheme)
		h.Set(hdrForwardedPort, t.port)
		h.Set(hdrForwardedPath, r.URL.RequestURI())
		h.Set(hdrOIDCToken, token)
	})
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), dialKey{}, ft.addr)))
}

// resolveForward chooses the address of a forward URL's host.
func (p *Proxy) resolveForward(ctx context.Context, ft *target) error {
	ip, err := netipParse(ft.host)
	ft.isIP = err == nil
	addrs, port, rf := p.resolve(ctx, ft, ip)
	if rf != nil {
		return errors.New(rf.reason)
	}
	for _, a := range addrs {
		if ft.mapped || p.opts.AllowPrivateDestinations || !isPrivate(a) {
			ft.addr = net.JoinHostPort(a.String(), port)
			return nil
		}
	}
	return errors.New("private address")
}

// reverseProxy streams the upstream's answer back. Errors are logged and
// answered without the upstream URL: it may be a forward URL carrying a
// token.
func (p *Proxy) reverseProxy(tr *http.Transport, what string, rewrite func(*httputil.ProxyRequest)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:       rewrite,
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			if errors.Is(err, context.Canceled) {
				return // the sandbox went away
			}
			p.opts.Logf("egress: %s to %s failed: %v", r.Method, what, err)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = fmt.Fprintf(w, "The egress proxy could not complete the request to %s.\n", what)
		},
	}
}
