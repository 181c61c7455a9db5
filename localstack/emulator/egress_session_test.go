package emulator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// egressTestEnforcement is the enforcement the egress tests run with. Set it
// to EgressOff to see each of them fail: every one asserts something only
// the session's network and its proxy give.
var egressTestEnforcement = EgressOn

// newEgressEnv starts an emulator in exec mode namespace with network
// policies enforced, or skips where the host cannot isolate (not root, no
// user or network namespaces) or has no curl to probe with.
func newEgressEnv(t *testing.T, opts Options) *tenv {
	t.Helper()
	for _, p := range []string{"/usr/bin/curl", "/usr/bin/python3"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s inside sandboxes", p)
		}
	}
	r, err := sandboxruntime.NewRunner(sandboxruntime.ModeNamespace, sandboxruntime.RunnerOptions{})
	if err != nil {
		t.Skipf("exec mode namespace unavailable: %v", err)
	}
	if ok, why := r.NetworkIsolation(); !ok {
		t.Skipf("network isolation unavailable: %s", why)
	}
	opts.Exec = "namespace"
	opts.Egress.Enforcement = egressTestEnforcement
	return newEnv(t, opts)
}

// cmdResult is what a command printed and its exit code.
type cmdResult struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// sh runs a shell script in session sid and waits for it.
func (te *tenv) sh(sid, script string) cmdResult {
	te.t.Helper()
	start := time.Now()
	_, recs := te.stream("POST", "/v2/sandboxes/sessions/"+sid+"/cmd", map[string]any{
		"command": "sh", "args": []string{"-c", script}, "wait": true, "logs": true,
	})
	res := cmdResult{code: -1, took: time.Since(start)}
	for _, r := range recs {
		if r.Command != nil && r.Command.ExitCode != nil {
			res.code = *r.Command.ExitCode
		}
		var s string
		if r.Stream == "" || json.Unmarshal(r.Data, &s) != nil {
			continue
		}
		if r.Stream == "stdout" {
			res.stdout += s
		} else {
			res.stderr += s
		}
	}
	return res
}

// canary returns a value unique to this run.
func canary(t *testing.T, prefix string) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// TestEgressHostLoopbackUnreachable is make dev's hole: a service on the
// host's loopback (there the local etcd, which holds every Secret) must be
// out of a command's reach, directly and through the proxy.
func TestEgressHostLoopbackUnreachable(t *testing.T) {
	secret := canary(t, "etcd-canary-")
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, secret) }))
	defer host.Close()
	te := newEgressEnv(t, Options{})
	sb := te.create(nil) // allow-all: the most a policy can allow

	direct := te.sh(sb.Session.ID, "curl -sS --noproxy '*' --max-time 5 "+host.URL+"/")
	if direct.code == 0 || strings.Contains(direct.stdout, secret) || direct.took > 5*time.Second {
		t.Fatalf("a command reached the host's loopback service directly: %+v", direct)
	}
	if !strings.Contains(direct.stderr, "Couldn't connect") {
		t.Errorf("want the connection refused, got %+v", direct)
	}
	proxied := te.sh(sb.Session.ID, "curl -sS --max-time 5 --noproxy '' -x "+egressProxyURL+" "+host.URL+"/")
	if strings.Contains(proxied.stdout, secret) || !strings.Contains(proxied.stdout, "loopback, private or link-local") {
		t.Fatalf("through the proxy: %+v, want its refusal", proxied)
	}
}

// TestEgressDenyAll checks that deny-all fails fast, with the proxy's 403,
// over HTTPS (CONNECT) and plain HTTP.
func TestEgressDenyAll(t *testing.T) {
	te := newEgressEnv(t, Options{})
	sb := te.create(map[string]any{"networkPolicy": map[string]any{"mode": "deny-all"}})
	res := te.sh(sb.Session.ID, "curl -sS -o /dev/null -w '%{http_connect}' --max-time 10 https://example.test/")
	if res.code == 0 || res.stdout != "403" || res.took > 5*time.Second {
		t.Fatalf("https under deny-all: %+v, want the proxy's 403 at once", res)
	}
	res = te.sh(sb.Session.ID, "curl -sS -w ' %{http_code}' --max-time 10 http://example.test/")
	if !strings.Contains(res.stdout, "network policy blocks example.test") || !strings.HasSuffix(res.stdout, " 403") {
		t.Fatalf("http under deny-all: %+v, want the proxy's 403", res)
	}
}

// upstream is a loopback server standing for a real API under the names it
// is given: it records the header X-Canary of each request.
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

// newUpstream starts an upstream; with TLS, its certificate names names.
func newUpstream(t *testing.T, withTLS bool, names ...string) *upstream {
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Get("X-Canary"))
		u.mu.Unlock()
		_, _ = io.WriteString(w, "upstream saw "+r.Method+" "+r.URL.Path)
	}))
	if withTLS {
		u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t, names)}}
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	return u
}

// selfSigned returns a certificate for names, signed by itself.
func selfSigned(t *testing.T, names []string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (u *upstream) headers() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// egressUpstreamOptions maps names to u and trusts its certificate.
func egressUpstreamOptions(u *upstream, names ...string) Options {
	pool := x509.NewCertPool()
	if u.srv.TLS != nil {
		pool.AddCert(u.srv.Certificate())
	}
	hosts := map[string]string{}
	for _, n := range names {
		hosts[n] = u.srv.Listener.Addr().String()
	}
	return Options{Egress: EgressOptions{Hosts: hosts, UpstreamRoots: pool}}
}

// TestEgressTransformCanary checks that a header a transform injects
// reaches the upstream of an allowed domain over HTTPS (TLS terminated with
// the emulator's CA, which the sandbox trusts) and appears nowhere inside the
// sandbox: environment, /proc/*/environ, the session's files, command output.
func TestEgressTransformCanary(t *testing.T) {
	u := newUpstream(t, true, "api.example.test")
	te := newEgressEnv(t, egressUpstreamOptions(u, "api.example.test"))
	secret := canary(t, "sk_canary_")
	sb := te.create(map[string]any{"networkPolicy": map[string]any{
		"allow": map[string]any{"api.example.test": []any{map[string]any{"transform": []any{map[string]any{"headers": map[string]string{"X-Canary": secret}}}}}},
	}})
	res := te.sh(sb.Session.ID, "curl -sS --max-time 10 https://api.example.test/v1/x")
	if res.code != 0 || res.stdout != "upstream saw GET /v1/x" {
		t.Fatalf("curl through the transform: %+v", res)
	}
	if got := u.headers(); len(got) != 1 || got[0] != secret {
		t.Fatalf("the upstream saw X-Canary %d times, want once with the canary", len(got))
	}
	look := te.sh(sb.Session.ID, "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; "+
		"grep -rl "+secret+" /vercel /tmp /home /root /var /etc 2>/dev/null; echo searched")
	if !strings.Contains(look.stdout, "HTTPS_PROXY="+egressProxyURL) || !strings.HasSuffix(look.stdout, "searched\n") {
		t.Fatalf("the search did not run: %+v", look)
	}
	for _, out := range []string{res.stdout, res.stderr, look.stdout, look.stderr} {
		if strings.Contains(out, secret) {
			t.Fatalf("the canary is visible inside the sandbox: %q", out)
		}
	}
	_ = filepath.WalkDir(te.e.DataDir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
				t.Errorf("the canary is in %s", p)
			}
		}
		return nil
	})
}

// TestEgressPolicyUpdate checks that an update of a running session's
// policy applies to its next request.
func TestEgressPolicyUpdate(t *testing.T) {
	// Plain HTTP: a tunnel to a domain without rules would show the
	// sandbox the upstream's own (test) certificate.
	u := newUpstream(t, false)
	te := newEgressEnv(t, egressUpstreamOptions(u, "a.example.test", "b.example.test"))
	sb := te.create(map[string]any{"networkPolicy": map[string]any{"allow": []string{"a.example.test"}}})
	curl := "curl -sS -w ' %{http_code}' --max-time 10 http://b.example.test/v1/"
	if res := te.sh(sb.Session.ID, curl); !strings.Contains(res.stdout, "network policy blocks b.example.test") {
		t.Fatalf("b before the update: %+v, want the proxy's 403", res)
	}
	te.must(200, "POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/network-policy", map[string]any{"allow": []string{"a.example.test", "b.example.test"}}, nil)
	if res := te.sh(sb.Session.ID, curl); res.code != 0 || !strings.HasPrefix(res.stdout, "upstream saw GET /v1/") {
		t.Fatalf("b after the update: %+v", res)
	}
	te.must(200, "POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/network-policy", map[string]any{"mode": "deny-all"}, nil)
	if res := te.sh(sb.Session.ID, curl); !strings.HasSuffix(res.stdout, " 403") {
		t.Fatalf("b after deny-all: %+v", res)
	}
	// What went through the proxy is the session's networkTransfer.
	stopped := te.stop(sb.Session.ID)
	if nt := stopped.Session.NetworkTransfer; nt == nil || nt.Egress < 3*int64(len("GET /v1/ HTTP/1.1")) || nt.Ingress < int64(len("upstream saw GET /v1/")) {
		t.Fatalf("networkTransfer %+v, want the bytes of three requests and their answers", nt)
	}
	if _, got := te.getSandbox(sb.Sandbox.Name, false); got.Sandbox.TotalEgressBytes != stopped.Session.NetworkTransfer.Egress {
		t.Errorf("the sandbox's totalEgressBytes %d, the session's egress %d", got.Sandbox.TotalEgressBytes, stopped.Session.NetworkTransfer.Egress)
	}
}

// TestEgressRoutesOwnPorts checks that a route reaches the server a command
// started, inside its session's network, and that two sessions serve the
// same port, each its own.
func TestEgressRoutesOwnPorts(t *testing.T) {
	te := newEgressEnv(t, Options{ServeRoutes: true})
	if _, err := te.e.Start(""); err != nil {
		t.Fatal(err)
	}
	const port = 18089
	for _, name := range []string{"one", "two"} {
		sb := te.create(map[string]any{"ports": []int{port}})
		te.sh(sb.Session.ID, "echo -n "+name+" > /vercel/sandbox/who")
		te.must(200, "POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/cmd", map[string]any{
			"command": "python3", "args": []string{"-m", "http.server", "18089", "--bind", "127.0.0.1"},
		}, nil)
		url := sb.Routes[0].URL + "/who"
		deadline := time.Now().Add(20 * time.Second)
		for {
			res, err := te.hc.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				if string(b) != name {
					t.Fatalf("session %s's route answered %q", name, b)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s's route: %d %s", name, res.StatusCode, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestEgressTeardown checks that a stopped session leaves nothing: its
// network namespace is held by no process and no fd, its proxy's goroutines
// and fds are gone; and that the proxy's keys are served.
func TestEgressTeardown(t *testing.T) {
	te := newEgressEnv(t, Options{})
	if _, err := te.e.Start(""); err != nil {
		t.Fatal(err)
	}
	// A first session creates what lives as long as the emulator (the
	// proxy, its CA bundle, runtime threads).
	warm := te.create(nil)
	te.sh(warm.Session.ID, "true")
	te.stop(warm.Session.ID)
	te.hc.CloseIdleConnections()
	fds := countFDs(t)

	sb := te.create(nil)
	res := te.sh(sb.Session.ID, "readlink /proc/self/ns/net; (sleep 60 &); curl -s --max-time 2 -o /dev/null -w '%{http_code}' --noproxy '' -x "+egressProxyURL+" http://127.0.0.1:1/")
	self, _ := os.Readlink("/proc/self/ns/net")
	id, proxied, _ := strings.Cut(res.stdout, "\n")
	if !strings.HasPrefix(id, "net:[") || id == self || proxied != "403" {
		t.Fatalf("the session's network %q (the host's %q), proxy answer %q: want its own network and the proxy in it", id, self, proxied)
	}
	if len(nsHolders(id)) == 0 || proxyGoroutines() == 0 {
		t.Fatal("nothing holds the running session's network, or no proxy serves it")
	}
	te.stop(sb.Session.ID)
	te.hc.CloseIdleConnections()
	if got := nsHolders(id); len(got) != 0 {
		t.Errorf("the stopped session's network %s is still held by %v", id, got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for countFDs(t) > fds || proxyGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after stop: %d fds (%d before), %d goroutines of the egress proxy", countFDs(t), fds, proxyGoroutines())
		}
		time.Sleep(20 * time.Millisecond)
	}

	res2, err := te.hc.Get(te.e.URL() + "/.well-known/jwks")
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	var jwks struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.NewDecoder(res2.Body).Decode(&jwks); err != nil || res2.StatusCode != 200 || len(jwks.Keys) == 0 {
		t.Fatalf("/.well-known/jwks: %d %v %+v", res2.StatusCode, err, jwks)
	}
}

// proxyGoroutines counts the goroutines that serve a session's egress.
func proxyGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "egress.(*Proxy).Serve") || strings.Contains(g, "(*Emulator).netLocked") {
			n++
		}
	}
	return n
}

// nsHolders lists the processes in network namespace id ("net:[…]") and
// the fds of this process that hold it.
func nsHolders(id string) []string {
	var out []string
	for _, pattern := range []string{"/proc/[0-9]*/ns/net", "/proc/self/fd/*"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if l, _ := os.Readlink(p); l == id {
				out = append(out, p)
			}
		}
	}
	return out
}

// countFDs counts this process's open file descriptors.
func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestEgressNotEnforcedLogsOnce checks that an emulator whose commands share
// the host's network says so, once, and serves no token keys.
func TestEgressNotEnforcedLogsOnce(t *testing.T) {
	var logs strings.Builder
	te := newEnv(t, Options{Exec: "host", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if n := strings.Count(logs.String(), "network policies are NOT enforced"); n != 1 {
		t.Errorf("logged %d times, want once: %s", n, logs.String())
	}
	if on, why := te.e.EgressEnforced(); on || !strings.Contains(why, "exec=host") {
		t.Errorf("EgressEnforced() = %v, %q", on, why)
	}
	if d := te.e.ExecDescription(); !strings.Contains(d, "network policies NOT enforced") {
		t.Errorf("ExecDescription() = %q", d)
	}
	if r := te.req("GET", "/.well-known/jwks", nil); r.status != 404 {
		t.Errorf("jwks without enforcement: %d %s", r.status, r.body)
	}
	if _, err := New(Options{Exec: "host", Egress: EgressOptions{Enforcement: EgressOn}}); err == nil {
		t.Error("Enforcement on in exec mode host: no error")
	}
}
