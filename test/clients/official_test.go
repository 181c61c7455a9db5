package clients

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/pty"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/test/officialsdk"
)

// The versions of Vercel's official clients these tests drive are
// officialsdk.CLI and officialsdk.SDK (see docs/dev/interactive-sessions.md
// for what was read from them).
const (
	// conformanceTag is the tag key on every sandbox these tests create; its
	// value is the run's id, so a sweep finds what a crashed run left.
	conformanceTag = "sandbox-controller-conformance"
)

// target is the Vercel Sandbox API the official-client checks run against:
// real Vercel when VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID are
// set; the emulator at VERCEL_API_URL if that is set too; else an emulator
// started for the test.
type target struct {
	real                 bool
	apiURL               string // the emulator's base URL ("" for real Vercel)
	token, team, project string
	runID                string // unique per run: names and the tag value
	client               *vercel.Client
	emu                  *emulator.Emulator
	nodeEnv              []string // environment for node programs
	cliBin, nodeModules  string
	createdNames         sync.Map
	reportMu             sync.Mutex
	snapshots            sync.Map
}

func newTarget(t *testing.T) *target {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tg := &target{runID: "conf-" + hex.EncodeToString(b)}
	token, team, project := os.Getenv("VERCEL_TOKEN"), os.Getenv("VERCEL_TEAM_ID"), os.Getenv("VERCEL_PROJECT_ID")
	apiURL := os.Getenv("VERCEL_API_URL")
	switch {
	case token != "" && team != "" && project != "" && apiURL == "":
		tg.real, tg.token, tg.team, tg.project = true, token, team, project
	case token != "" && team != "" && project != "":
		// An emulator already running, e.g. `make dev`'s (source bin/dev/env).
		tg.apiURL, tg.token, tg.team, tg.project = strings.TrimSuffix(apiURL, "/"), token, team, project
		requireAnswering(t, tg.apiURL)
	default:
		// SANDBOX_EMULATOR_EXEC picks the exec mode (namespace, host);
		// default: namespace where possible.
		dataDir := t.TempDir()
		// In exec mode host, a root emulator runs commands as nobody, who must
		// be able to reach the session directories.
		for d := dataDir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
			must(t, os.Chmod(d, 0o755))
		}
		// AllowHostRootSudo: where no user namespace can contain `exec --sudo`
		// (exec host as root), the test's own `id -u` may run as host root.
		e, err := emulator.New(emulator.Options{DataDir: dataDir, Exec: os.Getenv("SANDBOX_EMULATOR_EXEC"), AllowHostRootSudo: true})
		must(t, err)
		u, err := e.Start("")
		must(t, err)
		t.Cleanup(func() {
			if err := e.Close(); err != nil {
				t.Errorf("close the emulator: %v", err)
			}
		})
		tg.emu, tg.apiURL, tg.token, tg.team, tg.project = e, u, e.Token(), "team_emulator", "prj_emulator"
	}
	c, err := vercel.New(vercel.Config{BaseURL: tg.apiURL, Token: tg.token, TeamID: tg.team, ProjectID: tg.project})
	must(t, err)
	tg.client = c
	t.Cleanup(tg.sweep(t))
	tg.nodeModules = installOfficialClients(t)
	tg.cliBin = filepath.Join(tg.nodeModules, ".bin", "sandbox")
	emulatorURL := tg.apiURL
	if tg.real {
		emulatorURL = ""
	}
	tg.nodeEnv = officialsdk.NodeEnv(repoRoot, tg.nodeModules, emulatorURL, tg.token, t.TempDir())
	return tg
}

// requireAnswering stops the test with what to do when the emulator the
// environment names is not running: a shell that sourced bin/dev/env keeps
// pointing at `make dev`'s emulator after make dev stopped, and every check
// would fail with "connection refused" instead.
func requireAnswering(t *testing.T, apiURL string) {
	t.Helper()
	u, err := url.Parse(apiURL)
	if err != nil || u.Host == "" {
		t.Fatalf("VERCEL_API_URL=%q is not a URL", apiURL)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	conn, err := net.DialTimeout("tcp", host, 3*time.Second)
	if err != nil {
		t.Fatalf("VERCEL_API_URL=%s does not answer (%v). With VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID it selects an emulator "+
			"already running, such as make dev's (bin/dev/env sets all four): start it, or unset VERCEL_API_URL VERCEL_TOKEN VERCEL_TEAM_ID "+
			"VERCEL_PROJECT_ID and the test starts its own", apiURL, err)
	}
	_ = conn.Close()
}

// observe records what the target answered to one check in the
// conformance report: bin/conformance/<emulator|vercel>.txt, one
// "check: value" line each, so that `diff` of the two files lists every
// difference (docs/dev/conformance.md). Values must not vary between runs.
func (tg *target) observe(t *testing.T, check, value string) {
	t.Helper()
	which := "emulator"
	if tg.real {
		which = "vercel"
	}
	dir := filepath.Join(repoRoot, "bin", "conformance")
	must(t, os.MkdirAll(dir, 0o755))
	tg.reportMu.Lock()
	defer tg.reportMu.Unlock()
	path := filepath.Join(dir, which+".txt")
	reportOnce.Do(func() { _ = os.Remove(path) }) // each test process writes a fresh report
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(t, err)
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s %s: %s\n", t.Name(), check, strings.ReplaceAll(strings.TrimSpace(value), "\n", `\n`))
	must(t, err)
}

var reportOnce sync.Once

// name returns a unique sandbox name for this run and remembers it for cleanup.
func (tg *target) name(suffix string) string {
	n := tg.runID + "-" + suffix
	tg.createdNames.Store(n, true)
	return n
}

// sweep deletes every sandbox this run created or tagged, and the
// snapshots it took, also after a failure.
func (tg *target) sweep(t *testing.T) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		names := map[string]bool{}
		tg.createdNames.Range(func(k, _ any) bool { names[k.(string)] = true; return true })
		cursor := ""
		for {
			page, err := tg.client.ListSandboxes(ctx, vercel.ListSandboxesOptions{Tag: conformanceTag + ":" + tg.runID, Limit: 50, Cursor: cursor})
			if err != nil {
				t.Errorf("sweep: list tagged sandboxes: %v", err)
				break
			}
			for _, sb := range page.Sandboxes {
				names[sb.Name] = true
			}
			if page.Pagination.Next == nil || *page.Pagination.Next == "" {
				break
			}
			cursor = *page.Pagination.Next
		}
		for n := range names {
			if _, err := tg.client.DeleteSandbox(ctx, n, true); err != nil && !vercel.IsNotFound(err) {
				t.Errorf("sweep: delete sandbox %s: %v", n, err)
			}
		}
		tg.snapshots.Range(func(k, _ any) bool {
			if _, err := tg.client.DeleteSnapshot(ctx, k.(string)); err != nil && !vercel.IsNotFound(err) {
				t.Errorf("sweep: delete snapshot %s: %v", k, err)
			}
			return true
		})
	}
}

// installOfficialClients installs the official CLI and SDK once into
// bin/npm/ (reused by later runs and kept out of git) and returns its
// node_modules directory.
func installOfficialClients(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	installs.Lock()
	defer installs.Unlock()
	modules, err := officialsdk.Install(ctx, repoRoot, t.Logf)
	must(t, err)
	return modules
}

// cli runs the official CLI with args (scope flags added) and returns its
// combined output and exit code.
func (tg *target) cli(ctx context.Context, t *testing.T, args ...string) (string, int) {
	t.Helper()
	// The scope flags go right after the subcommand: after "--" they would be
	// the sandbox command's arguments.
	full := append([]string{args[0], "--scope", tg.team, "--project", tg.project}, args[1:]...)
	cmd := exec.CommandContext(ctx, tg.cliBin, full...)
	cmd.Env = append(os.Environ(), tg.nodeEnv...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sandbox %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ sandbox %s\n%s(exit %d)", strings.Join(args, " "), out, code)
	return string(out), code
}

// mustCLI runs the CLI and fails the test unless it exits with 0.
func (tg *target) mustCLI(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, code := tg.cli(ctx, t, args...)
	if code != 0 {
		t.Fatalf("sandbox %s: exit %d", strings.Join(args, " "), code)
	}
	return out
}

// terminal is a program running on a pseudo-terminal the test types into.
type terminal struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan struct{}
}

// startOnTerminal starts cmd with a new pseudo-terminal as its controlling
// terminal, stdin, stdout and stderr, as a user's shell would.
func startOnTerminal(t *testing.T, cmd *exec.Cmd) *terminal {
	t.Helper()
	master, slave, err := pty.Open(pty.Size{Cols: 100, Rows: 30})
	must(t, err)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	must(t, cmd.Start())
	slave.Close()
	term := &terminal{t: t, master: master, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(term.done)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			term.mu.Lock()
			term.out.Write(b[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		master.Close()
	})
	return term
}

func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

// expect waits until the terminal's output matches re.
func (term *terminal) expect(re string) {
	term.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if rx.MatchString(term.output()) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	term.t.Fatalf("the terminal never showed %s; it showed:\n%s", re, term.output())
}

func (term *terminal) typeIn(s string) {
	term.t.Helper()
	if _, err := term.master.WriteString(s); err != nil {
		term.t.Fatal(err)
	}
}

// wait waits for the program to exit and returns its exit code.
func (term *terminal) wait() int {
	term.t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- term.cmd.Wait() }()
	select {
	case err := <-errc:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		} else if err != nil {
			term.t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		term.t.Fatalf("the program did not exit; its terminal showed:\n%s", term.output())
		return -1
	}
}

// TestOfficialCLI drives Vercel's official `sandbox` CLI against the target
// (the emulator unless VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID
// are set): create, exec (as vercel-sandbox and with --sudo), cp both ways,
// snapshot, fork, run, connect and sh through a pseudo-terminal, and rm.
func TestOfficialCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("installs and runs Vercel's CLI from npm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tg := newTarget(t)
	tag := "--tag=" + conformanceTag + "=" + tg.runID
	name := tg.name("cli")

	out := tg.mustCLI(ctx, t, "create", "--name", name, tag, "--timeout", "10m")
	if !strings.Contains(out, name) {
		t.Errorf("create printed no sandbox name: %s", out)
	}

	// exec: output, exit code, user and home; --sudo is root.
	out, code := tg.cli(ctx, t, "exec", name, "--", "sh", "-c", `echo "hello $(id -un) $HOME $(pwd)"; exit 3`)
	tg.observe(t, "exec user, home, cwd", regexp.MustCompile(`(?m)^hello .*$`).FindString(out))
	tg.observe(t, "exec exit code", fmt.Sprint(code))
	// Vercel runs commands as vercel-sandbox; so does the emulator where it
	// can give them a user namespace (see docs/dev/emulator-gaps.md).
	user, root := `\S+`, ""
	if tg.real || (tg.emu != nil && strings.Contains(tg.emu.ExecDescription(), "run as vercel-sandbox")) {
		user = "vercel-sandbox"
	}
	if tg.emu != nil && tg.emu.ExecMode() == "host" {
		root = `\S*` // exec mode host maps HOME and the cwd into the session directory
	}
	if want := regexp.MustCompile(`(?m)^hello ` + user + " " + root + `/home/vercel-sandbox ` + root + `/vercel/sandbox\r?$`); code != 3 || !want.MatchString(out) {
		t.Errorf("exec: exit %d, output %q; want exit 3 and %s", code, out, want)
	}
	// Vercel's uid for vercel-sandbox is unknown: recorded, not asserted.
	tg.observe(t, "exec id -u", regexp.MustCompile(`(?m)^\d+\r?$`).FindString(tg.mustCLI(ctx, t, "exec", name, "--", "id", "-u")))
	wantRoot := "0"
	if tg.emu != nil && os.Geteuid() != 0 { // an unprivileged emulator runs everything as itself
		wantRoot = strconv.Itoa(os.Geteuid())
	}
	if out := tg.mustCLI(ctx, t, "exec", "--sudo", name, "--", "id", "-u"); !regexp.MustCompile(`(?m)^` + wantRoot + `\r?$`).MatchString(out) {
		t.Errorf("exec --sudo id -u: %q, want %s", out, wantRoot)
	}

	// cp: up and down again.
	local := filepath.Join(t.TempDir(), "up.txt")
	must(t, os.WriteFile(local, []byte("from the host\n"), 0o644))
	tg.mustCLI(ctx, t, "cp", local, name+":/vercel/sandbox/up.txt")
	if out := tg.mustCLI(ctx, t, "exec", name, "--", "cat", "up.txt"); !strings.Contains(out, "from the host") {
		t.Errorf("cat of the copied file: %q", out)
	}
	back := filepath.Join(t.TempDir(), "down.txt")
	tg.mustCLI(ctx, t, "cp", name+":/vercel/sandbox/up.txt", back)
	if b, err := os.ReadFile(back); err != nil || string(b) != "from the host\n" {
		t.Errorf("copied back: %q, %v", b, err)
	}

	// snapshot (stops the sandbox), then fork from it; the fork has the file.
	out = tg.mustCLI(ctx, t, "snapshot", name, "--stop")
	if id := regexp.MustCompile(`snap_[A-Za-z0-9]+`).FindString(out); id == "" {
		t.Errorf("snapshot printed no snapshot id: %s", out)
	} else {
		tg.snapshots.Store(id, true)
	}
	fork := tg.name("fork")
	tg.mustCLI(ctx, t, "fork", name, "--name", fork)
	if out := tg.mustCLI(ctx, t, "exec", fork, "--", "cat", "up.txt"); !strings.Contains(out, "from the host") {
		t.Errorf("the fork lacks the snapshot's file: %q", out)
	}

	// run: create and run one command.
	ran := tg.name("run")
	out, code = tg.cli(ctx, t, "run", "--name", ran, tag, "--", "sh", "-c", "echo ran; exit 2")
	tg.observe(t, "run exit code", fmt.Sprint(code))
	if code != 2 || !strings.Contains(out, "ran") {
		t.Errorf("run: exit %d, output %q; want exit 2 and `ran`", code, out)
	}

	// connect: an interactive shell on a terminal, with the CLI's prompt,
	// line editing by the sandbox's terminal, and the shell's exit status.
	cmd := exec.CommandContext(ctx, tg.cliBin, "connect", fork, "--scope", tg.team, "--project", tg.project)
	cmd.Env = append(os.Environ(), tg.nodeEnv...)
	term := startOnTerminal(t, cmd)
	term.expect(`▲ `)
	term.typeIn("echo answer=$((6*7)) tty=$(tty | cut -c1-8) cols=$(tput cols 2>/dev/null || stty size)\r")
	term.expect(`answer=42 tty=/dev/pts`)
	tg.observe(t, "connect output", regexp.MustCompile(`answer=42 tty=\S+`).FindString(term.output()))
	term.typeIn("exit 4\r")
	code = term.wait()
	tg.observe(t, "connect exit code", fmt.Sprint(code))
	if code != 4 {
		t.Errorf("connect: exit %d after `exit 4`; terminal:\n%s", code, term.output())
	}

	// sh: create and connect in one go (what create --connect does).
	shName := tg.name("sh")
	cmd = exec.CommandContext(ctx, tg.cliBin, "sh", "--scope", tg.team, "--project", tg.project, "--name", shName, tag)
	cmd.Env = append(os.Environ(), tg.nodeEnv...)
	term = startOnTerminal(t, cmd)
	term.expect(`▲ `)
	term.typeIn("echo in=$(pwd)\r")
	term.expect(`in=\S*/vercel/sandbox`)
	term.typeIn("exit\r")
	if code := term.wait(); code != 0 {
		t.Errorf("sh: exit %d after `exit`; terminal:\n%s", code, term.output())
	}

	for _, n := range []string{name, fork, ran, shName} {
		tg.mustCLI(ctx, t, "rm", n)
	}
	if tg.emu != nil {
		for _, sb := range tg.emu.LiveSandboxes() {
			if strings.HasPrefix(sb.Name, tg.runID) {
				t.Errorf("sandbox %s outlived `sandbox rm`", sb.Name)
			}
		}
	}
}

// TestOfficialSDKInteractive opens an interactive session with the
// official SDK's openInteractive and speaks the CLI's protocol over the
// WebSocket it returns (with the `ws` package the CLI uses): start, input,
// resize, output, exit code.
func TestOfficialSDKInteractive(t *testing.T) {
	if testing.Short() {
		t.Skip("installs and runs Vercel's SDK from npm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tg := newTarget(t)
	name := tg.name("sdk")
	cmd := exec.CommandContext(ctx, "node", filepath.Join(repoRoot, "test", "clients", "testdata", "open-interactive.mjs"))
	cmd.Env = append(os.Environ(), tg.nodeEnv...)
	cmd.Env = append(cmd.Env, "SANDBOX_NAME="+name, "SANDBOX_TAG="+conformanceTag+"="+tg.runID,
		"VERCEL_TOKEN="+tg.token, "VERCEL_TEAM_ID="+tg.team, "VERCEL_PROJECT_ID="+tg.project)
	cmd.Dir = filepath.Dir(tg.nodeModules)
	out, err := cmd.CombinedOutput()
	t.Logf("open-interactive.mjs:\n%s", out)
	tg.observe(t, "open-interactive.mjs output", string(out))
	if err != nil {
		t.Fatalf("open-interactive.mjs: %v", err)
	}
	for _, want := range []string{"interactivePort ok", "output: answer=42", "resized: 50 120", "exit code: 6"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("open-interactive.mjs did not print %q", want)
		}
	}
}
