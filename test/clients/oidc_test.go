package clients

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/oidcissuer"
)

// TestOIDC runs the serverless path of docs/clients.md end to end: the API
// server trusts a local issuer shaped like Vercel's through
// --authentication-config, a function's token is mapped to the documented
// user and reaches exactly the namespace whose RoleBinding names it (with
// kubectl and with the TypeScript client fetching a fresh token per
// request), and tokens of another project, expired ones and ones for another
// audience are refused. One control plane serves every case; no manager runs
// (creating and reading a Sandbox is the API server's business).
func TestOIDC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and runs kubectl and node")
	}
	// Like TestJuniorServerless and TestStandardWebhooksReceiver it mostly
	// waits on its control plane and node: the three run at once.
	t.Parallel()
	for _, tool := range []string{"node", "npm", "kubectl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not on PATH", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	pkg := typescriptPackage
	// The package's Node.js (hack/node.sh), its build (dist/) and its
	// tests' build (build/), as TestTypeScript makes them.
	nodeEnv := pinnedNode(ctx, t)
	buildTypeScript(ctx, t, nodeEnv)

	// Team acme trusts two functions of its project junior: production,
	// which the RoleBinding names, and preview, which authenticates but is
	// bound nowhere.
	const team, ns, otherNS = "acme", "junior", "other"
	production := oidcissuer.Function{Project: "junior", Environment: "production"}
	preview := oidcissuer.Function{Project: "junior", Environment: "preview"}
	cpLog, err := os.Create(filepath.Join(dir, "controlplane.log"))
	must(t, err)
	t.Cleanup(func() { _ = cpLog.Close() })
	stack, err := localstack.Start(ctx, localstack.Options{
		RepoRoot:        repoRoot,
		ControlPlaneLog: cpLog,
		Emulator:        emulator.Options{DataDir: filepath.Join(dir, "emulator")},
		OIDC:            []oidcissuer.Trust{{Team: team, Functions: []oidcissuer.Function{production, preview}}},
	})
	must(t, err)
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Errorf("stop the control plane, the emulator and the issuer: %v", err)
		}
	})
	iss := stack.OIDCIssuer

	// The user docs/clients.md's RoleBinding names, spelled out: the test
	// fails if the mapping and the documentation part ways.
	const user = "vercel:owner:acme:project:junior:environment:production"
	if got := oidcissuer.User(team, production); got != user {
		t.Fatalf("oidcissuer.User = %q, want %q", got, user)
	}
	c := stack.Client
	installEditorRole(ctx, t, c)
	for _, n := range []string{ns, otherNS} {
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	must(t, c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "junior-sandboxes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: editorRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}))

	mint := func(tok oidcissuer.Token) string {
		t.Helper()
		tok.Team = team
		s, err := iss.Mint(tok)
		must(t, err)
		return s
	}
	k := newTokenKubectl(t, dir, stack.Config.Host, stack.Config.CAData)
	good := mint(oidcissuer.Token{Project: "junior", Environment: "production"})

	t.Run("the token maps to the documented user and groups", func(t *testing.T) {
		out, err := k.run(ctx, good, "", "auth", "whoami", "-o", "json")
		if err != nil {
			t.Fatalf("kubectl auth whoami: %v\n%s", err, out)
		}
		var review struct {
			Status struct {
				UserInfo struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		must(t, json.Unmarshal([]byte(out), &review))
		if got := review.Status.UserInfo.Username; got != user {
			t.Errorf("username %q, want %q", got, user)
		}
		for _, g := range []string{"vercel:owner:acme:project:junior", "system:authenticated"} {
			if !slices.Contains(review.Status.UserInfo.Groups, g) {
				t.Errorf("groups %v lack %q", review.Status.UserInfo.Groups, g)
			}
		}
	})

	t.Run("kubectl reaches exactly its namespace", func(t *testing.T) {
		manifest := "apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: kubectl-function\nspec:\n  source:\n    runtime: node24\n"
		if out, err := k.run(ctx, good, manifest, "-n", ns, "create", "-f", "-"); err != nil {
			t.Fatalf("kubectl create in %s: %v\n%s", ns, err, out)
		}
		if out, err := k.run(ctx, good, "", "-n", ns, "get", "sandbox", "kubectl-function", "-o", "name"); err != nil || strings.TrimSpace(out) != "sandbox.sandbox.sentry.io/kubectl-function" {
			t.Fatalf("kubectl get in %s: %v\n%s", ns, err, out)
		}
		out, err := k.run(ctx, good, "", "-n", otherNS, "get", "sandboxes")
		wantRefusal(t, out, err, `Error from server \(Forbidden\): .*User "`+regexp.QuoteMeta(user)+`" cannot list resource "sandboxes" .* in the namespace "other"`)
	})

	t.Run("other projects, expired tokens and other audiences are refused", func(t *testing.T) {
		for what, tok := range map[string]string{
			"another project":  mint(oidcissuer.Token{Project: "billing", Environment: "production"}),
			"an expired token": mint(oidcissuer.Token{Project: "junior", Environment: "production", IssuedAt: time.Now().Add(-2 * time.Hour)}),
			"another audience": mint(oidcissuer.Token{Project: "junior", Environment: "production", Audience: "https://vercel.com/not-acme"}),
		} {
			out, err := k.run(ctx, tok, "", "-n", ns, "get", "sandboxes")
			t.Logf("%s: %s", what, strings.TrimSpace(out))
			wantRefusal(t, out, err, `\(Unauthorized\)`)
		}
	})

	caData := base64.StdEncoding.EncodeToString(stack.Config.CAData)
	t.Run("the TypeScript client asks its provider on every request", func(t *testing.T) {
		out := nodeRun(ctx, t, pkg, []string{
			nodeEnv[0],
			"SANDBOX_TEST_SERVER=" + stack.Config.Host,
			"SANDBOX_TEST_CA_DATA=" + caData,
			"SANDBOX_TEST_TOKEN=" + good,
			"SANDBOX_TEST_UNBOUND_TOKEN=" + mint(oidcissuer.Token{Project: "junior", Environment: "preview"}),
			"SANDBOX_TEST_NAMESPACE=" + ns,
		}, "--test", "--test-reporter=spec", filepath.Join("build", "test", "token-provider.test.js"))
		for _, want := range []string{"ℹ pass 2", "ℹ fail 0", "ℹ skipped 0"} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("node's summary lacks %q", want)
			}
		}
	})

	t.Run("a function fetches a fresh token per request", func(t *testing.T) {
		caFile := filepath.Join(dir, "issuer-ca.pem")
		must(t, os.WriteFile(caFile, iss.CAPEM(), 0o600))
		fn, err := json.Marshal(oidcissuer.Token{Team: team, Project: "junior", Environment: "production"})
		must(t, err)
		before := iss.Minted()
		out := nodeRun(ctx, t, pkg, []string{
			nodeEnv[0],
			"SANDBOX_TEST_SERVER=" + stack.Config.Host,
			"SANDBOX_TEST_CA_DATA=" + caData,
			"OIDC_MINT_URL=" + iss.MintURL(),
			"OIDC_ADMIN_TOKEN=" + iss.AdminToken(),
			"OIDC_FUNCTION=" + string(fn),
			"NODE_EXTRA_CA_CERTS=" + caFile,
			"NAMESPACE=" + ns,
			"OTHER_NAMESPACE=" + otherNS,
		}, filepath.Join(repoRoot, "test", "clients", "testdata", "oidc-function.mjs"))
		var got struct {
			Requests, Calls, Distinct int
			ForbiddenUser             string
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		must(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got))
		if got.Calls != got.Requests || got.Distinct != got.Requests {
			t.Errorf("%d requests fetched %d tokens, %d distinct: want one fresh token per request", got.Requests, got.Calls, got.Distinct)
		}
		if n := iss.Minted() - before; n != int64(got.Requests) {
			t.Errorf("the issuer minted %d tokens for %d requests", n, got.Requests)
		}
		if got.ForbiddenUser != user {
			t.Errorf("the other namespace refused user %q, want %q", got.ForbiddenUser, user)
		}
		var sbx sandboxv1.Sandbox
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "oidc-function"}, &sbx))
	})
}

// tokenKubectl runs the real kubectl with nothing but a server, its CA and a
// bearer token, as a function would be configured.
type tokenKubectl struct {
	server, caFile, kubeconfig string
}

func newTokenKubectl(t *testing.T, dir, server string, ca []byte) tokenKubectl {
	t.Helper()
	k := tokenKubectl{server: server, caFile: filepath.Join(dir, "apiserver-ca.crt"), kubeconfig: filepath.Join(dir, "empty.kubeconfig")}
	must(t, os.WriteFile(k.caFile, ca, 0o600))
	// No credentials of any other kind can leak in from the environment.
	must(t, os.WriteFile(k.kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600))
	return k
}

func (k tokenKubectl) run(ctx context.Context, token, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{
		"--kubeconfig=" + k.kubeconfig, "--server=" + k.server, "--certificate-authority=" + k.caFile, "--token=" + token,
	}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// wantRefusal fails unless kubectl failed with output matching pattern.
func wantRefusal(t *testing.T, out string, err error, pattern string) {
	t.Helper()
	if err == nil {
		t.Errorf("kubectl succeeded, want a refusal matching %s:\n%s", pattern, out)
		return
	}
	if !regexp.MustCompile(pattern).MatchString(out) {
		t.Errorf("kubectl's refusal does not match %s:\n%s", pattern, out)
	}
}

// nodeRun runs node in dir with the environment plus env and returns its
// output; a non-zero exit fails the test. The node is the first on env's
// PATH (pinnedNode's), else the machine's. The output is logged: what runs
// here never prints a token.
func nodeRun(ctx context.Context, t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	node := "node"
	for _, kv := range env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			node = filepath.Join(filepath.SplitList(path)[0], "node")
		}
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("node %s:\n%s", strings.Join(args, " "), out.String())
	if err != nil {
		t.Fatalf("node %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}
