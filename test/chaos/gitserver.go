package chaos

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// gitServer serves one repository over git's "dumb" HTTP protocol on
// loopback, to clients that authenticate with the username and password of
// one of the workload's git Secrets: a recipe that clones it passes only if
// the controller hands the Secret's credentials to git. Commands of the
// emulator's namespace mode share the host's network, so they reach it.
type gitServer struct {
	url string
	srv *http.Server

	mu      sync.Mutex
	creds   map[string]string // username -> password
	clones  int               // authenticated requests for info/refs
	refused int               // requests with wrong credentials
}

// gitHost is the name the repository is served under: the emulator's
// egress proxy maps it to the server's loopback address.
const gitHost = "git.chaos.test"

// startGitServer creates the repository under dir and serves it on ln.
func startGitServer(dir string, ln net.Listener) (*gitServer, error) {
	src, bare := filepath.Join(dir, "src"), filepath.Join(dir, "repo.git")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(src, "README"), []byte("chaos\n"), 0o644); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		dir  string
		args []string
	}{
		{src, []string{"init", "-q"}},
		{src, []string{"add", "README"}},
		{src, []string{"-c", "user.name=chaos", "-c", "user.email=chaos@example.invalid", "commit", "-q", "-m", "chaos"}},
		{dir, []string{"clone", "-q", "--bare", src, bare}},
		{bare, []string{"update-server-info"}},
	} {
		cmd := exec.Command("git", c.args...)
		cmd.Dir = c.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %v: %w: %s", c.args, err, out)
		}
	}
	g := &gitServer{url: "http://" + gitHost + "/repo.git", creds: map[string]string{}}
	files := http.FileServer(http.Dir(dir))
	g.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		g.mu.Lock()
		want, known := g.creds[user]
		good := ok && known && pass == want
		switch {
		case good && r.URL.Path == "/repo.git/info/refs":
			g.clones++
		case !good && ok:
			g.refused++
		}
		g.mu.Unlock()
		if !good {
			w.Header().Set("WWW-Authenticate", `Basic realm="chaos"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(w, r)
	})}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// allow accepts a username and password.
func (g *gitServer) allow(user, pass string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.creds[user] = pass
}

func (g *gitServer) counts() (clones, refused int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clones, g.refused
}

func (g *gitServer) close() { _ = g.srv.Close() }
