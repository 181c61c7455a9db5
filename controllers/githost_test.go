package controllers_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// gitHost serves the specs' git repositories under one name, gitHostName,
// which the emulator's egress proxy maps to its loopback address: recipe
// builders clone from inside a sandbox, whose network reaches the host's
// loopback only through such a mapping. Its listener is opened before the
// emulator (the mapping is fixed when the emulator starts); specs add
// repositories with add.
type gitHost struct {
	ln    net.Listener
	srv   *http.Server
	mu    sync.Mutex
	repos map[string]http.Handler // by path prefix "/<n>/"
	next  atomic.Int64
}

const gitHostName = "git.suite.test"

func newGitHost() (*gitHost, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gitHost{ln: ln, repos: map[string]http.Handler{}}
	g.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(g.serve)}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

func (g *gitHost) serve(w http.ResponseWriter, r *http.Request) {
	prefix, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	g.mu.Lock()
	h := g.repos["/"+prefix+"/"]
	g.mu.Unlock()
	if h == nil {
		http.NotFound(w, r)
		return
	}
	http.StripPrefix("/"+prefix, h).ServeHTTP(w, r)
}

// add serves h under a new prefix and returns the URL builders use for it.
func (g *gitHost) add(h http.Handler) string {
	prefix := fmt.Sprintf("/%d/", g.next.Add(1))
	g.mu.Lock()
	g.repos[prefix] = h
	g.mu.Unlock()
	return "http://" + gitHostName + strings.TrimSuffix(prefix, "/")
}

func (g *gitHost) close() { _ = g.srv.Close() }
