package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/procfs"
)

// TestDev runs the dev program the way a user runs `make dev` and drives it
// with the real kubectl, the example client and a second instance, then
// stops it with Ctrl-C and checks nothing it started is left running.
func TestDev(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is needed on PATH: %v", err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		out, err := exec.Command(filepath.Join(root, "hack", "envtest.sh")).Output()
		if err != nil {
			t.Fatalf("hack/envtest.sh: %v", err)
		}
		assets = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(t.TempDir(), "dev")
	runCmd(t, root, nil, "go", "build", "-o", bin, "./hack/dev")

	stateDir := t.TempDir()
	start := time.Now()
	dev := exec.Command(bin, "--state-dir", stateDir, "--poll-interval", "5s", "--oidc")
	dev.Dir = root
	dev.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets)
	out := newWatcher(ReadyLine)
	dev.Stdout, dev.Stderr = out, out
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	t.Cleanup(func() {
		if dev.ProcessState == nil { // the test failed half-way: still stop it
			_ = dev.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(time.Minute):
				_ = dev.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("dev output:\n%s", out)
			if b, err := os.ReadFile(filepath.Join(stateDir, "manager.log")); err == nil {
				t.Logf("manager.log (tail):\n%s", tail(string(b), 4000))
			}
		}
	})
	select {
	case <-out.found:
	case err := <-exited:
		t.Fatalf("dev exited before %q: %v", ReadyLine, err)
	case <-time.After(3 * time.Minute):
		t.Fatalf("no %q within 3 minutes", ReadyLine)
	}
	t.Logf("ready after %s", time.Since(start).Round(time.Millisecond))
	printed := out.String()

	// The banner: the export line with the fixed, absolute kubeconfig path,
	// the emulator's URL and token, and the control plane's PIDs.
	kubeconfig := match(t, printed, `(?m)^  export KUBECONFIG=(\S+)$`)[1]
	if want := filepath.Join(stateDir, "kubeconfig"); kubeconfig != want {
		t.Errorf("printed KUBECONFIG=%s, want %s", kubeconfig, want)
	}
	vercelEnv := match(t, printed, `(?m)^  export VERCEL_API_URL=(\S+) VERCEL_TOKEN=(\S+) VERCEL_TEAM_ID=(\S+) VERCEL_PROJECT_ID=(\S+)$`)
	for _, want := range []string{"kubectl apply -f config/samples/", "kubectl wait --for=condition=Ready sandbox --all", "kubectl get sbx", "exec="} {
		if !strings.Contains(printed, want) {
			t.Errorf("the banner does not mention %q", want)
		}
	}
	if strings.Contains(printed, "Starting Controller") || strings.Contains(printed, "controller-runtime") {
		t.Errorf("manager logs reached the terminal; they belong in manager.log")
	}
	var pids []int
	for _, m := range regexp.MustCompile(`(?m)^  (kube-apiserver|etcd|kube-controller-manager) PID (\d+)$`).FindAllStringSubmatch(printed, -1) {
		pid, _ := strconv.Atoi(m[2])
		pids = append(pids, pid)
	}
	if len(pids) != 3 {
		t.Fatalf("want the PIDs of etcd, kube-apiserver and kube-controller-manager in the banner, got %v", pids)
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("control plane PID %d is not running", pid)
		}
	}
	if found := processesUsing(stateDir); !slices.Contains(found, pids[0]) || !slices.Contains(found, pids[1]) || !slices.Contains(found, pids[2]) {
		t.Fatalf("/proc scan for %s found %v, want it to include %v", stateDir, found, pids)
	}

	// The manager is not an administrator: it runs as the ServiceAccount of
	// the Deployment `make deploy` installs, bound to the ClusterRole and
	// Roles rendered from config/, so a rule it lacks fails here as there.
	const wantManager = "system:serviceaccount:sandbox-controller-system:sandbox-controller-controller-manager"
	if got := match(t, printed, `(?m)^Started the manager as (\S+), with the RBAC of config/default`)[1]; got != wantManager {
		t.Errorf("the manager runs as %s, want %s", got, wantManager)
	}
	menv := []string{"KUBECONFIG=" + filepath.Join(stateDir, "manager-kubeconfig")}
	if who := runCmd(t, root, menv, "kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); who != wantManager {
		t.Errorf("the manager's kubeconfig authenticates as %q, want %s", who, wantManager)
	}
	canI := func(args ...string) string {
		cmd := exec.Command("kubectl", append([]string{"auth", "can-i"}, args...)...)
		cmd.Dir, cmd.Env = root, append(os.Environ(), menv...)
		out, _ := cmd.Output() // exit 1 means "no"
		return strings.TrimSpace(string(out))
	}
	for _, denied := range [][]string{
		{"create", "clusterrolebindings"}, {"escalate", "clusterroles"}, {"impersonate", "users"},
		{"create", "secrets", "-n", "default"}, {"delete", "namespaces"}, {"create", "pods", "-n", "default"},
	} {
		if got := canI(denied...); got != "no" {
			t.Errorf("the manager may %v (kubectl auth can-i says %q): it must have only the deployed RBAC", denied, got)
		}
	}
	if got := canI("watch", "sandboxes.sandbox.sentry.io", "--all-namespaces"); got != "yes" {
		t.Errorf("the manager may not watch Sandboxes (kubectl auth can-i says %q)", got)
	}

	// The commands the banner suggests, with the real kubectl.
	kenv := []string{"KUBECONFIG=" + kubeconfig}
	step := time.Now()
	if out := runCmd(t, root, kenv, "kubectl", "apply", "-f", "config/samples/"); strings.Contains(out, "Warning") {
		t.Errorf("kubectl apply -f config/samples/ warns:\n%s", out)
	}
	runCmd(t, root, kenv, "kubectl", "wait", "--for=condition=Ready", "sandbox", "--all", "--timeout=90s")
	t.Logf("samples Ready in %s", time.Since(step).Round(time.Millisecond))
	got := runCmd(t, root, kenv, "kubectl", "get", "sbx")
	for _, want := range []string{"hello", "devbox", "Running", "True", "sbx_"} {
		if !strings.Contains(got, want) {
			t.Errorf("kubectl get sbx does not show %q:\n%s", want, got)
		}
	}

	// The sample quota make dev created counts the samples' sessions.
	var used string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		used = runCmd(t, root, kenv, "kubectl", "get", "sbxquota", "team-budget", "-o", "jsonpath={.status.used.runningSandboxes}")
		if used != "" && used != "0" {
			break
		}
	}
	if used == "" || used == "0" {
		t.Errorf("SandboxQuota team-budget counts %q running Sandboxes while the samples run", used)
	}

	// The printed URL and token reach the very backend the manager uses.
	vc, err := vercel.New(vercel.Config{BaseURL: vercelEnv[1], Token: vercelEnv[2], TeamID: vercelEnv[3], ProjectID: vercelEnv[4]})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	remote, err := vc.ListAllSandboxes(ctx, vercel.ListSandboxesOptions{})
	if err != nil {
		t.Fatalf("list sandboxes with the printed VERCEL_* values: %v", err)
	}
	var remoteNames []string
	for _, s := range remote {
		remoteNames = append(remoteNames, s.Name)
	}
	for _, n := range strings.Fields(runCmd(t, root, kenv, "kubectl", "get", "sbx", "-o", "jsonpath={.items[*].status.vercelName}")) {
		if !slices.Contains(remoteNames, n) {
			t.Errorf("Vercel sandbox %s of a Sandbox is not in the emulator's list %v", n, remoteNames)
		}
	}

	// The two classes: a Sandbox of team-a runs in team-a's emulated
	// project, not in the one of the printed VERCEL_* values.
	runCmd(t, root, kenv, "kubectl", "wait", "--for=condition=CredentialsValid", "sandboxclass", "team-a", "team-b", "--timeout=60s")
	runCmd(t, root, kenv, "kubectl", "apply", "-n", "team-a", "-f", "config/samples/classes/sandbox_with_class.yaml")
	runCmd(t, root, kenv, "kubectl", "wait", "-n", "team-a", "--for=condition=Ready", "sandbox/tenant-box", "--timeout=90s")
	tenantName := runCmd(t, root, kenv, "kubectl", "get", "-n", "team-a", "sbx", "tenant-box", "-o", "jsonpath={.status.vercelName}")
	if remote, err = vc.ListAllSandboxes(ctx, vercel.ListSandboxesOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range remote {
		if s.Name == strings.TrimSpace(tenantName) {
			t.Errorf("the team-a Sandbox's Vercel sandbox %s is in the manager's own project", s.Name)
		}
	}

	// The emulator knows its project only, as Vercel does: a client given
	// the wrong project id hears so, and so does the manager's check.
	wrong := vercel.Config{BaseURL: vercelEnv[1], Token: vercelEnv[2], TeamID: vercelEnv[3], ProjectID: "prj_not_ours"}
	wvc, err := vercel.New(wrong)
	if err != nil {
		t.Fatal(err)
	}
	if err := wvc.VerifyProject(ctx); !vercel.IsProjectNotFound(err) {
		t.Errorf("VerifyProject with a project the emulator does not know: got %v, want project not found", err)
	}

	// docs/clients.md's serverless client: its ServiceAccount and
	// RoleBinding, applied as written, and a token of it may create
	// Sandboxes in team-a, and nothing else (Secrets, other namespaces).
	runCmdIn(t, root, kenv, docsBlock(t, root, "docs/clients.md", "### Authenticating a serverless client", "```yaml\n"), "kubectl", "apply", "-f", "-")
	token := strings.TrimSpace(runCmd(t, root, kenv, "kubectl", "-n", "team-a", "create", "token", "junior", "--duration=1h"))
	server := strings.TrimSpace(runCmd(t, root, kenv, "kubectl", "config", "view", "--minify", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	caData := runCmd(t, root, kenv, "kubectl", "config", "view", "--minify", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}")
	pem, err := base64.StdEncoding.DecodeString(strings.TrimSpace(caData))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	asJunior := []string{"--kubeconfig=/dev/null", "--server=" + server, "--certificate-authority=" + ca, "--token=" + token}
	runCmd(t, root, nil, "kubectl", append(asJunior, "-n", "team-a", "apply", "-f", "config/samples/sandbox_v1alpha1_sandbox.yaml")...)
	for _, denied := range [][]string{{"-n", "team-a", "get", "secrets"}, {"-n", "default", "get", "sbx"}} {
		if out, err := exec.Command("kubectl", append(asJunior, denied...)...).CombinedOutput(); err == nil || !strings.Contains(string(out), "forbidden") {
			t.Errorf("kubectl %v as team-a's junior: want forbidden, got %v\n%s", denied, err, out)
		}
	}

	// The same function with the platform's OIDC token (--oidc): the
	// RoleBinding of docs/clients.md as written, a token minted with the
	// commands the banner prints, and kubectl as that user in team-a only.
	runCmdIn(t, root, kenv, docsBlock(t, root, "docs/clients.md", "#### The function's RoleBinding (OIDC)", "```yaml\n"), "kubectl", "apply", "-f", "-")
	mintAndUse := match(t, printed, `(?s)\n  (source \S+/oidc\.env\n.*? auth whoami)\n`)[1]
	mintAndUse = strings.ReplaceAll(mintAndUse, "\n  ", "\n")
	if who := runCmd(t, root, nil, "bash", "-ec", mintAndUse); !strings.Contains(who, "vercel:owner:acme:project:junior:environment:production") {
		t.Errorf("the banner's OIDC commands authenticate as:\n%s", who)
	}
	inTeamA := strings.Replace(mintAndUse, " auth whoami", " -n team-a get sbx -o name", 1)
	if got := runCmd(t, root, nil, "bash", "-ec", inTeamA); !strings.Contains(got, "sandbox.sandbox.sentry.io/") {
		t.Errorf("the OIDC user lists no Sandbox in team-a: %q", got)
	}
	inDefault := strings.Replace(mintAndUse, " auth whoami", " -n default get sbx", 1)
	if out, err := exec.Command("bash", "-ec", inDefault).CombinedOutput(); err == nil || !strings.Contains(string(out), "forbidden") {
		t.Errorf("the OIDC user in namespace default: want forbidden, got %v\n%s", err, out)
	}

	// A second instance on the same state dir refuses, naming the first.
	second := exec.Command(bin, "--state-dir", stateDir)
	second.Dir, second.Env = root, dev.Env
	secondOut, err := second.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() == 0 {
		t.Errorf("second instance: want a non-zero exit, got %v\n%s", err, secondOut)
	}
	if want := fmt.Sprintf("already running with state directory %s (PID %d)", stateDir, dev.Process.Pid); !strings.Contains(string(secondOut), want) {
		t.Errorf("second instance said:\n%s\nwant it to contain %q", secondOut, want)
	}

	// The example client, as the README runs it.
	step = time.Now()
	// It runs a command through the data plane with the printed VERCEL_* values.
	exampleEnv := append(kenv, "VERCEL_API_URL="+vercelEnv[1], "VERCEL_TOKEN="+vercelEnv[2], "VERCEL_TEAM_ID="+vercelEnv[3], "VERCEL_PROJECT_ID="+vercelEnv[4])
	example := runCmd(t, root, exampleEnv, "go", "run", "./examples/junior-client", "--kubeconfig", kubeconfig, "--name", "junior-test")
	t.Logf("examples/junior-client ran in %s:\n%s", time.Since(step).Round(time.Millisecond), example)
	match(t, example, `Ready: Sandbox default/junior-test \(session sbx_\S+\)`)
	match(t, example, `Answer: 42`)
	match(t, example, `Heartbeat sent`)
	match(t, example, `Deleted Sandbox default/junior-test`)

	// Deleting a namespace deletes its Sandboxes and their Vercel sandboxes,
	// as on a cluster (kube-controller-manager's namespace controller runs).
	step = time.Now()
	runCmd(t, root, kenv, "kubectl", "create", "namespace", "scratch")
	runCmd(t, root, kenv, "kubectl", "apply", "-n", "scratch", "-f", "config/samples/sandbox_v1alpha1_sandbox.yaml")
	runCmd(t, root, kenv, "kubectl", "wait", "-n", "scratch", "--for=condition=Ready", "sandbox", "--all", "--timeout=90s")
	listCtx, cancelList := context.WithTimeout(context.Background(), time.Minute)
	defer cancelList()
	inScratch := func() (names []string) {
		remote, err := vc.ListAllSandboxes(listCtx, vercel.ListSandboxesOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range remote {
			if strings.HasPrefix(s.Name, "scratch-") {
				names = append(names, s.Name)
			}
		}
		return names
	}
	if n := inScratch(); len(n) != 1 {
		t.Fatalf("want one Vercel sandbox of namespace scratch before deleting it, got %v", n)
	}
	runCmd(t, root, kenv, "kubectl", "delete", "namespace", "scratch", "--wait=true", "--timeout=90s")
	if n := inScratch(); len(n) > 0 {
		t.Errorf("Vercel sandboxes %v outlived their deleted namespace", n)
	}
	t.Logf("namespace with a Ready Sandbox deleted in %s", time.Since(step).Round(time.Millisecond))

	// Everything above ran on the deployed RBAC: the API server refused the
	// manager nothing its RBAC decides. (A namespace being deleted refuses
	// new objects in it, such as the manager's events, with "forbidden"
	// too: that is the namespace lifecycle, not RBAC.)
	if b, err := os.ReadFile(filepath.Join(stateDir, "manager.log")); err != nil {
		t.Error(err)
	} else {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "forbidden") && !strings.Contains(line, "because it is being terminated") {
				t.Errorf("the API server refused the manager a request its RBAC lacks:\n%s", line)
			}
		}
	}

	// Ctrl-C: a clean exit, and nothing left behind.
	step = time.Now()
	if err := dev.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dev exited with %v after SIGINT", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("dev did not exit within a minute of SIGINT")
	}
	t.Logf("stopped %s after SIGINT", time.Since(step).Round(time.Millisecond))
	if !strings.Contains(out.String(), "Stopped.") {
		t.Errorf("no \"Stopped.\" after SIGINT")
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("control plane process %d is still running after dev exited", pid)
		}
	}
	if left := processesUsing(stateDir); len(left) > 0 {
		t.Errorf("processes still using %s after dev exited: %v", stateDir, left)
	}
	for _, f := range []string{kubeconfig, filepath.Join(stateDir, "oidc.env")} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s of a stopped environment is still there (%v)", f, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(stateDir, "manager.log")); err != nil || fi.Size() == 0 {
		t.Errorf("manager.log is missing or empty (%v)", err)
	}
}

// runCmd runs a command in dir and returns its output; a failure fails the test.
// docsBlock returns the first fenced block opening with fence after the
// line heading in the repository file doc: what a reader copies.
func docsBlock(t *testing.T, root, doc, heading, fence string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", doc, heading)
	}
	if _, after, ok = strings.Cut(after, fence); !ok {
		t.Fatalf("%s has no %q block after %q", doc, fence, heading)
	}
	block, _, _ := strings.Cut(after, "```")
	return block
}

// runCmdIn is runCmd with stdin.
func runCmdIn(t *testing.T, dir string, env []string, stdin, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func runCmd(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func match(t *testing.T, s, re string) []string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no match for %s in:\n%s", re, s)
	}
	return m
}

// alive reports whether pid exists (a zombie counts: it was not reaped).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// processesUsing returns the processes whose command line or working
// directory mentions dir.
func processesUsing(dir string) []int {
	var out []int
	for _, p := range procfs.Using(dir) {
		out = append(out, p.PID)
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// watcher collects output and closes found when a line equals want.
type watcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	found chan struct{}
	done  bool
}

func newWatcher(want string) *watcher { return &watcher{want: want, found: make(chan struct{})} }

func (w *watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && slices.Contains(strings.Split(w.buf.String(), "\n"), w.want) {
		w.done = true
		close(w.found)
	}
	return len(p), nil
}

func (w *watcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
