package sandboxruntime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// rtNamespaceRunner returns a namespace-mode runner, or skips the test where
// mount namespaces are unavailable (not root, no CAP_SYS_ADMIN, not Linux).
func rtNamespaceRunner(t *testing.T) *Runner {
	t.Helper()
	r, err := NewRunner(ModeNamespace, RunnerOptions{})
	if err != nil {
		t.Skipf("namespace mode unavailable: %v", err)
	}
	return r
}

// rtResult is what a finished command produced.
type rtResult struct {
	stdout, stderr string
	code           int
}

// rtWait waits for p to finish and returns its output and exit code.
func rtWait(t *testing.T, p *Process) rtResult {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		p.Terminate()
		t.Fatal("command did not finish within 30s")
	}
	code, exited := p.ExitCode()
	if !exited {
		t.Fatal("done closed but exitCode reports a running command")
	}
	recs, closed := p.Output().snapshot()
	if !closed {
		t.Fatal("done closed but the output log is still open")
	}
	var res rtResult
	res.code = code
	for _, r := range recs {
		switch r.Stream {
		case "stdout":
			res.stdout += r.Data
		case "stderr":
			res.stderr += r.Data
		default:
			t.Fatalf("record on unknown stream %q", r.Stream)
		}
	}
	return res
}

// rtRun starts spec and waits for it.
func rtRun(t *testing.T, r *Runner, spec Command) rtResult {
	t.Helper()
	p, err := r.Start(spec)
	if err != nil {
		t.Fatalf("start %s %q: %v", spec.Name, spec.Args, err)
	}
	return rtWait(t, p)
}

// rtSh runs a shell script in the sandbox.
func rtSh(t *testing.T, r *Runner, f *FS, sudo bool, script string) rtResult {
	t.Helper()
	return rtRun(t, r, Command{FS: f, Name: "sh", Args: []string{"-c", script}, Sudo: sudo})
}

func TestExecNamespaceAbsolutePaths(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, parent := rtNewFS(t)

	// A command writes through the absolute sandbox path; the fs API reads it.
	if res := rtSh(t, r, f, false, "echo x > /vercel/sandbox/a.txt && pwd"); res.code != 0 || res.stdout != "/vercel/sandbox\n" {
		t.Fatalf("command = %+v, want exit 0 printing the cwd /vercel/sandbox", res)
	}
	for _, p := range []string{"a.txt", "/vercel/sandbox/a.txt"} {
		if b, err := f.ReadFile(p, ""); err != nil || string(b) != "x\n" {
			t.Fatalf("readFile(%q) = %q, %v; want \"x\\n\"", p, b, err)
		}
	}

	// The fs API writes through absolute paths; a command reads them.
	body := rtTarGz(t,
		rtTarEntry{name: "tmp/f", body: "from tar"},
		rtTarEntry{name: "vercel/sandbox/bin/hello", body: "#!/bin/sh\necho hello from $0\n", mode: 0o755})
	if err := f.ExtractTarGz("/", bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	if res := rtRun(t, r, Command{FS: f, Name: "cat", Args: []string{"/tmp/f"}}); res.code != 0 || res.stdout != "from tar" {
		t.Fatalf("cat /tmp/f = %+v", res)
	}
	res := rtRun(t, r, Command{FS: f, Name: "hello", Env: map[string]string{"PATH": "/vercel/sandbox/bin:/usr/bin:/bin"}})
	if res.code != 0 || res.stdout != "hello from /vercel/sandbox/bin/hello\n" {
		t.Fatalf("uploaded program on PATH = %+v", res)
	}
	if res := rtRun(t, r, Command{FS: f, Name: "./bin/hello"}); res.code != 0 {
		t.Fatalf("./bin/hello = %+v", res)
	}

	// cwd is honoured and the sandbox's /tmp is the session's.
	res = rtRun(t, r, Command{FS: f, Name: "sh", Args: []string{"-c", "pwd; echo t > t.txt"}, Cwd: "/tmp"})
	if res.code != 0 || res.stdout != "/tmp\n" {
		t.Fatalf("cwd /tmp = %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(f.root, "tmp/t.txt")); err != nil || string(b) != "t\n" {
		t.Fatalf("session tmp/t.txt = %q, %v", b, err)
	}

	// The host's files outside the system directories are out of sight, and the
	// system directories are read-only, even for root.
	res = rtSh(t, r, f, true, fmt.Sprintf("test -e %q && echo visible; echo y > /etc/rt-test-evil; echo z > /usr/rt-test-evil; mkdir /work2 && echo ok > /work2/f", parent))
	if strings.Contains(res.stdout, "visible") {
		t.Errorf("the host directory %s is visible inside the sandbox", parent)
	}
	for _, p := range []string{"/etc/rt-test-evil", "/usr/rt-test-evil"} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("a sandbox command wrote the host's %s", p)
		}
	}
	if b, err := f.ReadFile("/work2/f", ""); err != nil || string(b) != "ok\n" {
		t.Errorf("top-level directory made by a command: readFile = %q, %v", b, err)
	}
	// Mounts never show on the host.
	if ents, _ := os.ReadDir(filepath.Join(f.root, "usr")); len(ents) != 0 {
		t.Errorf("the host sees %d entries in the session's usr mount point", len(ents))
	}
}

func TestExecUsers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	if !chownAllowed() {
		t.Skip("needs root to switch users")
	}
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)
	u := sandboxUser()

	if res := rtRun(t, r, Command{FS: f, Name: "id", Args: []string{"-u"}, Sudo: true}); res.stdout != "0\n" {
		t.Fatalf("sudo id -u = %+v, want 0", res)
	}
	// With a user namespace the user is vercel-sandbox, with Vercel's home, by
	// name and id (its host uid is u's); without one it is u itself.
	wantUser := fmt.Sprintf("%d %s\n", u.uid, u.name)
	if r.userns {
		wantUser = fmt.Sprintf("%d vercel-sandbox\n", SandboxUserID)
	}
	if res := rtSh(t, r, f, false, "echo $(id -u) $(id -un)"); res.stdout != wantUser {
		t.Fatalf("id -u, id -un = %+v, want %q", res, wantUser)
	}
	if r.userns {
		if res := rtSh(t, r, f, false, `getent passwd "$(id -u)" | cut -d: -f6; cd && pwd`); res.stdout != sandboxUserHome+"\n"+sandboxUserHome+"\n" {
			t.Errorf("vercel-sandbox's home in passwd and cd: %+v, want %s", res, sandboxUserHome)
		}
		// What the fs API wrote belongs to vercel-sandbox inside.
		if res := rtSh(t, r, f, false, "stat -c %U /vercel/sandbox"); res.stdout != "vercel-sandbox\n" {
			t.Errorf("owner of /vercel/sandbox inside: %+v, want vercel-sandbox", res)
		}
	}
	// The unprivileged user can use its areas and what the fs API wrote...
	if err := f.ExtractTarGz("", bytes.NewReader(rtTarGz(t, rtTarEntry{name: "uploaded.txt", body: "v1"}))); err != nil {
		t.Fatal(err)
	}
	res := rtSh(t, r, f, false, `set -e
echo w > /vercel/sandbox/w.txt
echo t > /tmp/t.txt
echo h > "$HOME/h.txt"
echo v2 > uploaded.txt
echo "$HOME"`)
	if res.code != 0 || res.stdout != sandboxUserHome+"\n" {
		t.Fatalf("unprivileged writes = %+v", res)
	}
	if b, _ := f.ReadFile("uploaded.txt", ""); string(b) != "v2\n" {
		t.Fatalf("uploaded.txt = %q after the user rewrote it", b)
	}
	// ...but not root's.
	if res := rtSh(t, r, f, false, "echo x > /root/x"); res.code == 0 {
		t.Fatalf("unprivileged write to /root succeeded: %+v", res)
	}
	if res := rtSh(t, r, f, true, "echo x > /root/x && echo $HOME"); res.code != 0 || res.stdout != "/root\n" {
		t.Fatalf("sudo write to /root = %+v", res)
	}
}

func TestExecEnv(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)
	lines := func(s string) []string {
		l := strings.Split(strings.TrimSpace(s), "\n")
		sort.Strings(l)
		return l
	}
	res := rtRun(t, r, Command{FS: f, Name: "env", Env: map[string]string{"FOO": "bar", "EMPTY": ""}})
	want := []string{"EMPTY=", "FOO=bar", "HOME=" + sandboxUserHome, "PATH=" + defaultCommandPath}
	if got := lines(res.stdout); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("env = %q, want exactly %q", got, want)
	}
	res = rtRun(t, r, Command{FS: f, Name: "/usr/bin/env", Env: map[string]string{"PATH": "/bin", "HOME": "/x"}, Sudo: true})
	if got := lines(res.stdout); strings.Join(got, "|") != "HOME=/x|PATH=/bin" {
		t.Fatalf("env with PATH and HOME given = %q", got)
	}
	if _, err := r.Start(Command{FS: f, Name: "env", Env: map[string]string{"A=B": "x"}}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("start with a bad variable name = %v, want ErrInvalidInput", err)
	}
}

func TestExecExitCodes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)

	if res := rtSh(t, r, f, false, "echo out; echo err >&2; exit 3"); res.code != 3 || res.stdout != "out\n" || res.stderr != "err\n" {
		t.Fatalf("exit 3 = %+v", res)
	}
	if res := rtRun(t, r, Command{FS: f, Name: "no-such-command"}); res.code != 127 || !strings.Contains(res.stderr, "not found") {
		t.Fatalf("unknown command = %+v, want 127 and a message", res)
	}
	if res := rtRun(t, r, Command{FS: f, Name: "./missing.sh"}); res.code != 127 {
		t.Fatalf("missing script = %+v, want 127", res)
	}
	rtWrite(t, f, "vercel/sandbox/noexec.sh", "#!/bin/sh\n", 0o644)
	if res := rtRun(t, r, Command{FS: f, Name: "./noexec.sh"}); res.code != 126 {
		t.Fatalf("non-executable script = %+v, want 126", res)
	}
	if _, err := r.Start(Command{FS: f, Name: "true", Cwd: "/nope"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("start in a missing cwd = %v, want ErrInvalidInput", err)
	}
	if _, err := r.Start(Command{FS: f, Name: ""}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("start without a name = %v, want ErrInvalidInput", err)
	}
}

func TestExecStreamsOutput(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)
	p, err := r.Start(Command{FS: f, Name: "sh", Args: []string{"-c", "echo one; sleep 1; echo two; sleep 1; echo three"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got strings.Builder
	firstWhileRunning := false
	n := 0
	err = p.Output().Follow(ctx, func(rec Record) error {
		if n == 0 {
			_, exited := p.ExitCode()
			firstWhileRunning = rec.Data == "one\n" && !exited
		}
		n++
		got.WriteString(rec.Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !firstWhileRunning {
		t.Fatal("the first line did not reach the follower while the command was running")
	}
	if got.String() != "one\ntwo\nthree\n" {
		t.Fatalf("followed output %q", got.String())
	}
	if res := rtWait(t, p); res.code != 0 {
		t.Fatalf("exit code %d", res.code)
	}
}

func TestExecKillTimeoutTerminate(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)
	start := func(spec Command) *Process {
		t.Helper()
		spec.FS = f
		p, err := r.Start(spec)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	for _, sig := range []int{int(syscall.SIGTERM), int(syscall.SIGINT), int(syscall.SIGKILL)} {
		p := start(Command{Name: "sleep", Args: []string{"30"}})
		if err := p.Kill(sig); err != nil {
			t.Fatalf("kill(%d): %v", sig, err)
		}
		if res := rtWait(t, p); res.code != 128+sig {
			t.Fatalf("after kill(%d): exit %d, want %d", sig, res.code, 128+sig)
		}
		if err := p.Kill(sig); !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("kill of a finished command = %v, want os.ErrProcessDone", err)
		}
	}
	p := start(Command{Name: "sleep", Args: []string{"30"}})
	if err := p.Kill(0); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("kill(0) = %v, want ErrInvalidInput", err)
	}
	// The whole group gets the signal, not only the shell.
	p.Terminate()
	if code, exited := p.ExitCode(); !exited || code != exitKilled {
		t.Fatalf("after terminate: exit %d (exited %v), want 137", code, exited)
	}

	t0 := time.Now()
	p = start(Command{Name: "sh", Args: []string{"-c", "echo started; sleep 30"}, Timeout: 300 * time.Millisecond})
	res := rtWait(t, p)
	if res.code != exitKilled || res.stdout != "started\n" {
		t.Fatalf("timed out command = %+v, want 137 and its output", res)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("timeout took %v", d)
	}

	// A command that finishes before its timeout keeps its exit code.
	if res := rtRun(t, r, Command{FS: f, Name: "true", Timeout: time.Minute}); res.code != 0 {
		t.Fatalf("true with a timeout = %+v", res)
	}
	// terminate on a finished command changes nothing.
	p = start(Command{Name: "sh", Args: []string{"-c", "exit 5"}})
	rtWait(t, p)
	p.Terminate()
	if code, _ := p.ExitCode(); code != 5 {
		t.Fatalf("terminate after exit changed the code to %d", code)
	}
}

func TestExecBackgroundJobsEndWithCommand(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)
	t0 := time.Now()
	p, err := r.Start(Command{FS: f, Name: "sh", Args: []string{"-c", "sleep 60 & echo started"}})
	if err != nil {
		t.Fatal(err)
	}
	res := rtWait(t, p)
	if res.code != 0 || res.stdout != "started\n" {
		t.Fatalf("result %+v", res)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("command holding its pipes through a background job took %v", d)
	}
	// The killed job may linger as a zombie until init reaps it.
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(-p.pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(-p.pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process group %d still has members after the command ended (kill: %v)", p.pid, err)
	}
}

func TestExecEscapedDaemonDoesNotHoldOutput(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, _ := rtNewFS(t)
	t0 := time.Now()
	// setsid leaves the command's process group, so the daemon survives the
	// command and keeps its stdout open; the output is cut off after a grace.
	p, err := r.Start(Command{FS: f, Name: "sh", Args: []string{"-c", "setsid sleep 3 & sleep 0.3; echo started"}})
	if err != nil {
		t.Fatal(err)
	}
	res := rtWait(t, p)
	if res.code != 0 || res.stdout != "started\n" {
		t.Fatalf("result %+v", res)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("a daemon holding the pipes delayed the command's end by %v", d)
	}
}

func TestExecSnapshotOfCommandOutput(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := rtNamespaceRunner(t)
	f, parent := rtNewFS(t)
	if res := rtSh(t, r, f, false, "mkdir -p /vercel/sandbox/app && echo v1 > /vercel/sandbox/app/state && ln -s /vercel/sandbox/app/state /tmp/state-link"); res.code != 0 {
		t.Fatalf("setup = %+v", res)
	}
	snap := filepath.Join(parent, "snap")
	if size, err := f.SnapshotTo(snap); err != nil || size <= 0 {
		t.Fatalf("snapshotTo = %d, %v", size, err)
	}
	g, err := RestoreFS(snap, filepath.Join(parent, "restored"))
	if err != nil {
		t.Fatal(err)
	}
	if res := rtSh(t, r, g, false, "cat /tmp/state-link && echo v2 > app/state"); res.code != 0 || res.stdout != "v1\n" {
		t.Fatalf("restored session: %+v", res)
	}
	if b, _ := f.ReadFile("app/state", ""); string(b) != "v1\n" {
		t.Fatalf("the original session changed with the restored one: %q", b)
	}
}

func TestExecHostMode(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r, err := NewRunner(ModeHost, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode() != ModeHost || !strings.Contains(r.Describe(), "NOT remapped") {
		t.Fatalf("host runner: mode %q, describe %q", r.Mode(), r.Describe())
	}
	if _, err := r.Start(Command{Name: "true"}); err == nil {
		t.Fatal("host mode started a command without a filesystem")
	}
	f, _ := rtNewFS(t)
	// Non-sudo commands may run as nobody, who must be able to reach the session.
	for d := f.root; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res := rtSh(t, r, f, false, `pwd; echo "$HOME"; echo "$TMPDIR"; echo x > a.txt`)
	want := strings.Join([]string{
		filepath.Join(f.root, "vercel/sandbox"),
		filepath.Join(f.root, "home/vercel-sandbox"),
		filepath.Join(f.root, "tmp"), ""}, "\n")
	if res.code != 0 || res.stdout != want {
		t.Fatalf("host mode command = %+v, want output %q", res, want)
	}
	if b, err := f.ReadFile("/vercel/sandbox/a.txt", ""); err != nil || string(b) != "x\n" {
		t.Fatalf("readFile = %q, %v", b, err)
	}
	res = rtRun(t, r, Command{FS: f, Name: "sh", Args: []string{"-c", "pwd"}, Cwd: "/tmp"})
	if res.stdout != filepath.Join(f.root, "tmp")+"\n" {
		t.Fatalf("host mode cwd /tmp = %+v", res)
	}
	if _, err := r.Start(Command{FS: f, Name: "true", Cwd: "/nope"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("missing cwd = %v, want ErrInvalidInput", err)
	}
	p, err := r.Start(Command{FS: f, Name: "sleep", Args: []string{"30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	if res := rtWait(t, p); res.code != 143 {
		t.Fatalf("host mode kill: exit %d, want 143", res.code)
	}
}

func TestExecNoneMode(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r, err := NewRunner(ModeNone, RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode() != ModeNone || !strings.Contains(r.Describe(), "exec=none") {
		t.Fatalf("none runner: mode %q, describe %q", r.Mode(), r.Describe())
	}
	r.SetScriptedExit("false", 1)
	r.SetScriptedExit("make", 2)
	f, _ := rtNewFS(t)
	before := rtTree(t, f.root)
	goroutines := runtime.NumGoroutine()
	for name, want := range map[string]int{"sh": 0, "false": 1, "/usr/bin/false": 1, "make": 2} {
		p, err := r.Start(Command{FS: f, Name: name, Args: []string{"-c", "echo x > /vercel/sandbox/a"}, Timeout: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		default:
			t.Fatalf("%s: not done at once", name)
		}
		if code, exited := p.ExitCode(); !exited || code != want {
			t.Fatalf("%s: exit %d (exited %v), want %d", name, code, exited, want)
		}
		if recs, closed := p.Output().snapshot(); len(recs) != 0 || !closed {
			t.Fatalf("%s: output %v (closed %v), want none", name, recs, closed)
		}
		if err := p.Kill(15); !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("kill = %v, want os.ErrProcessDone", err)
		}
		p.Terminate()
	}
	// A session that only runs commands has no directory at all.
	if p, err := r.Start(Command{Name: "false"}); err != nil {
		t.Fatalf("none mode without a filesystem: %v", err)
	} else if code, _ := p.ExitCode(); code != 1 {
		t.Fatalf("none mode without a filesystem: exit %d, want 1", code)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("none mode left %d goroutines", n-goroutines)
	}
	if after := rtTree(t, f.root); len(after) != len(before) {
		t.Errorf("none mode changed the session: %d entries before, %d after", len(before), len(after))
	}
}

func TestExecAutoMode(t *testing.T) {
	r, err := NewRunner("", RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantNS := probeNamespace() == nil
	if (r.Mode() == ModeNamespace) != wantNS {
		t.Fatalf("auto mode picked %q, namespace available: %v", r.Mode(), wantNS)
	}
	t.Logf("auto: %s", r.Describe())
	if _, err := NewRunner("bogus", RunnerOptions{}); err == nil {
		t.Fatal("NewRunner accepted an unknown mode")
	}
}
