package main

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// This file is the broker's request path: verify the forwarded request's
// token, find the Sandbox and its conversation, add the conversation's
// credential and send the request on to where the sandbox sent it.

// The headers Vercel's firewall adds to a request it forwards to a
// forwardURL (defineSandboxProxy's names). None of them goes upstream.
const (
	hdrForwardedHost   = "Vercel-Forwarded-Host"
	hdrForwardedScheme = "Vercel-Forwarded-Scheme"
	hdrForwardedPort   = "Vercel-Forwarded-Port"
	hdrForwardedPath   = "Vercel-Forwarded-Path"
	hdrOIDCToken       = "Vercel-Sandbox-Oidc-Token"
)

// sandboxFinder is sandboxIndex's lookup.
type sandboxFinder interface {
	find(ctx context.Context, vercelName string) (*sandboxv1.Sandbox, string, error)
}

// Broker is the http.Handler a forwardURL points at.
type Broker struct {
	// origin is the broker's public origin, "https://broker.example.com":
	// the forward URLs' scheme and host, which the tokens' aud names.
	origin string
	// teamID and projectID: tokens of other Vercel teams and projects are
	// refused. oidc.vercel.com signs for every Vercel customer, and any of
	// them can point a forwardURL here.
	teamID, projectID string
	verifier          *verifier
	sandboxes         sandboxFinder
	creds             Credentials
	upstream          http.RoundTripper
	logf              func(format string, args ...any)
}

// forwarded is what a forwarded request says about its original request.
type forwarded struct {
	host, scheme, port, path, token string
}

// take removes the forwarding headers from h and returns them.
func take(h http.Header) forwarded {
	f := forwarded{host: h.Get(hdrForwardedHost), scheme: h.Get(hdrForwardedScheme), port: h.Get(hdrForwardedPort),
		path: h.Get(hdrForwardedPath), token: h.Get(hdrOIDCToken)}
	for _, k := range []string{hdrForwardedHost, hdrForwardedScheme, hdrForwardedPort, hdrForwardedPath, hdrOIDCToken} {
		h.Del(k)
	}
	return f
}

// refuse answers every refusal alike, 403 "Forbidden", so a caller learns
// nothing about which check failed; the log says which.
func (b *Broker) refuse(w http.ResponseWriter, r *http.Request, who, why string) {
	b.logf("Refused forwarded request: method=%s sandbox=%q reason=%q", r.Method, who, why)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	_, _ = io.WriteString(w, "Forbidden\n")
}

func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := take(r.Header)
	if f.host == "" || f.scheme == "" || f.port == "" || f.path == "" || f.token == "" {
		b.refuse(w, r, "", "missing forwarding headers")
		return
	}
	dest, err := destination(f)
	if err != nil {
		b.refuse(w, r, "", err.Error())
		return
	}
	aud, err := forwardAudience(b.origin, r.URL.EscapedPath(), f.path)
	if err != nil {
		b.refuse(w, r, "", err.Error())
		return
	}
	id, err := b.verifier.verify(r.Context(), f.token, aud)
	if err != nil {
		b.refuse(w, r, "", "token: "+err.Error())
		return
	}
	if id.TeamID != b.teamID || id.ProjectID != b.projectID {
		b.refuse(w, r, id.SandboxName, "token of another Vercel team or project")
		return
	}
	sbx, conv, err := b.sandboxes.find(r.Context(), id.SandboxName)
	if err != nil {
		b.refuse(w, r, id.SandboxName, err.Error())
		return
	}
	// A credential never crosses plain HTTP, even where the sandbox's own
	// request did (a forwardURL rule on an http:// request).
	if dest.Scheme != "https" {
		b.refuse(w, r, id.SandboxName, "destination is not https")
		return
	}
	cred, err := b.creds.Headers(r.Context(), conv, f.host)
	if err != nil {
		b.refuse(w, r, id.SandboxName, "credential: "+err.Error())
		return
	}
	b.logf("Forwarding request: method=%s sandbox=%q object=%s/%s conversation=%q host=%s",
		r.Method, id.SandboxName, sbx.Namespace, sbx.Name, conv, f.host)
	b.proxy(w, r, dest, f.host, cred)
}

// destination rebuilds the sandbox's URL (defineSandboxProxy's
// getProxiedRequestUrl), refusing what does not name exactly one host and
// port: the forwarding headers come from the firewall, but a broker should
// not turn a malformed header into a request somewhere else.
func destination(f forwarded) (*url.URL, error) {
	if f.scheme != "https" && f.scheme != "http" {
		return nil, errors.New("forwarded scheme is not http or https")
	}
	if p, err := strconv.Atoi(f.port); err != nil || p < 1 || p > 65535 {
		return nil, errors.New("forwarded port is not a port")
	}
	if !strings.HasPrefix(f.path, "/") || strings.HasPrefix(f.path, "//") {
		return nil, errors.New("forwarded path is not an absolute path")
	}
	u, err := url.Parse(f.scheme + "://" + net.JoinHostPort(f.host, f.port) + f.path)
	if err != nil || u.Hostname() != f.host || u.Port() != f.port || u.User != nil || u.Fragment != "" {
		return nil, errors.New("forwarded host, port or path do not form a URL")
	}
	return u, nil
}

// proxy streams the request to dest with the credential set over whatever
// the sandbox sent under those header names, and streams the answer back.
func (b *Broker) proxy(w http.ResponseWriter, r *http.Request, dest *url.URL, host string, cred http.Header) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = dest
			pr.Out.Host = strings.TrimSuffix(dest.Host, ":443") // dest is https
			for k, v := range cred {
				pr.Out.Header[k] = v
			}
		},
		Transport:     b.upstream,
		FlushInterval: -1, // stream: server-sent events, long downloads
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// url.Error quotes the URL, whose query may be sensitive.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			if !errors.Is(err, context.Canceled) {
				b.logf("Upstream request failed: method=%s host=%s error=%q", r.Method, host, err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

// newUpstreamTransport is the transport to the providers' APIs. No overall
// timeout (responses stream), but every phase before the answer has one.
func newUpstreamTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the broker talks to the providers directly
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.ResponseHeaderTimeout = 60 * time.Second
	return tr
}
