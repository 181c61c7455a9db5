// Command demo runs the scripted tour behind `make demo`: against a fresh
// local environment (the dev program behind `make dev`, started here with its
// own temporary state directory), it drives the operator with the real
// kubectl through every kind — apply the samples, write a file into a
// Sandbox through the Vercel API, snapshot it, fork it, pause and resume it,
// delete everything — and checks each outcome, including that no Vercel
// sandbox is left behind. It prints every command it runs, then one line per
// step ("✓ name" or "✗ name: reason"), and exits 0 only if every step
// succeeded. The environment is always stopped at the end.
//
// The user-facing commands are the README's five-minute tour, run verbatim
// through bash; hack/demo/demo_test.go checks that the two stay in step.
//
// Run it from the repository root: `make demo`, or
// `KUBEBUILDER_ASSETS=$(./hack/envtest.sh) go run ./hack/demo`.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/procfs"
)

// readyLine is what the dev program prints once everything is up.
const readyLine = "Ready."

// The file the tour writes into the Sandbox "hello" and looks for in its
// forks and after a resume. Relative paths are under /vercel/sandbox.
const demoFile = "notes/demo.txt"

func main() {
	var o options
	flag.StringVar(&o.devBin, "dev-bin", "", "The dev program to run; built from ./hack/dev into the state directory when empty.")
	flag.StringVar(&o.stateDir, "state-dir", "", "State directory of the environment; a new temporary directory when empty (removed after a successful run).")
	flag.DurationVar(&o.startTimeout, "start-timeout", 5*time.Minute, "Time allowed to build and start the environment.")
	flag.DurationVar(&o.stepTimeout, "step-timeout", 3*time.Minute, "Time allowed to each step of the tour.")
	flag.Parse()
	os.Exit(run(o))
}

type options struct {
	devBin, stateDir          string
	startTimeout, stepTimeout time.Duration
}

// step is one checked stage of the tour.
type step struct {
	name    string
	timeout time.Duration
	// cleanup steps run even after an earlier step failed.
	cleanup bool
	// final steps run even after Ctrl-C: they stop the environment.
	final bool
	run   func(ctx context.Context) error
}

// tour holds what the steps share.
type tour struct {
	o        options
	root     string
	stateDir string
	out      io.Writer

	dev      *exec.Cmd
	devOut   *lineWatcher
	devDone  chan error
	env      map[string]string // from <state-dir>/env
	vercel   *vercel.Client
	content  string // what the tour wrote into demoFile
	helloOld string // hello's session before the pause
}

func run(o options) int {
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	if _, err := os.Stat(filepath.Join(root, "config", "samples")); err != nil {
		fmt.Fprintln(os.Stderr, "demo: run it from the repository root (config/samples not found)")
		return 1
	}
	for _, tool := range []string{"kubectl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %s is needed on PATH: %v\n", tool, err)
			return 1
		}
	}
	t := &tour{o: o, root: root, out: os.Stdout}
	removeState := false
	if o.stateDir == "" {
		d, err := os.MkdirTemp("", "sandbox-demo-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 1
		}
		o.stateDir, removeState = d, true
	}
	if t.stateDir, err = filepath.Abs(o.stateDir); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}

	// Ctrl-C ends the step that runs and skips to stopping the environment.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	steps := t.steps()
	start := time.Now()
	failed := 0
	for i, s := range steps {
		label := fmt.Sprintf("%d/%d %s", i+1, len(steps), s.name)
		interrupted := ctx.Err() != nil
		if (failed > 0 || interrupted) && !s.cleanup || interrupted && !s.final {
			fmt.Fprintf(t.out, "- %s: skipped\n", label)
			continue
		}
		fmt.Fprintf(t.out, "\n== %s\n", label)
		parent := ctx
		if s.cleanup {
			parent = context.Background() // clean up even after Ctrl-C
		}
		sctx, cancel := context.WithTimeout(parent, s.timeout)
		began := time.Now()
		err := s.run(sctx)
		if err == nil && sctx.Err() != nil {
			err = sctx.Err()
		}
		switch {
		case errors.Is(sctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("timed out after %s: %w", s.timeout, err)
		case err != nil && ctx.Err() != nil && !s.cleanup:
			err = fmt.Errorf("interrupted: %w", err)
		}
		cancel()
		took := time.Since(began).Round(100 * time.Millisecond)
		if err != nil {
			failed++
			fmt.Fprintf(t.out, "✗ %s: %v (after %s)\n", label, err, took)
			continue
		}
		fmt.Fprintf(t.out, "✓ %s (%s)\n", label, took)
	}
	total := time.Since(start).Round(100 * time.Millisecond)
	if failed > 0 || ctx.Err() != nil {
		why := fmt.Sprintf("%d step(s) failed", failed)
		if ctx.Err() != nil {
			why = "interrupted"
		}
		fmt.Fprintf(t.out, "\nThe tour FAILED (%s) in %s. Logs of the environment: %s (dev.log, manager.log, emulator.log, control-plane.log)\n", why, total, t.stateDir)
		return 1
	}
	fmt.Fprintf(t.out, "\nAll %d steps succeeded in %s.\n", len(steps), total)
	if removeState {
		_ = os.RemoveAll(t.stateDir)
	}
	return 0
}

// steps is the tour. Everything a user would type is a kubectl command run
// through bash exactly as the README shows it; Go code only checks results
// and plays the client that writes and reads files on the Vercel data plane.
func (t *tour) steps() []step {
	st := t.o.stepTimeout
	return []step{
		{name: "start a fresh dev environment", timeout: t.o.startTimeout, run: t.startDev},
		{name: "apply the samples", timeout: st, run: t.applySamples},
		{name: "wait for Ready", timeout: st, run: t.waitReady},
		{name: "send a heartbeat", timeout: st, run: t.heartbeat},
		{name: "write a file into the Sandbox hello through the Vercel API", timeout: st, run: t.writeFile},
		{name: "snapshot hello", timeout: st, run: t.snapshot},
		{name: "fork the snapshot into three Sandboxes that each have the file", timeout: st, run: t.fork},
		{name: "pause hello", timeout: st, run: t.pause},
		{name: "resume hello: a new session, the file survived", timeout: st, run: t.resume},
		{name: "delete everything", timeout: st, cleanup: true, run: t.deleteAll},
		{name: "no Vercel sandbox or snapshot is left", timeout: time.Minute, cleanup: true, run: t.nothingLeft},
		{name: "stop the dev environment", timeout: 2 * time.Minute, cleanup: true, final: true, run: t.stopDev},
	}
}

// ---- the steps ----

func (t *tour) startDev(ctx context.Context) error {
	bin := t.o.devBin
	if bin == "" {
		bin = filepath.Join(t.stateDir, "sandbox-dev")
		fmt.Fprintf(t.out, "Building the dev program (go build -o %s ./hack/dev)…\n", bin)
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hack/dev")
		build.Dir = t.root
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build ./hack/dev: %v\n%s", err, out)
		}
	}
	logPath := filepath.Join(t.stateDir, "dev.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	t.devOut = newLineWatcher(readyLine, logFile)
	// Not CommandContext: the environment must outlive this step; stopDev
	// stops it with SIGINT, as Ctrl-C stops `make dev`.
	t.dev = exec.Command(bin, "--state-dir", t.stateDir, "--poll-interval", "10s")
	t.dev.Dir = t.root
	t.dev.Stdout, t.dev.Stderr = t.devOut, t.devOut
	// Its own process group: a Ctrl-C at the terminal reaches the demo,
	// which then stops the environment in order.
	t.dev.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.dev.WaitDelay = 10 * time.Second
	fmt.Fprintf(t.out, "Starting it: %s --state-dir %s (output in %s)\n", bin, t.stateDir, logPath)
	if err := t.dev.Start(); err != nil {
		t.dev = nil
		logFile.Close()
		return err
	}
	t.devDone = make(chan error, 1)
	go func() { t.devDone <- t.dev.Wait(); logFile.Close() }()
	select {
	case <-t.devOut.found:
	case err := <-t.devDone:
		t.devDone <- err
		return fmt.Errorf("the dev program exited before %q (%v); its output:\n%s", readyLine, err, tail(t.devOut.String(), 3000))
	case <-ctx.Done():
		return fmt.Errorf("no %q yet: %w", readyLine, ctx.Err())
	}
	env, err := readEnvFile(filepath.Join(t.stateDir, "env"))
	if err != nil {
		return err
	}
	for _, k := range []string{"KUBECONFIG", "VERCEL_API_URL", "VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID"} {
		if env[k] == "" {
			return fmt.Errorf("%s is not set in %s", k, filepath.Join(t.stateDir, "env"))
		}
	}
	t.env = env
	t.vercel, err = vercel.New(vercel.Config{
		BaseURL:   env["VERCEL_API_URL"],
		Token:     env["VERCEL_TOKEN"],
		TeamID:    env["VERCEL_TEAM_ID"],
		ProjectID: env["VERCEL_PROJECT_ID"],
		UserAgent: "sandbox-controller (make demo)",
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(t.out, "Up: KUBECONFIG=%s, Vercel API emulator at %s\n", env["KUBECONFIG"], env["VERCEL_API_URL"])
	return nil
}

func (t *tour) applySamples(ctx context.Context) error {
	out, err := t.sh(ctx, "kubectl apply -f config/samples/")
	if err != nil {
		return err
	}
	for _, want := range []string{"sandbox.sandbox.sentry.io/hello created", "sandbox.sandbox.sentry.io/devbox created",
		"sandbox.sandbox.sentry.io/conversation created", "sandboxsnapshot.sandbox.sentry.io/starter created",
		"sandboxfork.sandbox.sentry.io/starter-fork created"} {
		if !strings.Contains(out, want) {
			return fmt.Errorf("kubectl apply did not print %q", want)
		}
	}
	return nil
}

func (t *tour) waitReady(ctx context.Context) error {
	// The snapshot and the fork first: the fork's children exist only once
	// the snapshot is ready, and `kubectl wait --all` waits for the objects
	// that exist when it starts.
	if _, err := t.sh(ctx, "kubectl wait --for=condition=Ready sandboxsnapshot,sandboxfork --all --timeout=2m"); err != nil {
		return err
	}
	if _, err := t.sh(ctx, "kubectl wait --for=condition=Ready sandbox --all --timeout=2m"); err != nil {
		return err
	}
	out, err := t.sh(ctx, "kubectl get sbx,sbxsnap,sbxfork")
	if err != nil {
		return err
	}
	for _, name := range []string{"hello", "devbox", "conversation", "starter-fork-0", "starter-fork-1", "starter-fork-2"} {
		if !lineShows(out, "sandbox.sandbox.sentry.io/"+name, "Running", "True", "sbx_") {
			return fmt.Errorf("kubectl get does not show Sandbox %s Running and Ready with a session", name)
		}
	}
	if !lineShows(out, "sandboxsnapshot.sandbox.sentry.io/starter", "Ready", "true", "snap_") {
		return errors.New("kubectl get does not show the SandboxSnapshot starter Ready with a snapshot id")
	}
	if !lineShows(out, "sandboxfork.sandbox.sentry.io/starter-fork", "Ready", "3/3", "starter") {
		return errors.New("kubectl get does not show the SandboxFork starter-fork Ready 3/3")
	}
	// The recipe's setup ran in the snapshot the children boot from.
	children, err := t.sessions(ctx, "-l sandbox.sentry.io/fork=starter-fork")
	if err != nil {
		return err
	}
	if len(children) != 3 {
		return fmt.Errorf("want 3 children of starter-fork, got %v", children)
	}
	for name, session := range children {
		b, err := t.vercel.ReadFile(ctx, session, "app/package.json", "")
		if err != nil {
			return fmt.Errorf("read app/package.json (written by the recipe) in %s: %w", name, err)
		}
		if !strings.Contains(string(b), `"name": "starter"`) {
			return fmt.Errorf("app/package.json in %s is %q, want the recipe's", name, b)
		}
	}
	fmt.Fprintf(t.out, "(checked through the Vercel API: each child of starter-fork has the recipe's app/package.json)\n")
	return nil
}

func (t *tour) heartbeat(ctx context.Context) error {
	before := time.Now().UTC().Truncate(time.Second)
	if _, err := t.sh(ctx, "kubectl annotate sbx/conversation --overwrite sandbox.sentry.io/last-activity=$(date -u +%FT%TZ)"); err != nil {
		return err
	}
	out, err := t.kubectl(ctx, "get", "sbx", "conversation", "-o", `jsonpath={.metadata.annotations.sandbox\.sentry\.io/last-activity} {.status.phase}`)
	if err != nil {
		return err
	}
	var stamp, phase string
	if _, err := fmt.Sscan(out, &stamp, &phase); err != nil {
		return fmt.Errorf("unexpected annotation and phase %q", out)
	}
	at, err := time.Parse(time.RFC3339, stamp)
	if err != nil || at.Before(before) || at.After(time.Now().Add(time.Minute)) {
		return fmt.Errorf("the heartbeat annotation is %q, want the current time (%v)", stamp, err)
	}
	if phase != "Running" {
		return fmt.Errorf("conversation is %s after a heartbeat, want Running", phase)
	}
	return nil
}

func (t *tour) writeFile(ctx context.Context) error {
	session, err := t.sh(ctx, "kubectl get sbx hello -o jsonpath='{.status.sessionID}'")
	if err != nil {
		return err
	}
	session = strings.TrimSpace(session)
	if !strings.HasPrefix(session, "sbx_") {
		return fmt.Errorf("hello has no session id (%q)", session)
	}
	t.content = fmt.Sprintf("written by make demo at %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(t.out, "(Vercel API, as any client would with the values of %s: write %s in session %s)\n",
		filepath.Join(t.stateDir, "env"), demoFile, session)
	if err := t.vercel.WriteFiles(ctx, session, []vercel.File{{Path: demoFile, Content: []byte(t.content)}}); err != nil {
		return fmt.Errorf("write %s: %w", demoFile, err)
	}
	return t.expectFile(ctx, "hello", session)
}

func (t *tour) snapshot(ctx context.Context) error {
	if _, err := t.sh(ctx, "kubectl apply -f config/samples/snapshots/sandbox_v1alpha1_sandboxsnapshot_capture.yaml"); err != nil {
		return err
	}
	if _, err := t.sh(ctx, "kubectl wait --for=condition=Ready sbxsnap/hello-snapshot --timeout=2m"); err != nil {
		return err
	}
	out, err := t.sh(ctx, "kubectl get sbxsnap hello-snapshot")
	if err != nil {
		return err
	}
	if !lineShows(out, "hello-snapshot", "Ready", "true", "snap_") {
		return errors.New("kubectl get does not show hello-snapshot Ready with a snapshot id")
	}
	// keepSourceRunning: hello runs again, in a new session, with the file.
	if _, err := t.sh(ctx, "kubectl wait --for=condition=Ready sbx/hello --timeout=2m"); err != nil {
		return err
	}
	return nil
}

// forkManifest is the fork the tour creates, as the README shows it.
const forkCommand = `kubectl apply -f - <<EOF
apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxFork
metadata:
  name: hello-fork
spec:
  source:
    snapshotRef:
      name: hello-snapshot
  replicas: 3
EOF`

func (t *tour) fork(ctx context.Context) error {
	if _, err := t.sh(ctx, forkCommand); err != nil {
		return err
	}
	if _, err := t.sh(ctx, "kubectl wait --for=condition=Ready sbxfork/hello-fork --timeout=2m"); err != nil {
		return err
	}
	out, err := t.sh(ctx, "kubectl get sbx -l sandbox.sentry.io/fork=hello-fork")
	if err != nil {
		return err
	}
	children, err := t.sessions(ctx, "-l sandbox.sentry.io/fork=hello-fork")
	if err != nil {
		return err
	}
	want := []string{"hello-fork-0", "hello-fork-1", "hello-fork-2"}
	for _, name := range want {
		if children[name] == "" || !lineShows(out, name, "Running", "True", "sbx_") {
			return fmt.Errorf("child %s is not Running and Ready with a session (children: %v)", name, children)
		}
	}
	if len(children) != len(want) {
		return fmt.Errorf("want the children %v, got %v", want, children)
	}
	for _, name := range want {
		if err := t.expectFile(ctx, name, children[name]); err != nil {
			return err
		}
	}
	return nil
}

func (t *tour) pause(ctx context.Context) error {
	session, err := t.sessionOf(ctx, "hello")
	if err != nil {
		return err
	}
	t.helloOld = session
	if _, err := t.sh(ctx, `kubectl patch sbx hello --type=merge -p '{"spec":{"state":"Stopped"}}'`); err != nil {
		return err
	}
	if _, err := t.sh(ctx, "kubectl wait --for=jsonpath='{.status.phase}'=Stopped sbx/hello --timeout=2m"); err != nil {
		return err
	}
	if _, err := t.sh(ctx, "kubectl get sbx hello"); err != nil {
		return err
	}
	s, err := t.vercel.GetSession(ctx, t.helloOld)
	if err != nil {
		return fmt.Errorf("get session %s: %w", t.helloOld, err)
	}
	if s.Session.Status != vercel.SessionStopped {
		return fmt.Errorf("session %s of hello is %s in Vercel, want stopped", t.helloOld, s.Session.Status)
	}
	fmt.Fprintf(t.out, "(Vercel API: session %s is stopped)\n", t.helloOld)
	return nil
}

func (t *tour) resume(ctx context.Context) error {
	if _, err := t.sh(ctx, `kubectl patch sbx hello --type=merge -p '{"spec":{"state":"Running"}}'`); err != nil {
		return err
	}
	if _, err := t.sh(ctx, "kubectl wait --for=condition=Ready sbx/hello --timeout=2m"); err != nil {
		return err
	}
	if _, err := t.sh(ctx, "kubectl get sbx hello"); err != nil {
		return err
	}
	session, err := t.sessionOf(ctx, "hello")
	if err != nil {
		return err
	}
	if session == "" || session == t.helloOld {
		return fmt.Errorf("hello's session after the resume is %q, want a new one (before: %s)", session, t.helloOld)
	}
	return t.expectFile(ctx, "hello", session)
}

func (t *tour) deleteAll(ctx context.Context) error {
	if t.env == nil {
		return errors.New("the environment did not start")
	}
	if _, err := t.sh(ctx, "kubectl delete sbxfork,sbxsnap,sbx --all --timeout=2m"); err != nil {
		return err
	}
	out, err := t.sh(ctx, "kubectl get sbx,sbxsnap,sbxfork")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "No resources found") {
		return errors.New("objects are left after kubectl delete")
	}
	return nil
}

func (t *tour) nothingLeft(ctx context.Context) error {
	if t.vercel == nil {
		return errors.New("the environment did not start")
	}
	left, err := t.vercel.ListAllSandboxes(ctx, vercel.ListSandboxesOptions{})
	if err != nil {
		return fmt.Errorf("list Vercel sandboxes: %w", err)
	}
	var names []string
	for _, s := range left {
		names = append(names, fmt.Sprintf("%s (%s)", s.Name, s.Status))
	}
	fmt.Fprintf(t.out, "(Vercel API: %d sandboxes in the project)\n", len(left))
	if len(names) > 0 {
		return fmt.Errorf("left behind in Vercel: sandboxes %s", strings.Join(names, ", "))
	}
	// Snapshots are billed storage: deleting a Sandbox deletes the automatic
	// snapshots of its pauses, and deleting a SandboxSnapshot its own.
	snaps, err := t.vercel.ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{})
	if err != nil {
		return fmt.Errorf("list Vercel snapshots: %w", err)
	}
	var ids []string
	for _, s := range snaps {
		if s.Status != vercel.SnapshotDeleted {
			ids = append(ids, fmt.Sprintf("%s (%s of session %s)", s.ID, s.CreationMethod, s.SourceSessionID))
		}
	}
	fmt.Fprintf(t.out, "(Vercel API: %d snapshots left)\n", len(ids))
	if len(ids) > 0 {
		return fmt.Errorf("left behind in Vercel: snapshots %s", strings.Join(ids, ", "))
	}
	return nil
}

func (t *tour) stopDev(ctx context.Context) error {
	if t.dev == nil {
		return nil
	}
	fmt.Fprintf(t.out, "Sending SIGINT (Ctrl-C) to the dev program (PID %d)…\n", t.dev.Process.Pid)
	if err := t.dev.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	var exitErr error
	select {
	case exitErr = <-t.devDone:
	case <-ctx.Done():
		_ = syscall.Kill(-t.dev.Process.Pid, syscall.SIGKILL)
		<-t.devDone
		return fmt.Errorf("the dev program did not stop after SIGINT; killed it")
	}
	if exitErr != nil {
		return fmt.Errorf("the dev program exited with %v; its output ends:\n%s", exitErr, tail(t.devOut.String(), 2000))
	}
	if !strings.Contains(t.devOut.String(), "Stopped.") {
		return errors.New(`the dev program did not print "Stopped."`)
	}
	// Nothing it started may outlive it: its control plane and sandbox
	// commands all name or run in the state directory.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left = processesUsing(t.stateDir)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("processes left running: %s", strings.Join(left, "; "))
	}
	fmt.Fprintln(t.out, "Stopped; no process left behind.")
	return nil
}

// ---- helpers ----

// sh runs a user-facing command through bash, exactly as a user would type
// it, with the environment of <state-dir>/env, and prints it with its output.
func (t *tour) sh(ctx context.Context, command string) (string, error) {
	fmt.Fprintf(t.out, "$ %s\n", command)
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	out, err := t.runCmd(cmd)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if line != "" {
			fmt.Fprintf(t.out, "  %s\n", line)
		}
	}
	if err != nil {
		return out, fmt.Errorf("%s: %w", firstLine(command), err)
	}
	return out, nil
}

// kubectl runs kubectl quietly, for the checks between the tour's commands.
func (t *tour) kubectl(ctx context.Context, args ...string) (string, error) {
	out, err := t.runCmd(exec.CommandContext(ctx, "kubectl", args...))
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out))
	}
	return out, nil
}

func (t *tour) runCmd(cmd *exec.Cmd) (string, error) {
	cmd.Dir = t.root
	cmd.Env = os.Environ()
	for k, v := range t.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// A timed-out command goes with its children (bash, kubectl).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// sessionOf reads one Sandbox's status.sessionID.
func (t *tour) sessionOf(ctx context.Context, name string) (string, error) {
	out, err := t.kubectl(ctx, "get", "sbx", name, "-o", "jsonpath={.status.sessionID}")
	return strings.TrimSpace(out), err
}

// sessions maps the Sandboxes a kubectl selector picks to their session ids.
func (t *tour) sessions(ctx context.Context, selector string) (map[string]string, error) {
	args := append([]string{"get", "sbx"}, strings.Fields(selector)...)
	args = append(args, "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.sessionID}{"\n"}{end}`)
	out, err := t.kubectl(ctx, args...)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			m[f[0]] = f[1]
		} else if len(f) == 1 {
			m[f[0]] = ""
		}
	}
	return m, nil
}

// expectFile reads demoFile in a session through the Vercel API and compares
// it with what the tour wrote.
func (t *tour) expectFile(ctx context.Context, sandbox, session string) error {
	b, err := t.vercel.ReadFile(ctx, session, demoFile, "")
	if err != nil {
		return fmt.Errorf("read %s in %s (session %s): %w", demoFile, sandbox, session, err)
	}
	if string(b) != t.content {
		return fmt.Errorf("%s in %s (session %s) is %q, want %q", demoFile, sandbox, session, b, t.content)
	}
	fmt.Fprintf(t.out, "(Vercel API: %s in %s, session %s, has the content written)\n", demoFile, sandbox, session)
	return nil
}

// lineShows reports whether a line of kubectl's table output starts with
// name and has fields starting with each of words, in order.
func lineShows(out, name string, words ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != name {
			continue
		}
		i := 1
		for _, w := range words {
			for i < len(f) && !strings.HasPrefix(f[i], w) {
				i++
			}
			if i == len(f) {
				return false
			}
			i++
		}
		return true
	}
	return false
}

// readEnvFile parses the dev program's sourceable env file: lines of
// `export K=V K2=V2`.
func readEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	return env, sc.Err()
}

// processesUsing describes the processes (other than this one) whose
// command line or working directory mentions dir.
func processesUsing(dir string) []string {
	var out []string
	for _, p := range procfs.Using(dir) {
		out = append(out, fmt.Sprintf("PID %d %s", p.PID, strings.Join(p.Args, " ")))
	}
	slices.Sort(out)
	return out
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// lineWatcher copies output to w and closes found once a line equals want.
type lineWatcher struct {
	mu    sync.Mutex
	w     io.Writer
	buf   bytes.Buffer
	want  string
	found chan struct{}
	done  bool
}

func newLineWatcher(want string, w io.Writer) *lineWatcher {
	return &lineWatcher{w: w, want: want, found: make(chan struct{})}
}

func (l *lineWatcher) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(p)
	l.buf.Write(p)
	if !l.done && slices.Contains(strings.Split(l.buf.String(), "\n"), l.want) {
		l.done = true
		close(l.found)
	}
	return len(p), nil
}

func (l *lineWatcher) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
