package emulator

// Public routes. Vercel gives each exposed port of a running session a public
// URL (https://sb-….vercel.run). With Options.ServeRoutes the emulator stands
// in for that domain: a route's URL is <emulator URL>/_routes/<subdomain>, and
// a request under it is forwarded to the port on loopback, where the
// session's processes listen: they share the host's network in every exec
// mode (the runtime gives commands a mount and user namespace, never a
// network one). So a server a command starts in the sandbox answers on its
// route, as on Vercel, and a client can probe it end to end.

import (
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

// routeTarget finds the port a running session exposes under subdomain.
func (e *Emulator) routeTarget(subdomain string) (int64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.st.sessions {
		if s.status != vercel.SessionRunning {
			continue
		}
		for _, p := range s.sb.ports {
			if routeFor(s.id, p).Subdomain == subdomain {
				return p, true
			}
		}
	}
	return 0, false
}

// serveRoute forwards a request for /_routes/<subdomain>/<path> to the
// route's port on loopback. A route without a running session, or a port
// nothing listens on, answers 502, as a public route to a sandbox that
// serves nothing does. No token is needed: routes are public.
func (e *Emulator) serveRoute(w http.ResponseWriter, r *http.Request) {
	sub, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, routesPrefix), "/")
	port, ok := e.routeTarget(sub)
	if !ok || !e.opts.ServeRoutes {
		http.Error(w, "no running sandbox session serves this route", http.StatusBadGateway)
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
		Transport: routeTransport,
	}
	proxy.ServeHTTP(w, r)
}

// routeTransport forwards route requests. A server in a sandbox that accepts
// a connection and never answers must not hold the emulator's connection
// forever; no connection is kept idle, so none outlives a session's server.
var routeTransport = &http.Transport{
	ResponseHeaderTimeout: time.Minute,
	DisableKeepAlives:     true,
}
