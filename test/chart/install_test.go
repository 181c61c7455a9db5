package chart

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack/controlplane"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/managerpod"
)

// cluster is a control plane the chart is installed into.
type cluster struct {
	t          *testing.T
	ctx        context.Context
	cp         *controlplane.ControlPlane
	kubeconfig string // a cluster administrator's
	client     client.Client
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "controlplane.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	cp, err := controlplane.Start(ctx, controlplane.Options{Out: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	c := &cluster{t: t, ctx: ctx, cp: cp, kubeconfig: filepath.Join(dir, "admin.kubeconfig")}
	if err := cp.WriteAdminKubeconfig(c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := sandboxv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if c.client, err = client.New(cp.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectl runs the real kubectl as the administrator.
func (c *cluster) kubectl(stdin string, args ...string) string {
	c.t.Helper()
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	out, err := command("kubectl", in, nil, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// helm runs bin/helm against the cluster.
func (c *cluster) helm(args ...string) (string, error) {
	c.t.Helper()
	return helm(c.t, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
}

// exists reports whether the API server has the object (by kind, namespace
// and name).
func (c *cluster) exists(o *unstructured.Unstructured) bool {
	c.t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	err := c.client.Get(c.ctx, client.ObjectKeyFromObject(o), got)
	if err != nil && !isNotFound(err) {
		c.t.Fatalf("get %s %s: %v", o.GetKind(), client.ObjectKeyFromObject(o), err)
	}
	return err == nil
}

func isNotFound(err error) bool {
	return client.IgnoreNotFound(err) == nil || meta.IsNoMatchError(err)
}

// TestApplyRendering applies the chart's rendering with every value set — and
// the default one, as `make deploy` would name it — to a real API server with
// kubectl's server-side apply, as GitOps tools and `helm template | kubectl
// apply` users do: every object must be accepted and stored.
func TestApplyRendering(t *testing.T) {
	c := startCluster(t)
	crd, err := os.ReadFile(filepath.Join(root, "test/chart/testdata/servicemonitor-crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.Apply(c.ctx, c.kubeconfig, crd); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		release, namespace string
		args               []string
	}{
		{"r", "chart-test", []string{"--values", allOn}},
		{deployRelease, deployNamespace, nil},
	} {
		c.kubectl("", "create", "namespace", r.namespace)
		text := renderText(t, r.release, r.namespace, append(r.args, "--api-versions", mapAPIVersion)...)
		if err := controlplane.Apply(c.ctx, c.kubeconfig, []byte(text)); err != nil {
			t.Fatalf("release %s: %v", r.release, err)
		}
		objs := decode(t, text)
		for _, o := range objs {
			if o.GetNamespace() == "" && isNamespaced(o.GetKind()) {
				t.Errorf("release %s: %s/%s has no namespace: it would land in the kubectl context's", r.release, o.GetKind(), o.GetName())
				o.SetNamespace(r.namespace)
			}
			if !c.exists(o) {
				t.Errorf("release %s: %s %s/%s was not stored", r.release, o.GetKind(), o.GetNamespace(), o.GetName())
			}
		}
		t.Logf("release %s: %d objects applied: %v", r.release, len(objs), names(objs))
	}
}

// isNamespaced lists the namespaced kinds the chart renders.
func isNamespaced(kind string) bool {
	return slices.Contains([]string{"ServiceAccount", "Secret", "Role", "RoleBinding", "Service", "Deployment", "PodDisruptionBudget", "ServiceMonitor"}, kind)
}

// TestHelmInstallRunUpgradeUninstall installs the chart with helm into a real
// API server, runs the manager binary with the installed Deployment's
// arguments as the installed ServiceAccount against the Vercel emulator (a
// Sandbox becomes Ready and is deleted through its finalizer), upgrades the
// release, uninstalls it — the CRDs and the objects stay — and installs it
// again over the kept CRDs.
func TestHelmInstallRunUpgradeUninstall(t *testing.T) {
	c := startCluster(t)
	emu, err := emulator.New(emulator.Options{DataDir: filepath.Join(t.TempDir(), "emulator")})
	if err != nil {
		t.Fatal(err)
	}
	emuURL, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })

	const ns, release = "sandbox-system", "sandbox-controller"
	install := []string{"install", release, chartPath, "--namespace", ns, "--create-namespace",
		"--set", "vercel.apiURL=" + emuURL,
		"--set", "vercel.credentials.create=true",
		"--set-string", "vercel.credentials.token=" + emu.Token(),
		"--set-string", "vercel.credentials.teamID=team_emulator",
		"--set-string", "vercel.credentials.projectID=prj_emulator",
	}
	out, err := c.helm(install...)
	if err != nil {
		t.Fatal(redact(err.Error(), emu.Token()))
	}
	if strings.Contains(out, emu.Token()) {
		t.Errorf("helm install printed the Vercel token:\n%s", redact(out, emu.Token()))
	}
	// helm install returns once the CRDs exist, not once they serve objects.
	if err := controlplane.WaitServed(c.ctx, c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "rollout status deployment/sandbox-controller-controller-manager") {
		t.Errorf("helm install output lacks the status or the NOTES:\n%s", redact(out, emu.Token()))
	}

	// The roles the NOTES tell users to bind exist.
	roles := regexp.MustCompile(release+`-sandbox-[a-z]+-role`).FindAllString(out, -1)
	if len(roles) < 2 {
		t.Errorf("the NOTES name no client roles:\n%s", redact(out, emu.Token()))
	}
	for _, role := range roles {
		if err := c.client.Get(c.ctx, client.ObjectKey{Name: role}, &rbacv1.ClusterRole{}); err != nil {
			t.Errorf("the NOTES name ClusterRole %s: %v", role, err)
		}
	}

	// helm filled .Capabilities from the API server, which serves
	// MutatingAdmissionPolicy: the policy is installed without --api-versions.
	policy := &unstructured.Unstructured{}
	policy.SetAPIVersion("admissionregistration.k8s.io/v1")
	policy.SetKind("MutatingAdmissionPolicy")
	policy.SetName(release + "-finalizers.sandbox.sentry.io")
	if !c.exists(policy) {
		t.Errorf("helm install did not install %s although the API server serves it", policy.GetName())
	}

	var dep appsv1.Deployment
	if err := c.client.Get(c.ctx, client.ObjectKey{Namespace: ns, Name: release + "-controller-manager"}, &dep); err != nil {
		t.Fatal(err)
	}
	bin, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	mgr := managerpod.Start(c.ctx, t, managerpod.Options{Name: "manager", Binary: bin, Deployment: &dep, ControlPlane: c.cp, Client: c.client})

	// A Sandbox becomes Ready through the installed manager, and its delete
	// goes through the finalizer to Vercel.
	c.kubectl("", "create", "namespace", "work")
	sample, err := os.ReadFile(filepath.Join(root, "config/samples/sandbox_v1alpha1_sandbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.kubectl(string(sample), "apply", "--namespace", "work", "-f", "-")
	if _, err := command("kubectl", nil, nil, "--kubeconfig", c.kubeconfig, "--namespace", "work",
		"wait", "--for=condition=Ready", "--timeout=90s", "sandbox/hello"); err != nil {
		t.Fatalf("%v\nmanager log:\n%s", err, mgr.LogTail())
	}
	if n := len(emu.LiveSandboxes()); n != 1 {
		t.Errorf("%d Vercel sandboxes, want 1", n)
	}
	var lease coordinationv1.Lease
	if err := c.client.Get(c.ctx, client.ObjectKey{Namespace: ns, Name: "sandbox-controller.sandbox.sentry.io"}, &lease); err != nil {
		t.Errorf("no leader election Lease in the release namespace: %v", err)
	} else if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("the Lease has no holder")
	}
	c.kubectl("", "--namespace", "work", "delete", "sandbox/hello", "--timeout=60s")
	if n := len(emu.LiveSandboxes()); n != 0 {
		t.Errorf("%d Vercel sandboxes after the delete, want 0", n)
	}
	// SIGTERM, as the kubelet sends it: a clean exit within the pod's grace
	// period.
	grace, stopping := time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second, time.Now()
	if err := mgr.Stop(grace); err != nil {
		t.Errorf("the manager on SIGTERM: %v", err)
	}
	t.Logf("the manager stopped %v after SIGTERM (grace period %v)", time.Since(stopping).Round(time.Millisecond), grace)
	if forbidden := regexp.MustCompile(`(?i)forbidden`).FindString(mgr.Log()); forbidden != "" {
		t.Errorf("the manager was refused something by the installed RBAC:\n%s", mgr.LogTail())
	}

	// The manager wrote its status digest key into the empty Secret the
	// chart installed in the release namespace (it may not create one).
	digestKey := func() []byte {
		t.Helper()
		var s corev1.Secret
		if err := c.client.Get(c.ctx, client.ObjectKey{Namespace: ns, Name: release + "-status-digest-key"}, &s); err != nil {
			t.Fatalf("the status digest key Secret: %v", err)
		}
		return s.Data["key"]
	}
	key := digestKey()
	if len(key) != 32 {
		t.Errorf("the manager left a status digest key of %d bytes in the release's Secret, want 32", len(key))
	}

	// Upgrade: a changed value reaches the Deployment.
	if out, err := c.helm("upgrade", release, chartPath, "--namespace", ns, "--reuse-values", "--set", "replicas=2"); err != nil || strings.Contains(out, emu.Token()) {
		t.Fatalf("helm upgrade: %v\n%s", err, redact(out, emu.Token()))
	}
	if err := c.client.Get(c.ctx, client.ObjectKeyFromObject(&dep), &dep); err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 2 {
		t.Errorf("after helm upgrade --set replicas=2 the Deployment has %d replicas", *dep.Spec.Replicas)
	}
	// ... and the key the manager wrote is kept: a new one would make every
	// recorded digest disagree (one spurious rotation per referenced Secret).
	if !bytes.Equal(digestKey(), key) {
		t.Errorf("helm upgrade replaced the status digest key the manager wrote")
	}

	// With no manager running, the installed admission policy alone adds the
	// finalizer: its binding names the release's policy.
	c.kubectl(strings.Replace(string(sample), "name: hello", "name: kept", 1), "apply", "--namespace", "work", "-f", "-")
	var kept sandboxv1.Sandbox
	if err := c.client.Get(c.ctx, client.ObjectKey{Namespace: "work", Name: "kept"}, &kept); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(kept.Finalizers, "sandbox.sentry.io/finalizer") {
		t.Errorf("Sandbox created with the chart's admission policy installed has finalizers %v", kept.Finalizers)
	}

	// Uninstall removes the release's objects but keeps the CRDs, and so the
	// users' objects.
	out, err = c.helm("uninstall", release, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "kept due to the resource policy") {
		t.Errorf("helm uninstall does not report the kept CRDs:\n%s", out)
	}
	if err := c.client.Get(c.ctx, client.ObjectKeyFromObject(&dep), &appsv1.Deployment{}); !isNotFound(err) {
		t.Errorf("the Deployment survived helm uninstall: %v", err)
	}
	if c.exists(policy) {
		t.Errorf("the admission policy survived helm uninstall")
	}
	if err := c.client.Get(c.ctx, client.ObjectKeyFromObject(&kept), &kept); err != nil {
		t.Errorf("Sandbox %s after helm uninstall: %v (the CRDs must be kept)", kept.Name, err)
	}
	crds := c.kubectl("", "get", "crd", "-o", "name")
	for _, name := range []string{"sandboxes", "sandboxsnapshots", "sandboxforks"} {
		if !strings.Contains(crds, "/"+name+".sandbox.sentry.io") {
			t.Errorf("CRD %s.sandbox.sentry.io is gone after helm uninstall: %s", name, crds)
		}
	}

	// Installing again adopts the kept CRDs.
	if out, err := c.helm(install...); err != nil {
		t.Fatalf("helm install over the kept CRDs: %v", redact(err.Error()+out, emu.Token()))
	}
}

func redact(s, secret string) string { return strings.ReplaceAll(s, secret, "<token>") }
