package emulator

// Public routes. Vercel gives each exposed port of a running session a public
// URL (https://sb-….vercel.run). With Options.ServeRoutes the emulator stands
// in for that domain: a route's URL is <emulator URL>/_routes/<subdomain>, and
// a request under it is forwarded to the port on 127.0.0.1 where the
// session's processes listen. Where network policies are enforced
// (egress_session.go), that is the loopback of the session's own network
// namespace, dialled from inside it: each session has its own ports, two
// sessions may both serve on 3000, and a session that never ran a command
// serves nothing. Elsewhere the session's processes share the host's network,
// and the port is the host's. So a server a command starts in the sandbox
// answers on its route, as on Vercel, and a client can probe it end to end.

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// routesPrefix is the path under which the emulator serves routes.
const routesPrefix = "/_routes/"

// routeURL is the URL a route is reported with: the emulator's own when it
// serves routes and listens, else Vercel's shape.
func (e *Emulator) routeURL(rt vercel.Route) string {
	if !e.opts.ServeRoutes {
		return rt.URL
	}
	if base := e.URL(); base != "" {
		return base + routesPrefix + rt.Subdomain
	}
	return rt.URL
}

// routeTarget finds the port a running session exposes under subdomain,
// and how to dial it: in the session's network where policies are enforced
// (nil when it has none yet: nothing listens), else on the host's.
func (e *Emulator) routeTarget(subdomain string) (int64, func(context.Context, string, string) (net.Conn, error), bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.st.sessions {
		if s.status != vercel.SessionRunning {
			continue
		}
		for _, p := range s.sb.ports {
			if routeFor(s.id, p).Subdomain != subdomain {
				continue
			}
			switch {
			case !e.egress.on:
				return p, (&net.Dialer{}).DialContext, true
			case s.net != nil:
				return p, s.net.ns.DialContext, true
			}
			return p, nil, true
		}
	}
	return 0, nil, false
}

// serveRoute forwards a request for /_routes/<subdomain>/<path> to the
// route's port on loopback. A route without a running session, or a port
// nothing listens on, answers 502, as a public route to a sandbox that
// serves nothing does. No token is needed: routes are public.
func (e *Emulator) serveRoute(w http.ResponseWriter, r *http.Request) {
	sub, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, routesPrefix), "/")
	port, dial, ok := e.routeTarget(sub)
	if !ok || !e.opts.ServeRoutes {
		http.Error(w, "no running sandbox session serves this route", http.StatusBadGateway)
		return
	}
	if dial == nil {
		http.Error(w, "the sandbox does not answer on port "+strconv.FormatInt(port, 10), http.StatusBadGateway)
		return
	}
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.FormatInt(port, 10)}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = "/" + rest
			pr.Out.URL.RawPath = ""
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			e.log.Debug("emulator: route", "port", port, "err", err)
			http.Error(w, "the sandbox does not answer on port "+strconv.FormatInt(port, 10), http.StatusBadGateway)
		},
		Transport: routeTransport(dial),
	}
	proxy.ServeHTTP(w, r)
}

// routeTransport forwards one route request, connecting with dial. A server
// in a sandbox that accepts a connection and never answers must not hold the
// emulator's connection forever; no connection is kept idle, so none
// outlives a session's server (or keeps its network alive).
func routeTransport(dial func(context.Context, string, string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		DialContext:           dial,
		Proxy:                 nil,
		ResponseHeaderTimeout: time.Minute,
		DisableKeepAlives:     true,
	}
}
