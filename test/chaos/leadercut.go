package chaos

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// A leader cut off rather than killed: the process keeps running (stopped
// by SIGSTOP, or cut from the API server) while the other replica takes the
// Lease over. Each replica reaches Vercel through its own vercelTap, so that
// every Vercel request is attributed to the replica that made it, and the
// API server through its own apiLink, which the harness can cut.

// tapRequest is one Vercel request seen by a replica's tap.
type tapRequest struct {
	at           time.Time // when the tap received it
	method, path string
	status       int // 0: no answer
}

func (r tapRequest) mutating() bool {
	return r.method != http.MethodGet && r.method != http.MethodHead
}

func (r tapRequest) String() string {
	return fmt.Sprintf("%s %s %s -> %d", r.at.Format("15:04:05.000"), r.method, r.path, r.status)
}

// vercelTap is a replica's way to Vercel: a reverse proxy to the emulator
// that records every request, and can run a hook once, after Vercel has
// applied a mutation and before the replica receives the answer.
type vercelTap struct {
	proxy *httputil.ReverseProxy
	srv   *http.Server
	url   string

	mu     sync.Mutex
	reqs   []tapRequest
	onceMu func(tapRequest) // armed hook, run once for the next mutation
}

func newVercelTap(target string) (*vercelTap, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &vercelTap{proxy: httputil.NewSingleHostReverseProxy(u), url: "http://" + ln.Addr().String()}
	t.proxy.FlushInterval = -1 // command output streams
	t.proxy.ModifyResponse = func(res *http.Response) error {
		req := tapRequest{method: res.Request.Method, path: res.Request.URL.Path, status: res.StatusCode}
		if !req.mutating() {
			return nil
		}
		t.mu.Lock()
		hook := t.onceMu
		t.onceMu = nil
		t.mu.Unlock()
		if hook != nil {
			hook(req) // Vercel applied it; the replica has not seen the answer
		}
		return nil
	}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = t.srv.Serve(ln) }()
	return t, nil
}

func (t *vercelTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := tapRequest{at: time.Now(), method: r.Method, path: r.URL.Path}
	sw := &statusWriter{ResponseWriter: w}
	t.proxy.ServeHTTP(sw, r)
	req.status = sw.status
	t.mu.Lock()
	t.reqs = append(t.reqs, req)
	t.mu.Unlock()
}

// arm runs hook once, on the next mutation Vercel answers.
func (t *vercelTap) arm(hook func(tapRequest)) {
	t.mu.Lock()
	t.onceMu = hook
	t.mu.Unlock()
}

// mutationsSince lists the mutating requests received at or after since.
func (t *vercelTap) mutationsSince(since time.Time) []tapRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []tapRequest
	for _, r := range t.reqs {
		if r.mutating() && !r.at.Before(since) {
			out = append(out, r)
		}
	}
	return out
}

func (t *vercelTap) count() (all, mutating int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.reqs {
		all++
		if r.mutating() {
			mutating++
		}
	}
	return all, mutating
}

func (t *vercelTap) close() { _ = t.srv.Close() }

// apiLink is a replica's TCP path to the API server. cut closes every
// connection and refuses new ones (as a network partition that resets
// connections would); restore lets connections through again.
type apiLink struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func newAPILink(target string) (*apiLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &apiLink{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go l.serve()
	return l, nil
}

func (l *apiLink) addr() string { return l.ln.Addr().String() }

func (l *apiLink) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.pipe(c)
	}
}

func (l *apiLink) pipe(c net.Conn) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	if cut {
		_ = c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	l.conns[c], l.conns[up] = struct{}{}, struct{}{}
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = up.Close()
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

func (l *apiLink) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for c := range l.conns {
			_ = c.Close()
		}
	}
}

func (l *apiLink) close() {
	_ = l.ln.Close()
	l.setCut(true)
}

// kubeconfigVia writes a copy of the kubeconfig at src whose API server,
// which must be apiServer, is reached through addr (the proxy is on
// loopback as the API server is, so the certificate still matches).
func kubeconfigVia(src, dst, apiServer, addr string) error {
	kc, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return err
	}
	for name, c := range kc.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return err
		}
		if u.Host != apiServer {
			return fmt.Errorf("kubeconfig %s: cluster %s is %s, not %s", src, name, u.Host, apiServer)
		}
		u.Host = addr
		c.Server = u.String()
	}
	return clientcmd.WriteToFile(*kc, dst)
}
