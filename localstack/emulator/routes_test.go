package emulator

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// TestServeRoutes checks that, with ServeRoutes, a route's URL reaches the
// session's port on loopback (path and query kept), answers 502 when nothing
// listens, and stops serving once the session stopped.
func TestServeRoutes(t *testing.T) {
	te := newEnv(t, Options{ServeRoutes: true})
	base, err := te.e.Start("")
	if err != nil {
		t.Fatal(err)
	}
	// A server "in the sandbox": the session's processes share the host's
	// loopback, so one the test runs stands for one a command started.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "served "+r.URL.RequestURI())
	}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	// A second port that nothing listens on.
	idle, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	idlePort := idle.Addr().(*net.TCPAddr).Port
	idle.Close()

	out := te.create(map[string]any{"ports": []int{port, idlePort}})
	if len(out.Routes) != 2 {
		t.Fatalf("routes: %+v", out.Routes)
	}
	urls := map[int64]string{}
	for _, rt := range out.Routes {
		if want := base + routesPrefix + rt.Subdomain; rt.URL != want {
			t.Fatalf("route URL %q, want %q", rt.URL, want)
		}
		urls[rt.Port] = rt.URL
	}
	get := func(u string) (int, string) {
		t.Helper()
		res, err := te.hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(urls[int64(port)] + "/healthz?x=1"); code != 200 || body != "served /healthz?x=1" {
		t.Fatalf("route: %d %q", code, body)
	}
	if code, body := get(urls[int64(idlePort)] + "/"); code != http.StatusBadGateway || !strings.Contains(body, "does not answer") {
		t.Fatalf("route to a port nothing listens on: %d %q", code, body)
	}
	if code, _ := get(base + routesPrefix + "sb-unknown/"); code != http.StatusBadGateway {
		t.Fatalf("unknown route: %d", code)
	}

	var stopped vercel.StopSessionResponse
	te.must(200, "POST", "/v2/sandboxes/sessions/"+out.Session.ID+"/stop", nil, &stopped)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := get(urls[int64(port)] + "/healthz")
		if code == http.StatusBadGateway {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("route of a stopped session still answers %d", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
