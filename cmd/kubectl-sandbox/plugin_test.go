package main

// These tests build kubectl-sandbox into a temporary directory on PATH and
// run the real kubectl, which finds the plugin there, against the dev
// environment of localstack/clienttest: the API server with the CRDs, the
// Vercel emulator and the manager, with KUBECONFIG and VERCEL_* set as
// `make dev` prints them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/pty"
	"github.com/getsentry/sandbox-controller/localstack/clienttest"
)

// pluginDir holds the built kubectl-sandbox.
var pluginDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubectl-sandbox-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-sandbox"), ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build kubectl-sandbox:", err)
		os.Exit(1)
	}
	pluginDir = dir
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	code := clienttest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one run of kubectl.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// kubectlIn runs the real kubectl with stdin, and returns what it printed
// and its exit code.
func kubectlIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	if exit, ok := err.(*exec.ExitError); ok {
		r.code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return r
}

func kubectl(t *testing.T, args ...string) result {
	t.Helper()
	return kubectlIn(t, "", args...)
}

// ok runs kubectl and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := kubectl(t, args...)
	if r.code != 0 {
		t.Fatalf("kubectl %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// sandbox is `kubectl sandbox VERB -n ns ARGS` (-n before the arguments:
// after exec's -- it would be the command's).
func sandbox(ns, verb string, args ...string) []string {
	return append([]string{"sandbox", verb, "-n", ns}, args...)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := "plugin-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	ok(t, "create", "namespace", ns)
	return ns
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
	return v
}

func readyOf(s *sandboxv1.Sandbox) string {
	for _, c := range s.Status.Conditions {
		if c.Type == sandboxv1.ConditionReady {
			return string(c.Status)
		}
	}
	return ""
}

func TestKubectlFindsThePlugin(t *testing.T) {
	list := ok(t, "plugin", "list")
	if !strings.Contains(list, filepath.Join(pluginDir, "kubectl-sandbox")) {
		t.Errorf("kubectl plugin list does not show the plugin:\n%s", list)
	}
	help := ok(t, "sandbox", "--help")
	for _, verb := range []string{"create", "up", "ls", "status", "pause", "resume", "snapshot", "fork", "scale",
		"heartbeat", "exec", "cp", "shell", "tree", "rm", "wait", "history", "rewind"} {
		if !strings.Contains(help, "\n  "+verb+" ") {
			t.Errorf("kubectl sandbox --help lists no %q verb:\n%s", verb, help)
		}
	}
	if !strings.Contains(help, "kubectl sandbox [command]") {
		t.Errorf("help does not name the command as kubectl sandbox:\n%s", help)
	}
}

func TestCreateDryRunMirrorsTheSpec(t *testing.T) {
	ns := newNamespace(t)
	out := ok(t, sandbox(ns, "create", "box", "--runtime", "python3.13", "--port", "3000", "--port", "8080",
		"--env", "A=1", "--timeout-seconds", "120", "--setup", "echo hi > f", "--persistent=false",
		"--network", "Allowlist", "--allow-domain", "github.com", "-l", "app=box", "--vcpus", "2",
		"--deletion-policy", "Retain", "--stopped", "--dry-run=client", "-o", "yaml")...)
	var sbx sandboxv1.Sandbox
	if err := yaml.UnmarshalStrict([]byte(out), &sbx); err != nil {
		t.Fatalf("-o yaml is not a Sandbox: %v\n%s", err, out)
	}
	s := sbx.Spec
	switch {
	case sbx.Kind != "Sandbox" || sbx.APIVersion != "sandbox.sentry.io/v1alpha1":
		t.Errorf("kind %q apiVersion %q", sbx.Kind, sbx.APIVersion)
	case sbx.Name != "box" || sbx.Namespace != ns || sbx.Labels["app"] != "box":
		t.Errorf("metadata %+v", sbx.ObjectMeta)
	case s.Source.Runtime == nil || *s.Source.Runtime != "python3.13":
		t.Errorf("source %+v", s.Source)
	case fmt.Sprint(s.Ports) != "[3000 8080]", s.TimeoutSeconds == nil || *s.TimeoutSeconds != 120:
		t.Errorf("ports %v timeoutSeconds %v", s.Ports, s.TimeoutSeconds)
	case len(s.Env) != 1 || s.Env[0].Name != "A" || *s.Env[0].Value != "1":
		t.Errorf("env %+v", s.Env)
	case len(s.Setup) != 1 || s.Setup[0].Command != "sh" || fmt.Sprint(s.Setup[0].Args) != "[-c echo hi > f]":
		t.Errorf("setup %+v", s.Setup)
	case s.Persistent == nil || *s.Persistent, s.State != sandboxv1.SandboxStateStopped, s.DeletionPolicy != sandboxv1.DeletionPolicyRetain:
		t.Errorf("persistent %v state %q deletionPolicy %q", s.Persistent, s.State, s.DeletionPolicy)
	case s.NetworkPolicy == nil || s.NetworkPolicy.Mode != sandboxv1.NetworkAllowlist || fmt.Sprint(s.NetworkPolicy.AllowedDomains) != "[github.com]":
		t.Errorf("networkPolicy %+v", s.NetworkPolicy)
	case s.Resources == nil || *s.Resources.VCPUs != 2:
		t.Errorf("resources %+v", s.Resources)
	}
	// A client dry run sends nothing.
	if r := kubectl(t, "get", "sandbox", "box", "-n", ns); r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
		t.Errorf("the dry run created the Sandbox: %s", r)
	}
	// The API server's own validation answers a bad spec.
	r := kubectl(t, sandbox(ns, "create", "bad", "--runtime", "node24", "--snapshot", "x", "--dry-run=server")...)
	if r.code != 1 || !strings.Contains(r.stderr, "exactly one of runtime, image, git, tarball, snapshotRef, snapshotID or adopt") {
		t.Errorf("two sources: want exit 1 with the CRD's message, got %s", r)
	}
}

// TestSandboxLifecycle drives one Sandbox through every control and data
// verb, in the order a Box session uses them.
func TestSandboxLifecycle(t *testing.T) {
	ns := newNamespace(t)

	// create returns at once; wait returns when it is Ready.
	if out := ok(t, sandbox(ns, "create", "dev", "--port", "3000", "-o", "name")...); out != "sandbox.sandbox.sentry.io/dev\n" {
		t.Errorf("create -o name printed %q", out)
	}
	sbx := decodeJSON[sandboxv1.Sandbox](t, ok(t, sandbox(ns, "wait", "sandbox/dev", "--timeout", "2m", "-o", "json")...))
	if readyOf(&sbx) != "True" || sbx.Status.SessionID == "" || sbx.Status.Phase != sandboxv1.SandboxRunning {
		t.Fatalf("wait returned a Sandbox that is not Ready: phase %s ready %q session %q", sbx.Status.Phase, readyOf(&sbx), sbx.Status.SessionID)
	}
	if sbx.Spec.Source.Runtime == nil || *sbx.Spec.Source.Runtime != "node24" {
		t.Errorf("no source flag: want runtime node24, got %+v", sbx.Spec.Source)
	}

	// up on an existing Sandbox uses it as it is.
	up := decodeJSON[sandboxv1.Sandbox](t, ok(t, sandbox(ns, "up", "dev", "--runtime", "python3.13", "-o", "json")...))
	if up.UID != sbx.UID || up.Status.SessionID != sbx.Status.SessionID || *up.Spec.Source.Runtime != "node24" {
		t.Errorf("up of an existing Sandbox: uid %s session %s source %v, want %s %s node24", up.UID, up.Status.SessionID, *up.Spec.Source.Runtime, sbx.UID, sbx.Status.SessionID)
	}
	if up.Annotations[sandboxv1.AnnotationLastActivity] == "" {
		t.Errorf("up recorded no heartbeat")
	}

	t.Run("ls and status", func(t *testing.T) {
		table := ok(t, sandbox(ns, "ls")...)
		lines := strings.Split(strings.TrimSpace(table), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "dev") ||
			!strings.Contains(lines[1], "Running") || !strings.Contains(lines[1], sbx.Status.SessionID) {
			t.Errorf("ls:\n%s", table)
		}
		if out := ok(t, sandbox(ns, "ls", "-o", "name")...); out != "sandbox.sandbox.sentry.io/dev\n" {
			t.Errorf("ls -o name printed %q", out)
		}
		list := decodeJSON[map[string]any](t, ok(t, sandbox(ns, "ls", "-o", "json")...))
		items, _ := list["items"].([]any)
		if len(items) != 1 || items[0].(map[string]any)["kind"] != "Sandbox" {
			t.Errorf("ls -o json: %v", list)
		}
		// -o wide: the columns of kubectl get sbx -o wide (the CRD's printer
		// columns, rendered by the API server), the class, vCPUs, route and
		// Ready reason among them.
		wide := ok(t, sandbox(ns, "ls", "-o", "wide")...)
		get := ok(t, "get", "sbx", "-n", ns, "-o", "wide")
		header := func(s string) string { h, _, _ := strings.Cut(s, "\n"); return strings.Join(strings.Fields(h), " ") }
		if header(wide) != header(get) {
			t.Errorf("ls -o wide header %q, kubectl get sbx -o wide header %q", header(wide), header(get))
		}
		for _, col := range []string{"REASON", "CLASS", "VCPUS", "ROUTE"} {
			if !strings.Contains(header(wide), col) {
				t.Errorf("ls -o wide has no %s column:\n%s", col, wide)
			}
		}
		if len(sbx.Status.Routes) == 0 || !strings.Contains(wide, sbx.Status.Routes[0].URL) || !strings.Contains(wide, "Running") {
			t.Errorf("ls -o wide does not show the route %v and phase:\n%s", sbx.Status.Routes, wide)
		}
		// -A, as kubectl's --all-namespaces, adds the namespace column.
		if all := ok(t, "sandbox", "ls", "-A"); !strings.Contains(all, ns) || !strings.HasPrefix(all, "NAMESPACE") {
			t.Errorf("ls -A:\n%s", all)
		}
		desc := ok(t, sandbox(ns, "status", "dev")...)
		for _, want := range []string{"Phase:", "Running", "Session:", sbx.Status.SessionID, "Route 3000:", "Conditions:"} {
			if !strings.Contains(desc, want) {
				t.Errorf("status does not show %q:\n%s", want, desc)
			}
		}
		var got sandboxv1.Sandbox
		if err := yaml.Unmarshal([]byte(ok(t, sandbox(ns, "status", "dev", "-o", "yaml")...)), &got); err != nil || got.UID != sbx.UID {
			t.Errorf("status -o yaml: uid %s err %v", got.UID, err)
		}
		if r := kubectl(t, sandbox(ns, "status", "nothing")...); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("status of a missing Sandbox: %s", r)
		}
	})

	t.Run("exec", func(t *testing.T) {
		r := kubectl(t, sandbox(ns, "exec", "dev", "--", "sh", "-c", "echo out; echo err >&2; exit 7")...)
		if r.code != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
			t.Errorf("exec: want exit 7, stdout out, stderr err; got %s", r)
		}
		if out := ok(t, sandbox(ns, "exec", "dev", "-w", "/tmp", "-e", "X=forty-two", "--", "sh", "-c", `echo "$X $(pwd)"`)...); out != "forty-two /tmp\n" {
			t.Errorf("exec -w /tmp -e X=forty-two printed %q", out)
		}
		// Flags of the command are the command's.
		if out := ok(t, sandbox(ns, "exec", "dev", "--", "ls", "-a", "-d", "/vercel/sandbox")...); out != "/vercel/sandbox\n" {
			t.Errorf("exec ls -a -d printed %q", out)
		}
		if r := kubectl(t, sandbox(ns, "exec", "nothing", "--", "true")...); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("exec in a missing Sandbox: %s", r)
		}
	})

	t.Run("cp", func(t *testing.T) {
		local := t.TempDir()
		write := func(rel, content string, mode os.FileMode) {
			p := filepath.Join(local, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
		}
		write("hello.txt", "hello\n", 0o644)
		write("tree/a.txt", "a\n", 0o644)
		write("tree/sub/run.sh", "#!/bin/sh\necho ran\n", 0o755)
		if err := os.MkdirAll(filepath.Join(local, "tree", "empty"), 0o755); err != nil {
			t.Fatal(err)
		}

		// A file to a new path, then into an existing directory.
		ok(t, sandbox(ns, "cp", filepath.Join(local, "hello.txt"), "dev:/vercel/sandbox/in/greeting.txt")...)
		ok(t, sandbox(ns, "cp", filepath.Join(local, "hello.txt"), "dev:/tmp")...)
		if out := ok(t, sandbox(ns, "exec", "dev", "--", "cat", "/vercel/sandbox/in/greeting.txt", "/tmp/hello.txt")...); out != "hello\nhello\n" {
			t.Errorf("uploaded files read %q", out)
		}
		// A directory to a relative path (under /vercel/sandbox): modes and empty directories kept.
		ok(t, sandbox(ns, "cp", filepath.Join(local, "tree"), "dev:up")...)
		if out := ok(t, sandbox(ns, "exec", "dev", "--", "sh", "-c", "cat /vercel/sandbox/up/a.txt; /vercel/sandbox/up/sub/run.sh; test -d /vercel/sandbox/up/empty && echo empty")...); out != "a\nran\nempty\n" {
			t.Errorf("uploaded tree: %q", out)
		}

		// Back: a file to a new local path, a directory into an existing local directory.
		back := t.TempDir()
		ok(t, sandbox(ns, "cp", "dev:in/greeting.txt", filepath.Join(back, "g.txt"))...)
		if b, err := os.ReadFile(filepath.Join(back, "g.txt")); err != nil || string(b) != "hello\n" {
			t.Errorf("downloaded file: %q %v", b, err)
		}
		ok(t, sandbox(ns, "cp", "dev:/vercel/sandbox/up", back)...)
		if b, err := os.ReadFile(filepath.Join(back, "up", "sub", "run.sh")); err != nil || string(b) != "#!/bin/sh\necho ran\n" {
			t.Errorf("downloaded tree: %q %v", b, err)
		}
		if fi, err := os.Stat(filepath.Join(back, "up", "sub", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("downloaded script mode: %v %v", fi, err)
		}
		if fi, err := os.Stat(filepath.Join(back, "up", "empty")); err != nil || !fi.IsDir() {
			t.Errorf("downloaded empty directory: %v", err)
		}
		if r := kubectl(t, sandbox(ns, "cp", "dev:/no/such/file", back)...); r.code != 1 || !strings.Contains(r.stderr, "no such file") {
			t.Errorf("cp of a missing path: %s", r)
		}
	})

	t.Run("shell", func(t *testing.T) {
		r := kubectlIn(t, "cd /tmp\npwd\necho $((2+3)) > five\n\ncat five\ncd sub-missing\nfalse\nexit 4\necho never\n", sandbox(ns, "shell", "dev")...)
		if r.code != 4 || r.stdout != "/tmp\n5\n" || !strings.Contains(r.stderr, "sub-missing") {
			t.Errorf("shell: want exit 4, stdout /tmp and 5, the cd error on stderr; got %s", r)
		}
		// Without exit, the last line's exit code; the start directory is -w.
		r = kubectlIn(t, "pwd\nsh -c 'exit 3'\n", sandbox(ns, "shell", "dev", "-w", "/vercel/sandbox/up")...)
		if r.code != 3 || r.stdout != "/vercel/sandbox/up\n" {
			t.Errorf("shell -w: want exit 3 and the directory; got %s", r)
		}
	})

	t.Run("shell on a terminal", func(t *testing.T) {
		// From a terminal, shell is an interactive session on a terminal in
		// the sandbox: one shell process (variables and cd last), a real tty
		// of the local window's size, and the shell's exit code.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "kubectl", sandbox(ns, "shell", "dev")...)
		master, err := pty.Start(cmd, pty.Size{Cols: 111, Rows: 33})
		if err != nil {
			t.Fatal(err)
		}
		defer master.Close()
		var mu sync.Mutex
		var screen bytes.Buffer
		go func() {
			b := make([]byte, 4096)
			for {
				n, err := master.Read(b)
				mu.Lock()
				screen.Write(b[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		expect := func(want string) {
			t.Helper()
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				mu.Lock()
				got := screen.String()
				mu.Unlock()
				if strings.Contains(got, want) {
					return
				}
			}
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the terminal never showed %q; it showed:\n%s", want, screen.String())
		}
		expect("dev:/vercel/sandbox$ ")
		_, _ = master.WriteString("cd /tmp; X=kept\r")
		_, _ = master.WriteString("echo \"where=$(pwd) x=$X size=$(stty size)\"; test -t 0 && echo on-a-tty\r")
		expect("where=/tmp x=kept size=33 111")
		expect("on-a-tty")
		_, _ = master.WriteString("exit 6\r")
		err = cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 6 {
			mu.Lock()
			defer mu.Unlock()
			t.Errorf("shell on a terminal: %v after `exit 6`, want exit code 6; terminal:\n%s", err, screen.String())
		}
	})

	t.Run("heartbeat", func(t *testing.T) {
		ok(t, "annotate", "--overwrite", "-n", ns, "sandbox", "dev", sandboxv1.AnnotationLastActivity+"=2000-01-01T00:00:00Z")
		if out := ok(t, sandbox(ns, "heartbeat", "dev")...); out != "sandbox.sandbox.sentry.io/dev heartbeat recorded\n" {
			t.Errorf("heartbeat printed %q", out)
		}
		at := ok(t, "get", "-n", ns, "sandbox", "dev", "-o", "jsonpath={.metadata.annotations.sandbox\\.sentry\\.io/last-activity}")
		if ts, err := time.Parse(time.RFC3339, at); err != nil || time.Since(ts) > time.Minute {
			t.Errorf("after heartbeat the annotation is %q (%v)", at, err)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		if out := ok(t, sandbox(ns, "pause", "dev", "--wait=false")...); out != "sandbox.sandbox.sentry.io/dev paused\n" {
			t.Errorf("pause printed %q", out)
		}
		stopped := decodeJSON[sandboxv1.Sandbox](t, ok(t, sandbox(ns, "wait", "dev", "--for", "stopped", "-o", "json")...))
		if stopped.Status.Phase != sandboxv1.SandboxStopped || stopped.Spec.State != sandboxv1.SandboxStateStopped {
			t.Errorf("after pause: phase %s state %s", stopped.Status.Phase, stopped.Spec.State)
		}
		// exec does not resume a paused Sandbox; it says how.
		if r := kubectl(t, sandbox(ns, "exec", "dev", "--", "true")...); r.code != 1 || !strings.Contains(r.stderr, "kubectl sandbox resume dev") {
			t.Errorf("exec in a paused Sandbox: %s", r)
		}
		resumed := decodeJSON[sandboxv1.Sandbox](t, ok(t, sandbox(ns, "resume", "dev", "-o", "json")...))
		if readyOf(&resumed) != "True" || resumed.Status.SessionID == "" || resumed.Status.SessionID == sbx.Status.SessionID {
			t.Errorf("resume: ready %q session %q (before %q)", readyOf(&resumed), resumed.Status.SessionID, sbx.Status.SessionID)
		}
		// The filesystem came back.
		if out := ok(t, sandbox(ns, "exec", "dev", "--", "cat", "/vercel/sandbox/in/greeting.txt")...); out != "hello\n" {
			t.Errorf("after resume the uploaded file reads %q", out)
		}
	})

	t.Run("rm", func(t *testing.T) {
		// Vercel takes its time to delete, so that returning before the
		// finalizer ran would show.
		em := clienttest.Stack.Emulator
		deletes := em.RequestCount("deleteSandbox")
		em.Faults().SetLatency("deleteSandbox", 2*time.Second)
		defer em.Faults().SetLatency("deleteSandbox", 0)
		if out := ok(t, sandbox(ns, "rm", "dev")...); out != "sandbox.sandbox.sentry.io/dev deleted\n" {
			t.Errorf("rm printed %q", out)
		}
		// rm waited for the finalizer: the object is gone when it returns,
		// and so is the Vercel sandbox.
		if r := kubectl(t, "get", "sandbox", "dev", "-n", ns); r.code == 0 || !strings.Contains(r.stderr, "NotFound") {
			t.Errorf("after rm: %s", r)
		}
		if n := em.RequestCount("deleteSandbox") - deletes; n < 1 {
			t.Errorf("rm returned before the Vercel sandbox was deleted (%d deleteSandbox requests)", n)
		}
		if r := kubectl(t, sandbox(ns, "rm", "dev")...); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("rm of a missing Sandbox: %s", r)
		}
		ok(t, sandbox(ns, "rm", "dev", "--ignore-not-found")...)
	})
}

func TestWaitFailsWithTheReason(t *testing.T) {
	ns := newNamespace(t)
	ok(t, sandbox(ns, "create", "broken", "--setup", "echo broken >&2; exit 3")...)
	start := time.Now()
	r := kubectl(t, sandbox(ns, "wait", "broken", "--timeout", "3m")...)
	if r.code != 1 || !strings.Contains(r.stderr, sandboxv1.ReasonSetupFailed) {
		t.Errorf("wait for a Sandbox whose setup fails: want exit 1 and %s, got %s", sandboxv1.ReasonSetupFailed, r)
	}
	if d := time.Since(start); d > 2*time.Minute {
		t.Errorf("wait returned after %s: on the timeout, not on the status", d)
	}
	// A wait that cannot be met ends on --timeout with the last status seen.
	r = kubectl(t, sandbox(ns, "wait", "broken", "--for", "phase=Running", "--timeout", "2s")...)
	if r.code != 1 || !strings.Contains(r.stderr, "deadline exceeded") || !strings.Contains(r.stderr, "Failed") {
		t.Errorf("wait --for phase=Running of a Failed Sandbox: %s", r)
	}
	if r := kubectl(t, sandbox(ns, "wait", "nothing", "--timeout", "30s")...); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("wait for a missing Sandbox: %s", r)
	}
}

// treeNodeJSON is tree -o json's node.
type treeNodeJSON struct {
	Kind, Name, Phase, Ready string
	Children                 []treeNodeJSON
}

func (n treeNodeJSON) String() string {
	var b strings.Builder
	var walk func(treeNodeJSON, string)
	walk = func(n treeNodeJSON, indent string) {
		fmt.Fprintf(&b, "%s%s/%s\n", indent, n.Kind, n.Name)
		for _, c := range n.Children {
			walk(c, indent+"  ")
		}
	}
	walk(n, "")
	return b.String()
}

func TestSnapshotForkScaleTree(t *testing.T) {
	ns := newNamespace(t)
	ok(t, sandbox(ns, "up", "src")...)
	ok(t, sandbox(ns, "exec", "src", "--", "sh", "-c", "echo v1 > /vercel/sandbox/marker")...)

	snap := decodeJSON[sandboxv1.SandboxSnapshot](t, ok(t, sandbox(ns, "snapshot", "src", "snap1", "--keep-running", "-o", "json")...))
	if !snap.Status.ReadyToUse || snap.Status.SnapshotID == "" || snap.Spec.Source.SandboxRef.Name != "src" {
		t.Fatalf("snapshot: readyToUse %v id %q source %+v", snap.Status.ReadyToUse, snap.Status.SnapshotID, snap.Spec.Source)
	}
	// A default name when none is given.
	if out := ok(t, sandbox(ns, "snapshot", "src", "--keep-running", "--wait=false", "-o", "name")...); !strings.HasPrefix(out, "sandboxsnapshot.sandbox.sentry.io/src-") {
		t.Errorf("snapshot without a name printed %q", out)
	}

	ok(t, sandbox(ns, "create", "fromsnap", "--snapshot", "snap1", "--wait")...)
	if out := ok(t, sandbox(ns, "exec", "fromsnap", "--", "cat", "/vercel/sandbox/marker")...); out != "v1\n" {
		t.Errorf("a Sandbox booted from the snapshot reads %q", out)
	}

	fork := decodeJSON[sandboxv1.SandboxFork](t, ok(t, sandbox(ns, "fork", "src", "tries", "--replicas", "2", "--keep-source-running", "-l", "try=yes", "-o", "json")...))
	if fork.Status.Phase != sandboxv1.ForkReady || fork.Status.ReadyReplicas != 2 || len(fork.Status.Children) != 2 {
		t.Fatalf("fork: phase %s ready %d children %v", fork.Status.Phase, fork.Status.ReadyReplicas, fork.Status.Children)
	}
	if out := ok(t, sandbox(ns, "exec", "tries-1", "--", "cat", "/vercel/sandbox/marker")...); out != "v1\n" {
		t.Errorf("fork child reads %q", out)
	}
	if out := ok(t, sandbox(ns, "ls", "-l", "try=yes", "-o", "name")...); out != "sandbox.sandbox.sentry.io/tries-0\nsandbox.sandbox.sentry.io/tries-1\n" {
		t.Errorf("ls -l try=yes printed %q", out)
	}

	scaled := decodeJSON[sandboxv1.SandboxFork](t, ok(t, sandbox(ns, "scale", "tries", "--replicas", "1", "-o", "json")...))
	if scaled.Status.Replicas != 1 || scaled.Status.ReadyReplicas != 1 || len(scaled.Status.Children) != 1 || scaled.Status.Children[0].Name != "tries-0" {
		t.Errorf("scale to 1: %+v", scaled.Status)
	}

	// The lineage: src → snap1 → fromsnap, src → tries → (tries' capture, tries-0).
	// scale returns once the fork counts one replica; tries-1 may still be
	// Terminating (its finalizer deletes the Vercel sandbox), and the tree
	// shows what exists, so wait until it is gone.
	var roots []treeNodeJSON
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		roots = decodeJSON[[]treeNodeJSON](t, ok(t, sandbox(ns, "tree", "fromsnap", "-o", "json")...))
		if !strings.Contains(fmt.Sprint(roots), "tries-1") || time.Now().After(deadline) {
			break
		}
	}
	if len(roots) != 1 || roots[0].Name != "src" {
		t.Fatalf("tree fromsnap: want the one tree from src, got %v", roots)
	}
	want := map[string]string{ // child → parent
		"SandboxSnapshot/snap1": "Sandbox/src", "Sandbox/fromsnap": "SandboxSnapshot/snap1",
		"SandboxFork/tries": "Sandbox/src", "Sandbox/tries-0": "SandboxFork/tries",
	}
	got := map[string]string{}
	var walk func(treeNodeJSON)
	walk = func(n treeNodeJSON) {
		for _, c := range n.Children {
			got[c.Kind+"/"+c.Name] = n.Kind + "/" + n.Name
			walk(c)
		}
	}
	walk(roots[0])
	for child, parent := range want {
		if got[child] != parent {
			t.Errorf("tree: %s is under %q, want %s\n%s", child, got[child], parent, roots[0])
		}
	}
	if _, ok := got["Sandbox/tries-1"]; ok {
		t.Errorf("tree shows tries-1, which scale removed:\n%s", roots[0])
	}
	text := ok(t, sandbox(ns, "tree")...)
	t.Logf("kubectl sandbox tree:\n%s", text)
	for _, line := range []string{"sandbox/src (Running, Ready=True)\n", "├── sandboxsnapshot/snap1 (Ready, readyToUse=true)\n",
		"│   └── sandbox/fromsnap (Running, Ready=True)\n", "sandboxfork/tries (Ready, 1/1 ready)\n"} {
		if !strings.Contains(text, line) {
			t.Errorf("tree does not show %q:\n%s", line, text)
		}
	}

	// rm --wait=false, then wait --for delete; a fork takes its children along.
	ok(t, sandbox(ns, "rm", "sandboxfork/tries", "--wait=false")...)
	if out := ok(t, sandbox(ns, "wait", "sandboxfork/tries", "--for", "delete")...); out != "sandboxfork.sandbox.sentry.io/tries deleted\n" {
		t.Errorf("wait --for delete printed %q", out)
	}
	if r := kubectl(t, "get", "sandbox", "tries-0", "-n", ns); r.code == 0 {
		t.Errorf("the fork's child outlived the fork: %s", r)
	}
	ok(t, sandbox(ns, "rm", "fromsnap", "sandboxsnapshot/snap1", "src")...)
	if out := ok(t, sandbox(ns, "tree", "-o", "name")...); strings.Contains(out, "/src\n") || strings.Contains(out, "/snap1\n") {
		t.Errorf("tree after rm: %q", out)
	}
}
