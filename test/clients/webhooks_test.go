package clients

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/notify"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// standardWebhooks is the maintained Standard Webhooks verifier the test
// receives with (Svix's reference implementation), and its dependencies, each
// pinned exactly: npm would resolve the package's caret ranges to whatever is
// newest.
var standardWebhooks = []string{"standardwebhooks@1.3.0", "@stablelib/base64@1.0.1", "fast-sha256@1.3.0"}

// installStandardWebhooks installs standardWebhooks once into bin/npm/ (as
// officialsdk.Install does the official clients: reused by later runs, kept
// out of git, installed from the registry on a fresh machine) and returns its
// node_modules directory.
func installStandardWebhooks(ctx context.Context, t *testing.T) string {
	t.Helper()
	installs.Lock()
	defer installs.Unlock()
	dir := filepath.Join(repoRoot, "bin", "npm", "standardwebhooks1.3.0")
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "standardwebhooks", "package.json")); err != nil {
		must(t, os.MkdirAll(dir, 0o755))
		npm(ctx, t, dir, nil, append([]string{"install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund"}, standardWebhooks...)...)
	}
	var pkg struct{ Version string }
	b, err := os.ReadFile(filepath.Join(modules, "standardwebhooks", "package.json"))
	must(t, err)
	must(t, json.Unmarshal(b, &pkg))
	if pkg.Version != "1.3.0" {
		t.Fatalf("bin/npm has standardwebhooks %s, want 1.3.0", pkg.Version)
	}
	return modules
}

// delivery is what testdata/webhook-receiver.mjs prints per request.
type delivery struct {
	Listening       int    `json:"listening"`
	WebhookID       string `json:"webhookID"`
	ContentType     string `json:"contentType"`
	Verified        bool   `json:"verified"`
	Error           string `json:"error"`
	TamperedRefusal string `json:"tamperedRefusal"`
	OldRefusal      string `json:"oldRefusal"`
	Event           struct {
		SpecVersion string `json:"specversion"`
		ID          string `json:"id"`
		Type        string `json:"type"`
		Subject     string `json:"subject"`
	} `json:"event"`
}

// TestStandardWebhooksReceiver: a Sandbox turns Ready while its namespace's
// receiver is down; the manager is restarted; then a node receiver starts and
// gets the notification, verified by the standardwebhooks npm package with
// the secret docs/clients.md documents, whose refusals of a tampered body and
// of an old timestamp are checked on the same delivery.
func TestStandardWebhooksReceiver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, the emulator and the manager, and runs node")
	}
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is not on PATH: the receiver runs on Node.js")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	modules := installStandardWebhooks(ctx, t)
	dir := t.TempDir()

	cpLog, err := os.Create(filepath.Join(dir, "controlplane.log"))
	must(t, err)
	t.Cleanup(func() { _ = cpLog.Close() })
	stack, err := localstack.Start(ctx, localstack.Options{
		RepoRoot: repoRoot, ControlPlaneLog: cpLog,
		Emulator: emulator.Options{DataDir: filepath.Join(dir, "emulator")},
	})
	must(t, err)
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Errorf("stop the control plane and the emulator: %v", err)
		}
	})
	allow, err := notify.ParseAllowList([]string{"127.0.0.1/32"})
	must(t, err)
	startManager := func() *localstack.Manager {
		// A restarted manager registers the same controller names again,
		// which localstack.StartManager allows.
		m, err := stack.StartManager(ctx, nil, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"},
			stack.Vercel(""), controllers.Options{PollInterval: 2 * time.Second,
				Notify: notify.Options{Allow: allow, Timeout: time.Second, MinBackoff: 200 * time.Millisecond, MaxBackoff: time.Second}})
		must(t, err)
		return m
	}
	mgr := startManager()

	// The receiver's port, free now; nothing listens on it until the
	// receiver starts, after the restart.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	must(t, l.Close())

	const ns = "hooks"
	c := stack.Client
	value := make([]byte, 32)
	_, _ = rand.Read(value)
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-key", Labels: map[string]string{"sandbox.sentry.io/notification-key": "true"}},
		Data:       map[string][]byte{"key": value},
	}))
	must(t, c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandbox-notifications"},
		Data:       map[string]string{"url": "http://127.0.0.1:" + strconv.Itoa(port) + "/sandbox-events", "secretName": "webhook-key"},
	}))
	failedBefore := testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(ns, "connection"))
	must(t, c.Create(ctx, &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "conv-1"},
		Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: ptr(sandboxv1.Runtime("node24"))}},
	}))
	waitFor(t, 2*time.Minute, "the Sandbox Ready and its notification attempted while the receiver is down", func() bool {
		var s sandboxv1.Sandbox
		if c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "conv-1"}, &s) != nil {
			return false
		}
		return meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady) &&
			testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(ns, "connection")) > failedBefore
	})

	must(t, mgr.Stop())
	mgr = startManager()
	t.Cleanup(func() {
		if err := mgr.Stop(); err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	cmd := exec.CommandContext(ctx, "node", filepath.Join(repoRoot, "test", "clients", "testdata", "webhook-receiver.mjs"))
	cmd.Env = append(os.Environ(), "SWH_NODE_MODULES="+modules, "WEBHOOK_SECRET=whsec_"+base64.StdEncoding.EncodeToString(value), "PORT="+strconv.Itoa(port))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan delivery)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var d delivery
			if json.Unmarshal(sc.Bytes(), &d) == nil {
				lines <- d
			}
		}
	}()
	var got *delivery
	for got == nil {
		select {
		case d, ok := <-lines:
			if !ok {
				t.Fatalf("the receiver exited: %s", stderr.String())
			}
			switch {
			case d.Listening != 0:
			case !d.Verified:
				t.Fatalf("standardwebhooks refused a genuine delivery: %s", d.Error)
			case d.Event.Type == "io.sentry.sandbox.sandbox.ready":
				got = &d
			}
		case <-time.After(time.Minute):
			t.Fatalf("no Ready notification within a minute of the receiver starting; receiver stderr: %s", stderr.String())
		}
	}
	if got.Event.Subject != "conv-1" || got.Event.SpecVersion != "1.0" || got.WebhookID == "" || got.WebhookID != got.Event.ID {
		t.Errorf("delivery %+v: want the CloudEvent of conv-1 with webhook-id = its id", got)
	}
	if !strings.HasPrefix(got.ContentType, "application/cloudevents+json") {
		t.Errorf("content type %q", got.ContentType)
	}
	if !strings.Contains(got.TamperedRefusal, "No matching signature") {
		t.Errorf("a tampered body: %q, want the package's signature refusal", got.TamperedRefusal)
	}
	if !strings.Contains(got.OldRefusal, "too old") {
		t.Errorf("a ten-minute-old timestamp: %q, want the package's refusal", got.OldRefusal)
	}
}

// waitFor polls cond every 200 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
