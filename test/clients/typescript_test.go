// Package clients tests the client libraries in clients/ against the dev
// environment: a real API server with the CRDs, the Vercel emulator and the
// manager (localstack), each client authenticating as a
// ServiceAccount bound to the editor role a user binds for their program.
package clients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/controlplane"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// editorRole is config/rbac's client role as `make deploy` names it
// (config/default's namePrefix), the one docs/clients.md tells users to bind.
const editorRole = "sandbox-controller-sandbox-editor-role"

// viewerRole is config/rbac's read-only client role; it also reads SandboxQuotas.
const viewerRole = "sandbox-controller-sandbox-viewer-role"

var repoRoot = func() string {
	d, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return d
}()

// TestMain gives controller-runtime's logger (envtest logs through it) a
// destination, so it does not print "log.SetLogger(...) was never called".
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// TestTypeScript installs clients/typescript with `npm ci` and runs its
// tests (`npm test`: compile, then node's test runner) as a ServiceAccount
// that has only the editor role, against the API server, the emulator and
// the manager; and checks that what they did reached Vercel and was cleaned
// up there.
func TestTypeScript(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, the emulator and the manager, and runs npm")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatal("npm is not on PATH: it installs the TypeScript client's Node.js (hack/node.sh) and dependencies")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	pkg := typescriptPackage

	// Installing first: a registry that cannot be reached fails the test
	// before anything else starts. The client is built and tested on the
	// Node.js hack/node.sh pins (its engines.node), not the machine's.
	nodeEnv := pinnedNode(ctx, t)
	if v := npm(ctx, t, pkg, nodeEnv, "exec", "--", "node", "--version"); !strings.HasPrefix(v, "v22.") {
		t.Fatalf("npm runs node %q, want hack/node.sh's v22", strings.TrimSpace(v))
	}
	buildTypeScript(ctx, t, nodeEnv)

	cpLog, err := os.Create(filepath.Join(dir, "controlplane.log"))
	must(t, err)
	t.Cleanup(func() { _ = cpLog.Close() })
	stack, err := localstack.Start(ctx, localstack.Options{
		RepoRoot:        repoRoot,
		ControlPlaneLog: cpLog,
		Emulator:        emulator.Options{DataDir: filepath.Join(dir, "emulator")},
	})
	must(t, err)
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Errorf("stop the control plane and the emulator: %v", err)
		}
	})
	mgr, err := stack.StartManager(ctx, nil, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}, stack.Vercel(""), controllers.Options{PollInterval: 2 * time.Second})
	must(t, err)
	t.Cleanup(func() {
		if err := mgr.Stop(); err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// As a user sets up a program such as Junior: the client roles as `make
	// deploy` installs them, a namespace, and the program's ServiceAccount
	// with one RoleBinding to the editor role. A second ServiceAccount has
	// none, to show the tests really run with the first one's rights. Their
	// tokens come from the TokenRequest API through the command
	// docs/clients.md gives, and reach the tests as a serverless function
	// gets them: in its environment, with the server's URL and CA.
	const ns = "junior"
	c := stack.Client
	installEditorRole(ctx, t, c)
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	admin := filepath.Join(dir, "admin.kubeconfig")
	must(t, stack.ControlPlane.WriteAdminKubeconfig(admin))
	tokens := map[string]string{}
	for _, sa := range []string{"junior", "stranger"} {
		must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}))
		out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", admin, "-n", ns, "create", "token", sa, "--duration=1h").Output()
		if err != nil {
			t.Fatalf("kubectl create token %s: %v", sa, err)
		}
		tokens[sa] = strings.TrimSpace(string(out))
	}
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "junior-sandboxes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: editorRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "junior"}},
	}))
	// Reading the namespace's SandboxQuotas (namespaceQuotaStatus) takes the
	// viewer role: the editor role does not grant it.
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "junior-quotas"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: viewerRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "junior"}},
	}))
	// A quota an administrator set, with a budget the tests read: generous
	// enough never to hold back the tests' Sandboxes.
	rolling := int64(3600)
	must(t, c.Create(ctx, &sandboxv1.SandboxQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ts-budget"},
		Spec: sandboxv1.SandboxQuotaSpec{
			Hard: sandboxv1.SandboxQuotaResources{Sandboxes: ptr(int64(100))},
			Budgets: []sandboxv1.SandboxBudget{{
				Name: "creations", Unit: sandboxv1.BudgetCreations, Limit: "1000",
				Window: sandboxv1.BudgetWindow{RollingSeconds: &rolling},
			}},
		},
	}))

	creates := stack.Emulator.RequestCount("createSandbox")
	out := npm(ctx, t, pkg, append(nodeEnv,
		"KUBECONFIG=", // not used: the tests authenticate with the tokens only
		// With the trailing slash the control plane reports, as a user may
		// copy a URL: kubeConfigForToken must cope.
		"SANDBOX_TEST_SERVER="+stack.Config.Host,
		"SANDBOX_TEST_CA_DATA="+base64.StdEncoding.EncodeToString(stack.Config.CAData),
		"SANDBOX_TEST_TOKEN="+tokens["junior"],
		"SANDBOX_TEST_UNBOUND_TOKEN="+tokens["stranger"],
		"SANDBOX_TEST_NAMESPACE="+ns,
		"SANDBOX_TEST_QUOTA=ts-budget",
	), "test")
	// node's spec reporter closes with the counts; every test must have run.
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ℹ fail 0$`),
		regexp.MustCompile(`(?m)^ℹ skipped 0$`),
		regexp.MustCompile(`(?m)^ℹ pass [1-9]\d*$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("npm test's summary lacks %s", want)
		}
	}

	// The helpers drove the operator, which did the Vercel work: sandboxes
	// were created, and every one was deleted with its Sandbox.
	if n := stack.Emulator.RequestCount("createSandbox") - creates; n < 3 {
		t.Errorf("the emulator received %d sandbox creates, want at least 3 (one per Sandbox that got a session)", n)
	}
	var left sandboxv1.SandboxList
	must(t, c.List(ctx, &left, client.InNamespace(ns)))
	for _, s := range left.Items {
		t.Errorf("Sandbox %s/%s outlived the tests", s.Namespace, s.Name)
	}
	for _, s := range stack.Emulator.LiveSandboxes() {
		if strings.HasPrefix(s.Name, ns+"-") {
			t.Errorf("Vercel sandbox %s outlived its Sandbox", s.Name)
		}
	}
}

// installEditorRole creates the editor and viewer ClusterRoles exactly as
// `make deploy` renders them from config/.
func installEditorRole(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	rendered, err := controlplane.Render(repoRoot, filepath.Join("config", "default"))
	must(t, err)
	want := map[string]bool{editorRole: true, viewerRole: true}
	for _, doc := range splitYAML(rendered) {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &role); err != nil || role.Kind != "ClusterRole" || !want[role.Name] {
			continue
		}
		must(t, c.Create(ctx, &role))
		delete(want, role.Name)
	}
	for name := range want {
		t.Fatalf("config/default renders no ClusterRole %s", name)
	}
}

// pinnedNode installs (once, into bin/) the Node.js hack/node.sh pins and
// returns the environment that puts it first on PATH, for npm and what npm
// starts.
func pinnedNode(ctx context.Context, t *testing.T) []string {
	t.Helper()
	installs.Lock()
	defer installs.Unlock()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "node.sh"))
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "npm_config_update_notifier=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/node.sh: %v\n%s", err, stderr.String())
	}
	return []string{"PATH=" + strings.TrimSpace(string(out)) + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// installs serialises what the tests install into the repository (hack/node.sh's
// Node.js in bin/, clients/typescript's node_modules and builds, the packages
// in bin/npm/): the tests that run in parallel would install the same files
// at the same time.
var installs sync.Mutex

// typescriptPackage is clients/typescript.
var typescriptPackage = filepath.Join(repoRoot, "clients", "typescript")

// buildTypeScript installs clients/typescript's dependencies (npm ci) and
// builds the package (dist/, npm run build) and its tests (build/, tsc -p .)
// once per test binary. TestOIDC and TestJuniorServerless run in parallel
// and read those builds; a second npm ci or build while one of them runs
// would remove the files under it. TestTypeScript, which runs before the
// parallel tests start, builds build/ again through npm test, as a user of
// the package does.
func buildTypeScript(ctx context.Context, t *testing.T, nodeEnv []string) {
	t.Helper()
	installs.Lock()
	defer installs.Unlock()
	if typescriptBuilt {
		return
	}
	npm(ctx, t, typescriptPackage, nodeEnv, "ci", "--no-audit", "--no-fund")
	npm(ctx, t, typescriptPackage, nodeEnv, "run", "build")
	npm(ctx, t, typescriptPackage, nodeEnv, "exec", "--", "tsc", "-p", ".")
	typescriptBuilt = true
}

// typescriptBuilt says buildTypeScript succeeded in this test binary (guarded
// by installs).
var typescriptBuilt bool

func ptr[T any](v T) *T { return &v }

// npm runs npm in dir with the environment plus env, logs its output and
// returns it; a non-zero exit fails the test.
func npm(ctx context.Context, t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "NO_COLOR=1", "npm_config_update_notifier=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("npm %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		hint := ""
		if args[0] == "ci" {
			hint = " (is the npm registry reachable? npm ci installs the exact versions of package-lock.json)"
		}
		t.Fatalf("npm %s in %s: %v%s", strings.Join(args, " "), dir, err, hint)
	}
	return out.String()
}

// splitYAML splits a YAML stream into its documents.
func splitYAML(stream []byte) [][]byte {
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			panic(fmt.Sprintf("split YAML: %v", err))
		}
		docs = append(docs, doc)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
