package clients

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/notify"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/oidcissuer"
	"github.com/getsentry/sandbox-controller/test/officialsdk"
)

// juniorBoot is how long a new Vercel session takes to start in the
// emulator here (emulator.Options.StartPending): a cold create waits for it,
// a claimed pool member started before the conversation did. Without it the
// emulator starts a session in milliseconds and the two paths could not be
// told apart.
const juniorBoot = 2 * time.Second

// juniorReply is what the example's handler answers (handler.mjs).
type juniorReply struct {
	Conversation string `json:"conversation"`
	Sandbox      string `json:"sandbox"`
	How          string `json:"how"`
	SessionID    string `json:"sessionID"`
	ExitCode     int    `json:"exitCode"`
	Output       string `json:"output"`
	ReadyMs      int64  `json:"readyMs"`
	OutputMs     int64  `json:"outputMs"`
	Error        string `json:"error"`
	Message      string `json:"message"`
}

// juniorDelivery is a line webhook.mjs logs per delivery.
type juniorDelivery struct {
	Verified  bool   `json:"verified"`
	Error     string `json:"error"`
	WebhookID string `json:"webhookID"`
	Type      string `json:"type"`
	Subject   string `json:"subject"`
	Duplicate bool   `json:"duplicate"`
	Reaction  string `json:"reaction"`
}

// TestJuniorServerless rehearses Junior's migration (examples/junior-serverless):
// the example's two Web-standard handlers run in node behind serve.mjs (the
// platform's stand-in), against the API server trusting a local OIDC issuer,
// the emulator and the manager. Each chat message carries a freshly minted
// OIDC token, as the platform gives one per invocation. A conversation's
// first message claims a pool member, its second reuses the Sandbox (the
// counter in its working directory goes on); once the pool is gone,
// conversations are created cold; one of them goes Idle and is resumed by its
// next message, then is deleted. The receiver gets the Ready, idle and
// deletion notifications, verified by the standardwebhooks package. The time
// from request to the command's output is measured for the claimed and the
// cold path (p50 of three each) and logged; only claimed < cold is asserted.
func TestJuniorServerless(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, the emulator and the manager, and runs node")
	}
	t.Parallel()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not on PATH", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	nodeEnv := pinnedNode(ctx, t)
	app := prepareJuniorApp(ctx, t, dir, nodeEnv)

	const team, ns, pool = "acme", "junior", "junior-warm"
	fn := oidcissuer.Function{Project: "junior", Environment: "production"}
	cpLog, err := os.Create(filepath.Join(dir, "controlplane.log"))
	must(t, err)
	t.Cleanup(func() { _ = cpLog.Close() })
	stack, err := localstack.Start(ctx, localstack.Options{
		RepoRoot: repoRoot, ControlPlaneLog: cpLog,
		Emulator: emulator.Options{DataDir: filepath.Join(dir, "emulator"), StartPending: juniorBoot},
		OIDC:     []oidcissuer.Trust{{Team: team, Functions: []oidcissuer.Function{fn}}},
	})
	must(t, err)
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Errorf("stop the control plane, the emulator and the issuer: %v", err)
		}
	})
	allow, err := notify.ParseAllowList([]string{"127.0.0.1/32"})
	must(t, err)
	mgr, err := stack.StartManager(ctx, nil, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"},
		stack.Vercel(""), controllers.Options{PollInterval: time.Second,
			Notify: notify.Options{Allow: allow, Timeout: time.Second, MinBackoff: 200 * time.Millisecond, MaxBackoff: time.Second}})
	must(t, err)
	t.Cleanup(func() {
		if err := mgr.Stop(); err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// The namespace as an administrator sets it up for the function: the
	// editor role bound to the function's OIDC user, a warm pool, and the
	// notification webhook pointing at the receiver.
	c := stack.Client
	installEditorRole(ctx, t, c)
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "junior-oidc-sandboxes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: editorRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: oidcissuer.User(team, fn)}},
	}))
	port := freePort(t)
	secret := juniorWebhookKey(ctx, t, c, ns, port)
	// The pool's members idle after ten minutes; the conversations' own
	// Sandboxes (JUNIOR_IDLE_SECONDS) after a few seconds, so that one goes
	// Idle within the test. A claimed member keeps the deadline its session
	// started with, so the idle conversation is a cold one.
	idle, convIdle := int64(600), int64(6)
	must(t, c.Create(ctx, &sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool},
		Spec: sandboxv1.SandboxPoolSpec{
			Template: sandboxv1.SandboxPoolTemplate{Spec: sandboxv1.SandboxSpec{
				Source: sandboxv1.SandboxSource{Runtime: ptr(sandboxv1.Runtime("node24"))}, TimeoutSeconds: &idle,
			}},
			Replicas: ptr(int32(3)),
		},
	}))
	waitFor(t, time.Minute, "the pool's three members ready", func() bool {
		var p sandboxv1.SandboxPool
		return c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pool}, &p) == nil && p.Status.ReadyReplicas >= 3
	})

	srv := startJuniorServer(ctx, t, app, append(slices.Clone(nodeEnv),
		officialsdk.NodeEnv(repoRoot, app.sdkModules, stack.EmulatorURL, stack.Emulator.Token(), filepath.Join(dir, "home"))...,
	), map[string]string{
		"PORT":                   strconv.Itoa(port),
		"SANDBOX_API_SERVER":     stack.Config.Host,
		"SANDBOX_API_CA_DATA":    base64.StdEncoding.EncodeToString(stack.Config.CAData),
		"JUNIOR_NAMESPACE":       ns,
		"JUNIOR_POOL":            pool,
		"JUNIOR_IDLE_SECONDS":    strconv.FormatInt(convIdle, 10),
		"VERCEL_TOKEN":           stack.Emulator.Token(),
		"VERCEL_TEAM_ID":         localstack.TeamID,
		"VERCEL_PROJECT_ID":      localstack.ProjectID,
		"SANDBOX_WEBHOOK_SECRET": secret,
		"JUNIOR_STATE_DIR":       filepath.Join(dir, "state"),
	})
	mint := func() string {
		tok, err := stack.OIDCIssuer.Mint(oidcissuer.Token{Team: team, Project: fn.Project, Environment: fn.Environment})
		must(t, err)
		return tok
	}
	send := func(conversation, text string) (juniorReply, time.Duration) {
		t.Helper()
		return srv.message(ctx, t, mint(), conversation, text)
	}

	var claimed, cold []time.Duration
	first, d := send("conv-1", "hello")
	claimed = append(claimed, d)
	if first.How != "claimed" || first.Output != "hello #1\n" || first.ExitCode != 0 {
		t.Fatalf("first message: %+v, want a claimed member answering %q", first, "hello #1\n")
	}
	second, _ := send("conv-1", "again")
	if second.How != "reused" || second.Sandbox != first.Sandbox || second.SessionID != first.SessionID || second.Output != "again #2\n" {
		t.Errorf("second message: %+v, want the same Sandbox and session reused, its counter at 2", second)
	}
	for _, conv := range []string{"conv-2", "conv-3"} {
		r, d := send(conv, "hi")
		if r.How != "claimed" {
			t.Errorf("%s: %+v, want a claimed member", conv, r)
		}
		claimed = append(claimed, d)
	}
	srv.waitDelivery(t, "io.sentry.sandbox.sandbox.ready", first.Sandbox)

	// Without the pool every new conversation is created cold.
	must(t, c.Delete(ctx, &sandboxv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool}}))
	waitFor(t, time.Minute, "the pool gone", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pool}, &sandboxv1.SandboxPool{}))
	})
	var coldNames []string
	for _, conv := range []string{"cold-1", "cold-2", "cold-3"} {
		r, d := send(conv, "hi")
		coldNames = append(coldNames, r.Sandbox)
		if r.How != "cold" || r.Output != "hi #1\n" {
			t.Errorf("%s: %+v, want a cold create answering %q", conv, r, "hi #1\n")
		}
		cold = append(cold, d)
	}
	pc, pk := p50(claimed), p50(cold)
	t.Logf("request → first command output, p50 of %d: claimed from the pool %s, cold create %s (emulated boot %s); all claimed %v, all cold %v",
		len(claimed), pc.Round(time.Millisecond), pk.Round(time.Millisecond), juniorBoot, claimed, cold)
	if pc >= pk {
		t.Errorf("claimed p50 %s is not below cold p50 %s", pc, pk)
	}

	// A conversation left alone: its session stops after the idle window
	// (JUNIOR_IDLE_SECONDS, short here), the receiver records it, and the
	// next message resumes it.
	idled := coldNames[0]
	srv.waitDelivery(t, "io.sentry.sandbox.sandbox.idle", idled)
	if st := srv.state(t, idled); st["state"] != "idle" {
		t.Errorf("the receiver's record of %s: %v, want idle", idled, st)
	}
	resumed, _ := send("cold-1", "back")
	if resumed.How != "reused" || resumed.Sandbox != idled || resumed.ExitCode != 0 || !strings.HasPrefix(resumed.Output, "back #") {
		t.Errorf("a message after the idle stop: %+v, want %s resumed and the command run", resumed, idled)
	}

	// The conversation ends: deleting its Sandbox reaches the receiver.
	must(t, c.Delete(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: idled}}))
	srv.waitDelivery(t, "io.sentry.sandbox.sandbox.deleted", idled)
	if st := srv.state(t, idled); st["state"] != "deleted" {
		t.Errorf("the receiver's record of %s: %v, want deleted", idled, st)
	}
	for _, d := range srv.all() {
		if !d.Verified {
			t.Errorf("standardwebhooks refused a delivery: %s", d.Error)
		}
	}
}

// juniorApp is the example copied into a directory with the node_modules a
// `npm install` of its package.json would make, linked to what the
// repository has installed: the package built from clients/typescript, the
// official SDK and standardwebhooks from bin/npm.
type juniorApp struct{ dir, sdkModules string }

func prepareJuniorApp(ctx context.Context, t *testing.T, dir string, nodeEnv []string) juniorApp {
	t.Helper()
	pkg := typescriptPackage
	buildTypeScript(ctx, t, nodeEnv)
	swh := installStandardWebhooks(ctx, t)
	sdk := installOfficialClients(t)
	app := juniorApp{dir: filepath.Join(dir, "app"), sdkModules: sdk}
	src := filepath.Join(repoRoot, "examples", "junior-serverless")
	must(t, os.MkdirAll(filepath.Join(app.dir, "node_modules", "@getsentry"), 0o755))
	must(t, os.MkdirAll(filepath.Join(app.dir, "node_modules", "@vercel"), 0o755))
	for _, f := range []string{"handler.mjs", "webhook.mjs", "serve.mjs", "package.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(app.dir, f), b, 0o644))
	}
	for link, target := range map[string]string{
		"@getsentry/sandbox-controller-client": pkg,
		"@vercel/sandbox":                      filepath.Join(sdk, "@vercel", "sandbox"),
		"standardwebhooks":                     filepath.Join(swh, "standardwebhooks"),
	} {
		must(t, os.Symlink(target, filepath.Join(app.dir, "node_modules", link)))
	}
	return app
}

// juniorWebhookKey creates the namespace's signing Secret and notification
// ConfigMap for a receiver on 127.0.0.1:port and returns the receiver's
// secret as docs/clients.md derives it.
func juniorWebhookKey(ctx context.Context, t *testing.T, c client.Client, ns string, port int) string {
	t.Helper()
	value := make([]byte, 32)
	_, _ = rand.Read(value)
	must(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-key", Labels: map[string]string{"sandbox.sentry.io/notification-key": "true"}},
		Data:       map[string][]byte{"key": value},
	}))
	must(t, c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandbox-notifications"},
		Data:       map[string]string{"url": "http://127.0.0.1:" + strconv.Itoa(port) + "/sandbox-events", "secretName": "webhook-key"},
	}))
	return "whsec_" + base64.StdEncoding.EncodeToString(value)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// juniorServer is serve.mjs running the example, and what its receiver logged.
type juniorServer struct {
	url, stateDir string
	mu            sync.Mutex
	deliveries    []juniorDelivery
	stderr        *bytes.Buffer
}

func startJuniorServer(ctx context.Context, t *testing.T, app juniorApp, env []string, vars map[string]string) *juniorServer {
	t.Helper()
	node := "node"
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			node = filepath.Join(filepath.SplitList(p)[0], "node")
		}
	}
	cmd := exec.CommandContext(ctx, node, "serve.mjs")
	cmd.Dir = app.dir
	cmd.Env = append(os.Environ(), env...)
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	s := &juniorServer{stateDir: vars["JUNIOR_STATE_DIR"], stderr: &bytes.Buffer{}}
	cmd.Stderr = s.stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("serve.mjs stderr:\n%s", s.stderr.String())
		}
	})
	listening := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l struct {
				Listening int `json:"listening"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Listening != 0 {
				listening <- l.Listening
				continue
			}
			var d juniorDelivery
			if json.Unmarshal(sc.Bytes(), &d) == nil {
				s.mu.Lock()
				s.deliveries = append(s.deliveries, d)
				s.mu.Unlock()
			}
		}
		close(listening)
	}()
	select {
	case p, ok := <-listening:
		if !ok {
			t.Fatalf("serve.mjs exited: %s", s.stderr.String())
		}
		s.url = "http://127.0.0.1:" + strconv.Itoa(p)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve.mjs did not listen within 30s: %s", s.stderr.String())
	}
	return s
}

// message posts a chat message with the invocation's OIDC token and returns
// the reply and how long it took from request to the command's output.
func (s *juniorServer) message(ctx context.Context, t *testing.T, token, conversation, text string) (juniorReply, time.Duration) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"conversation": conversation, "text": text})
	must(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/message", bytes.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-vercel-oidc-token", token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	must(t, err)
	var r juniorReply
	if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /message %s: HTTP %d: %s", conversation, resp.StatusCode, b)
	}
	t.Logf("%s %q: %s in %s (ready after %d ms, output after %d ms in the handler)", conversation, text, r.How, took.Round(time.Millisecond), r.ReadyMs, r.OutputMs)
	return r, took
}

func (s *juniorServer) all() []juniorDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// waitDelivery waits until the receiver verified and recorded a delivery
// of typ for the Sandbox subject.
func (s *juniorServer) waitDelivery(t *testing.T, typ, subject string) {
	t.Helper()
	waitFor(t, time.Minute, fmt.Sprintf("a verified %s notification of %s", typ, subject), func() bool {
		return slices.ContainsFunc(s.all(), func(d juniorDelivery) bool { return d.Verified && d.Type == typ && d.Subject == subject })
	})
}

// state is what the receiver's store holds for a Sandbox.
func (s *juniorServer) state(t *testing.T, sandbox string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.stateDir, "sandboxes", sandbox+".json"))
	must(t, err)
	var st map[string]any
	must(t, json.Unmarshal(b, &st))
	return st
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
