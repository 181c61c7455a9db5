package emulator

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getsentry/sandbox-controller/localstack/emulator/sandboxruntime"
)

// logBuffer collects the emulator's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sourceEnv is an emulator in exec mode host (sources are materialised) whose
// warnings are collected.
func sourceEnv(t *testing.T, opts Options) (*tenv, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	opts.Exec = "host"
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return newEnv(t, opts), logs
}

// createFromTarball creates a sandbox from a tarball URL and reports whether
// /vercel/sandbox/<probe> holds want afterwards.
func (te *tenv) createFromTarball(url, probe, want string) bool {
	te.t.Helper()
	sb := te.create(map[string]any{"source": map[string]any{"type": "tarball", "url": url}})
	r := te.readFile(sb.Session.ID, "/vercel/sandbox/"+probe)
	return r.status == 200 && string(r.body) == want
}

// countingServer serves data on addr and counts requests.
func countingServer(t *testing.T, addr string, h http.Handler) (url string, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen %s: %v", addr, err)
	}
	hits = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), hits
}

// nonLoopbackIP returns an address of this host that is not loopback.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this host")
	return ""
}

// TestTarballSourceOnlyFromLoopback: http(s) tarballs are fetched from
// loopback only — never from another address, also not through a redirect.
func TestTarballSourceOnlyFromLoopback(t *testing.T) {
	tgz := tarGz(t, map[string]string{"README.md": "from tarball"})
	serve := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(tgz) })
	te, logs := sourceEnv(t, Options{})

	local, localHits := countingServer(t, "127.0.0.1:0", serve)
	if !te.createFromTarball(local+"/x.tar.gz", "README.md", "from tarball") || localHits.Load() != 1 {
		t.Fatalf("loopback tarball not extracted (hits %d); logs: %s", localHits.Load(), logs)
	}

	// A server on this host's non-loopback address stands for any remote URL:
	// the emulator must not even connect to it.
	remote, remoteHits := countingServer(t, nonLoopbackIP(t)+":0", serve)
	if te.createFromTarball(remote+"/x.tar.gz", "README.md", "from tarball") {
		t.Fatal("a tarball from a non-loopback address was extracted")
	}
	redirect, _ := countingServer(t, "127.0.0.1:0", http.RedirectHandler(remote+"/x.tar.gz", http.StatusFound))
	if te.createFromTarball(redirect+"/r", "README.md", "from tarball") {
		t.Fatal("a tarball reached through a redirect to a non-loopback address was extracted")
	}
	if n := remoteHits.Load(); n != 0 {
		t.Fatalf("the emulator sent %d requests to a non-loopback address", n)
	}
	if te.createFromTarball("http://sandbox-tarballs.example.invalid/x.tar.gz", "README.md", "from tarball") {
		t.Fatal("a tarball from a DNS name was extracted")
	}
	if got := strings.Count(logs.String(), "loopback address"); got != 3 {
		t.Fatalf("want 3 refusals naming loopback, got %d; logs: %s", got, logs)
	}
}

// TestTarballSourceAllowedDir: host paths are read only inside the allowed
// source directory; none without one.
func TestTarballSourceAllowedDir(t *testing.T) {
	tgz := tarGz(t, map[string]string{"README.md": "from file"})
	allowed, outside := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(allowed, "ok.tgz"), filepath.Join(outside, "secret.tgz")} {
		if err := os.WriteFile(p, tgz, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "secret.tgz"), filepath.Join(allowed, "link.tgz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(allowed, "fifo-dir"), 0o755); err != nil {
		t.Fatal(err)
	}

	te, logs := sourceEnv(t, Options{})
	if te.createFromTarball(filepath.Join(allowed, "ok.tgz"), "README.md", "from file") {
		t.Fatal("a host path was read without an allowed source directory")
	}
	if !strings.Contains(logs.String(), "no allowed source directory") {
		t.Fatalf("refusal not logged: %s", logs)
	}

	te, logs = sourceEnv(t, Options{AllowedSourceDir: allowed})
	for _, u := range []string{filepath.Join(allowed, "ok.tgz"), "file://" + filepath.Join(allowed, "ok.tgz")} {
		if !te.createFromTarball(u, "README.md", "from file") {
			t.Fatalf("%s not extracted; logs: %s", u, logs)
		}
	}
	for _, u := range []string{
		filepath.Join(outside, "secret.tgz"),
		"file://" + filepath.Join(outside, "secret.tgz"),
		allowed + "/../" + filepath.Base(outside) + "/secret.tgz", // lexical escape
		filepath.Join(allowed, "link.tgz"),                        // symlink escape
		"file://other-host" + filepath.Join(allowed, "ok.tgz"),
	} {
		if te.createFromTarball(u, "README.md", "from file") {
			t.Errorf("%s was extracted", u)
		}
	}
	if n := strings.Count(logs.String(), "tarball source recorded but not extracted"); n != 5 {
		t.Fatalf("want 5 refusals, got %d: %s", n, logs)
	}
}

// TestGitSourceAllowedDir: a local git source is cloned only from inside the
// allowed source directory.
func TestGitSourceAllowedDir(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	allowed, outside := t.TempDir(), t.TempDir()
	for _, dir := range []string{filepath.Join(allowed, "repo"), filepath.Join(outside, "repo")} {
		for _, args := range [][]string{
			{"init", "-q", "-b", "main", dir},
			{"-C", dir, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "init"},
		} {
			if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v %s", args, err, out)
			}
		}
	}
	te, logs := sourceEnv(t, Options{AllowedSourceDir: allowed})
	clone := func(u string) bool {
		sb := te.create(map[string]any{"source": map[string]any{"type": "git", "url": u}})
		return te.readFile(sb.Session.ID, "/vercel/sandbox/.git/HEAD").status == 200
	}
	if !clone("file://" + filepath.Join(allowed, "repo")) {
		t.Fatalf("repository in the allowed directory not cloned: %s", logs)
	}
	if clone("file://"+filepath.Join(outside, "repo")) || clone(filepath.Join(outside, "repo")) {
		t.Fatal("repository outside the allowed directory cloned")
	}
	if !strings.Contains(logs.String(), "outside the allowed source directory") {
		t.Fatalf("refusal not logged: %s", logs)
	}
}

// tarOf builds a gzip'd tar of raw entries.
func tarOf(t *testing.T, entries []*tar.Header, bodies map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if b := bodies[h.Name]; b != nil {
			if _, err := tw.Write(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTarballSourceLimits: a tarball source is unpacked within the entry,
// total and per-file caps, and never outside the session.
func TestTarballSourceLimits(t *testing.T) {
	zeros := make([]byte, 64<<20) // 64 MiB of zeros: ~64 KiB gzip'd
	many := []*tar.Header{}
	for i := range 50 {
		many = append(many, &tar.Header{Name: "d" + strings.Repeat("x", i) + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	cases := []struct {
		name  string
		tgz   []byte
		probe string // a file that must not exist afterwards (relative to /vercel/sandbox)
		why   string
	}{
		{"zip bomb", tarOf(t, []*tar.Header{{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(zeros))}}, map[string][]byte{"bomb": zeros}), "bomb", "exceeds"},
		{"big file", tarOf(t, []*tar.Header{{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3 << 20}}, map[string][]byte{"big": make([]byte, 3<<20)}), "big", "per file"},
		{"too many entries", tarOf(t, append(many, &tar.Header{Name: "last", Typeflag: tar.TypeReg, Mode: 0o644}), nil), "last", "more than 20 entries"},
		{"dot-dot", tarOf(t, []*tar.Header{{Name: "../../escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}}, map[string][]byte{"../../escaped": []byte("x")}), "escaped", "escapes"},
		{"symlink escape", tarOf(t, []*tar.Header{
			{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../../tmp"},
			{Name: "up/escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
		}, map[string][]byte{"up/escaped": []byte("x")}), "up", "escapes the sandbox root"},
		{"absolute symlink", tarOf(t, []*tar.Header{{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}, nil), "abs", "absolute symlink"},
	}
	served := map[string][]byte{}
	for _, c := range cases {
		served["/"+strings.ReplaceAll(c.name, " ", "-")] = c.tgz
	}
	base, _ := countingServer(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(served[r.URL.Path])
	}))
	te, logs := sourceEnv(t, Options{SourceLimits: sandboxLimits(20, 8<<20, 2<<20)})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(logs.String())
			sb := te.create(map[string]any{"source": map[string]any{"type": "tarball", "url": base + "/" + strings.ReplaceAll(c.name, " ", "-")}})
			if r := te.readFile(sb.Session.ID, "/vercel/sandbox/"+c.probe); r.status == 200 {
				t.Fatalf("%s was extracted", c.probe)
			}
			if got := logs.String()[before:]; !strings.Contains(got, c.why) {
				t.Fatalf("refusal %q not logged: %s", c.why, got)
			}
			if _, err := os.Lstat(filepath.Join(te.e.DataDir(), "escaped")); err == nil {
				t.Fatal("an entry was written outside the session")
			}
			if _, err := os.Lstat("/tmp/escaped"); err == nil {
				t.Fatal("an entry was written to the host's /tmp")
			}
		})
	}
}

// TestReadFileLimit: fs/read refuses files over Options.MaxReadBytes.
func TestReadFileLimit(t *testing.T) {
	te := newEnv(t, Options{MaxReadBytes: 1 << 10})
	sb := te.create(nil)
	tgz := tarGz(t, map[string]string{"small": "ok", "large": strings.Repeat("x", 2<<10)})
	r := te.req("POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/fs/write", tgz)
	if r.status != 200 {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	if r := te.readFile(sb.Session.ID, "small"); r.status != 200 || string(r.body) != "ok" {
		t.Fatalf("small: %d %s", r.status, r.body)
	}
	if r := te.readFile(sb.Session.ID, "large"); r.status != 400 || !strings.Contains(r.errMessage(), "read limit") {
		t.Fatalf("large: %d %s", r.status, r.body)
	}
}

func sandboxLimits(entries int, total, perFile int64) sandboxruntime.TarLimits {
	return sandboxruntime.TarLimits{MaxEntries: entries, MaxBytes: total, MaxFileBytes: perFile}
}
