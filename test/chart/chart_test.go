package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// TestLint runs `helm lint --strict` with the default values and with every
// value set, and checks that bad values are refused with a useful message.
func TestLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--values", allOn}} {
		if out, err := helm(t, append([]string{"lint", "--strict", chartPath}, args...)...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", args, err, out)
		}
	}

	for _, tc := range []struct {
		set, want string
	}{
		{"controller.pollInterval=soon", "does not match pattern"},
		{"contoller.pollInterval=1m", "additional properties 'contoller' not allowed"},
		{"logging.encoder=xml", "logging/encoder"},
		{"terminationGracePeriodSeconds=30", "terminationGracePeriodSeconds (30) must exceed controller.gracefulShutdownTimeoutSeconds (30)"},
		{"vercel.credentials.create=true", "vercel.credentials.token is required"},
		{"replicas=2,leaderElection.enabled=false", "replicas > 1 needs leaderElection.enabled"},
	} {
		_, err := helm(t, "template", "r", chartPath, "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template --set %s: want an error containing %q, got %v", tc.set, tc.want, err)
		}
	}
}

// TestImage: the image defaults to <repository>:<appVersion>, and
// --set image.tag (and the other image values) reach the Deployment.
func TestImage(t *testing.T) {
	c := theDeployment(t, render(t, "r", "ns")).Spec.Template.Spec.Containers[0]
	if want := "sandbox-controller:" + appVersion(t); c.Image != want {
		t.Errorf("default image %q, want %q", c.Image, want)
	}
	d := theDeployment(t, render(t, "r", "ns", "--set", "image.tag=x"))
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "sandbox-controller:x" {
		t.Errorf("--set image.tag=x: image %q, want sandbox-controller:x", got)
	}
	d = theDeployment(t, render(t, "r", "ns", "--values", allOn))
	c = d.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example.com/sandbox-controller:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("all-on: image %q pull policy %q", c.Image, c.ImagePullPolicy)
	}
	if want := []corev1.LocalObjectReference{{Name: "regcred"}}; !reflect.DeepEqual(d.Spec.Template.Spec.ImagePullSecrets, want) {
		t.Errorf("all-on: imagePullSecrets %v, want %v", d.Spec.Template.Spec.ImagePullSecrets, want)
	}
}

// TestDefaults checks the objects of a default install.
func TestDefaults(t *testing.T) {
	objs := render(t, "r", "ns")
	d := theDeployment(t, objs)
	pod := d.Spec.Template.Spec
	args := pod.Containers[0].Args
	for _, want := range []string{"--leader-elect=true", "--leader-election-namespace=ns", "--metrics-bind-address=:8443", "--metrics-secure=true"} {
		if !slices.Contains(args, want) {
			t.Errorf("default args %q lack %s", args, want)
		}
	}
	if *d.Spec.Replicas != 1 {
		t.Errorf("replicas %d, want 1", *d.Spec.Replicas)
	}
	checkGracePeriod(t, "defaults", pod)
	if sa := find(objs, "ServiceAccount", pod.ServiceAccountName); sa == nil || sa.GetNamespace() != "ns" {
		t.Errorf("serviceAccountName %q: no such ServiceAccount in the release namespace among %v", pod.ServiceAccountName, names(objs))
	}
	// The validating policies are always installed (docs/security.md), and
	// name the release namespace as the manager's own.
	if o := ofKind(objs, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"); len(o) != 16 {
		t.Errorf("a default install renders the validating policies %v, want 8 policies (secret references, snapshot ids, rewind snapshot ids, images, adopt, abandon-remote, class label, created-by) and their 8 bindings", names(o))
	}
	if p := find(objs, "ValidatingAdmissionPolicy", "r-sandbox-controller-secret-references.sandbox.sentry.io"); p == nil {
		t.Errorf("no secret-references policy among %v", names(objs))
	} else if vars, _, _ := unstructured.NestedSlice(p.Object, "spec", "variables"); !slices.ContainsFunc(vars, func(v any) bool {
		m, _ := v.(map[string]any)
		return m["name"] == "managerNamespace" && m["expression"] == "'ns'"
	}) {
		t.Errorf("the secret-references policy does not name the release namespace as the manager's: %v", vars)
	}
	for _, kind := range []string{"ServiceMonitor", "PodDisruptionBudget", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		if o := ofKind(objs, kind); len(o) != 0 {
			t.Errorf("a default install renders %v", names(o))
		}
	}
	// The only Secret: the empty one the manager keeps its status digest key
	// in (no credentials unless vercel.credentials.create).
	if key := checkDigestKeySecret(t, objs); !slices.Equal(names(ofKind(objs, "Secret")), []string{"Secret/" + key}) {
		t.Errorf("a default install renders the Secrets %v, want only %s", names(ofKind(objs, "Secret")), key)
	}
	// The credentials are read from the existing Secret vercel-credentials.
	volumes := map[string]string{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			volumes[v.Name] = v.Secret.SecretName
		}
	}
	if !reflect.DeepEqual(volumes, map[string]string{"vercel-token": "vercel-credentials"}) {
		t.Errorf("Secret volumes %v", volumes)
	}
	checkReferences(t, objs)

	svc := find(objs, "Service", "r-sandbox-controller-controller-manager-metrics-service")
	if svc == nil {
		t.Fatalf("no metrics Service among %v", names(objs))
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || !reflect.DeepEqual(ports[0], map[string]any{"name": "https", "port": int64(8443), "targetPort": "metrics", "protocol": "TCP"}) {
		t.Errorf("metrics Service ports %v", ports)
	}
	selector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	for k, v := range selector {
		if pod := d.Spec.Template.Labels[k]; pod != v {
			t.Errorf("metrics Service selects %s=%s, the pods have %q", k, v, pod)
		}
	}

	if d.Spec.Strategy.Type != "" {
		t.Errorf("with leader election the Deployment rolls (the new pod waits for the lease), got strategy %q", d.Spec.Strategy.Type)
	}
	// Without leader election two managers must never overlap.
	d = theDeployment(t, render(t, "r", "ns", "--set", "leaderElection.enabled=false"))
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("leaderElection.enabled=false: strategy %q, want Recreate", d.Spec.Strategy.Type)
	}
	if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--leader-elect=false") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--leader-election-namespace") }) {
		t.Errorf("leaderElection.enabled=false: args %q", args)
	}

	// Disabled metrics: no Service, and the manager binds no metrics port.
	objs = render(t, "r", "ns", "--set", "metrics.enabled=false")
	if o := ofKind(objs, "Service", "ServiceMonitor"); len(o) != 0 {
		t.Errorf("metrics.enabled=false renders %v", names(o))
	}
	if args := theDeployment(t, objs).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--metrics-bind-address=0") {
		t.Errorf("metrics.enabled=false: args %q lack --metrics-bind-address=0", args)
	}

	// The admission policy needs a cluster that serves it; helm fills
	// .Capabilities from the cluster on install, --api-versions stands in here.
	objs = render(t, "r", "ns", "--api-versions", mapAPIVersion)
	if o := ofKind(objs, "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"); len(o) != 4 {
		t.Errorf("with %s served: want the finalizers and created-by policies and their bindings, got %v", mapAPIVersion, names(o))
	}
	objs = render(t, "r", "ns", "--api-versions", mapAPIVersion, "--set", "admissionPolicy.enabled=false")
	if o := ofKind(objs, "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"); len(o) != 0 {
		t.Errorf("admissionPolicy.enabled=false renders %v", names(o))
	}
}

// checkGracePeriod: the kubelet must not kill the manager before its graceful
// shutdown (reconciles finishing, the lease released) is over.
func checkGracePeriod(t *testing.T, name string, pod corev1.PodSpec) {
	t.Helper()
	var timeout time.Duration = -1
	for _, a := range pod.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--graceful-shutdown-timeout="); ok {
			var err error
			if timeout, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if timeout < 0 {
		t.Fatalf("%s: args %q do not set --graceful-shutdown-timeout", name, pod.Containers[0].Args)
	}
	if pod.TerminationGracePeriodSeconds == nil || time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second <= timeout {
		t.Errorf("%s: terminationGracePeriodSeconds %v does not exceed --graceful-shutdown-timeout %v", name, pod.TerminationGracePeriodSeconds, timeout)
	}
}

// checkReferences: every binding's role, and the Deployment's ServiceAccount,
// is an object of the same rendering.
func checkReferences(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, b := range ofKind(objs, "RoleBinding", "ClusterRoleBinding") {
		kind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
		name, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		role := find(objs, kind, name)
		if role == nil || (kind == "Role" && role.GetNamespace() != b.GetNamespace()) {
			t.Errorf("%s/%s binds %s/%s, which the chart does not render", b.GetKind(), b.GetName(), kind, name)
		}
	}
}

// TestCRDsMatchConfig: the chart installs exactly the CRDs of
// config/crd/bases, byte for byte, and the ones `make install` applies.
func TestCRDsMatchConfig(t *testing.T) {
	bases, err := filepath.Glob(filepath.Join(root, "config/crd/bases/*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("config/crd/bases: %v, %v", bases, err)
	}
	copies, err := filepath.Glob(filepath.Join(root, chartPath, "files/crds/*"))
	if err != nil {
		t.Fatal(err)
	}
	var baseNames, copyNames []string
	for _, f := range bases {
		baseNames = append(baseNames, filepath.Base(f))
	}
	for _, f := range copies {
		copyNames = append(copyNames, filepath.Base(f))
	}
	if !slices.Equal(baseNames, copyNames) {
		t.Fatalf("chart files/crds %v, config/crd/bases %v: run `make chart`", copyNames, baseNames)
	}
	for _, f := range baseNames {
		want, _ := os.ReadFile(filepath.Join(root, "config/crd/bases", f))
		got, _ := os.ReadFile(filepath.Join(root, chartPath, "files/crds", f))
		if !bytes.Equal(got, want) {
			t.Errorf("chart files/crds/%s differs from config/crd/bases/%s: run `make chart`", f, f)
		}
	}

	var fromBases []*unstructured.Unstructured
	for _, f := range bases {
		b, _ := os.ReadFile(f)
		fromBases = append(fromBases, decode(t, string(b))...)
	}
	installed := kustomize(t, "config/crd")
	chart := ofKind(render(t, "r", "ns"), "CustomResourceDefinition")
	if !slices.Equal(names(chart), names(fromBases)) || !slices.Equal(names(installed), names(fromBases)) {
		t.Fatalf("CRDs: chart %v, config/crd/bases %v, kustomize build config/crd %v", names(chart), names(fromBases), names(installed))
	}
	for _, want := range fromBases {
		got := find(chart, want.GetKind(), want.GetName())
		if !apiequality.Semantic.DeepEqual(got.Object["spec"], want.Object["spec"]) {
			t.Errorf("CRD %s: the chart's spec differs from config/crd/bases", want.GetName())
		}
		if got.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s: annotations %v lack helm.sh/resource-policy: keep (crds.keep defaults to true)", got.GetName(), got.GetAnnotations())
		}
		for k, v := range want.GetAnnotations() {
			if got.GetAnnotations()[k] != v {
				t.Errorf("CRD %s: annotation %s=%q, config has %q", got.GetName(), k, got.GetAnnotations()[k], v)
			}
		}
	}

	for _, crd := range ofKind(render(t, "r", "ns", "--set", "crds.keep=false"), "CustomResourceDefinition") {
		if _, ok := crd.GetAnnotations()["helm.sh/resource-policy"]; ok {
			t.Errorf("crds.keep=false: CRD %s still has helm.sh/resource-policy", crd.GetName())
		}
	}
	if crds := ofKind(render(t, "r", "ns", "--set", "crds.install=false"), "CustomResourceDefinition"); len(crds) != 0 {
		t.Errorf("crds.install=false renders %v", names(crds))
	}
}

// chartLabels are the labels the chart sets on everything, in place of any
// config/ sets.
var chartLabels = []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// accessKinds are the objects that grant or define access: the chart must
// install exactly those of config/default.
var accessKinds = []string{"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// TestRBACMatchesConfig: installed as release sandbox-controller in
// sandbox-controller-system, the chart creates the ServiceAccount, roles,
// bindings and admission policy of `make deploy` (kustomize build
// config/default) under the same names, with the same rules, subjects and
// specs.
func TestRBACMatchesConfig(t *testing.T) {
	config := ofKind(kustomize(t, "config/default"), accessKinds...)
	chart := ofKind(render(t, deployRelease, deployNamespace, "--api-versions", mapAPIVersion), accessKinds...)
	if len(config) == 0 {
		t.Fatal("kustomize build config/default renders no RBAC")
	}
	if !slices.Equal(names(chart), names(config)) {
		t.Errorf("access objects differ:\n chart  %v\n config %v\nrun `make chart`", names(chart), names(config))
	}
	for _, want := range config {
		got := find(chart, want.GetKind(), want.GetName())
		if got == nil {
			continue // reported above
		}
		if got.GetNamespace() != want.GetNamespace() && !(strings.Contains(want.GetKind(), "AdmissionPolicy") || strings.HasPrefix(want.GetKind(), "Cluster")) {
			t.Errorf("%s/%s: namespace %q, config %q", want.GetKind(), want.GetName(), got.GetNamespace(), want.GetNamespace())
		}
		for k, v := range want.GetLabels() {
			if !slices.Contains(chartLabels, k) && got.GetLabels()[k] != v {
				t.Errorf("%s/%s: label %s=%q, config has %q", want.GetKind(), want.GetName(), k, got.GetLabels()[k], v)
			}
		}
		for _, field := range []string{"rules", "aggregationRule", "roleRef", "subjects", "spec"} {
			if !apiequality.Semantic.DeepEqual(got.Object[field], want.Object[field]) {
				t.Errorf("%s/%s: %s differs from config:\n chart  %v\n config %v", want.GetKind(), want.GetName(), field, got.Object[field], want.Object[field])
			}
		}
	}

	// The manager's ClusterRole, straight from the file controller-gen writes.
	b, err := os.ReadFile(filepath.Join(root, "config/rbac/role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	got := find(chart, "ClusterRole", deployRelease+"-"+role.Name)
	if got == nil {
		t.Fatalf("the chart has no ClusterRole %s-%s", deployRelease, role.Name)
	}
	var chartRole rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &chartRole); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(chartRole.Rules, role.Rules) {
		t.Errorf("the chart's manager ClusterRole rules differ from config/rbac/role.yaml:\n chart  %v\n config %v", chartRole.Rules, role.Rules)
	}
}

// TestRolesLeastPrivilege: no role the chart installs grants a wildcard or
// creates or deletes Secrets (a manager that may create Secrets in its
// namespace can mint a token for any ServiceAccount there); only the
// manager's lists or watches them (for the metadata watch that notices a
// rotation; RBAC cannot grant a metadata-only watch, so this lets the manager
// read every Secret in the cluster), and only a Role of the release namespace
// updates one: the status digest key Secret the chart ships empty and the
// manager is told to use (--status-digest-key-secret).
func TestRolesLeastPrivilege(t *testing.T) {
	for _, args := range [][]string{nil, {"--values", allOn}} {
		objs := render(t, "r", "ns", append(args, "--api-versions", mapAPIVersion)...)
		checkReferences(t, objs)
		keySecret := checkDigestKeySecret(t, objs)
		for _, o := range ofKind(objs, "Role", "ClusterRole") {
			var role rbacv1.ClusterRole // a Role's rules have the same shape
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			for _, r := range role.Rules {
				for _, list := range [][]string{r.Verbs, r.Resources, r.APIGroups, r.NonResourceURLs} {
					if slices.Contains(list, "*") {
						t.Errorf("%s/%s grants a wildcard: %+v", o.GetKind(), o.GetName(), r)
					}
				}
				if !slices.Contains(r.APIGroups, "") || !slices.Contains(r.Resources, "secrets") {
					continue
				}
				manager := o.GetKind() == "ClusterRole" && strings.HasSuffix(o.GetName(), "-manager-role")
				digestKey := o.GetKind() == "Role" && o.GetNamespace() == "ns" && slices.Equal(r.ResourceNames, []string{keySecret})
				for _, v := range r.Verbs {
					if v != "get" && (!manager || (v != "list" && v != "watch")) && (!digestKey || v != "update") {
						t.Errorf("%s/%s may %s Secrets: %+v", o.GetKind(), o.GetName(), v, r)
					}
				}
			}
		}
	}
}

// checkDigestKeySecret: the one Secret a rendering holds (credentials aside)
// is the status digest key's, in the release namespace, with no data — so an
// upgrade leaves the key the manager wrote — and the manager is told its name
// and namespace (its pod's, by the downward API). It returns the name.
func checkDigestKeySecret(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	d := theDeployment(t, objs)
	c := d.Spec.Template.Spec.Containers[0]
	var name string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--status-digest-key-secret="); ok {
			name = v
		}
	}
	if !slices.Contains(c.Args, "--manager-namespace=$(POD_NAMESPACE)") || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		t.Errorf("the manager is not told its namespace (--manager-namespace=$(POD_NAMESPACE) with POD_NAMESPACE from metadata.namespace): args %q env %+v", c.Args, c.Env)
	}
	key := find(objs, "Secret", name)
	if name == "" || key == nil {
		t.Fatalf("the manager's --status-digest-key-secret %q is no Secret of the rendering %v", name, names(objs))
	}
	if key.GetNamespace() != d.Namespace {
		t.Errorf("Secret %s in namespace %q, the manager in %q", name, key.GetNamespace(), d.Namespace)
	}
	for _, field := range []string{"data", "stringData"} {
		if _, ok := key.Object[field]; ok {
			t.Errorf("Secret %s has %s: helm upgrade would replace the key the manager wrote", name, field)
		}
	}
	return name
}

// TestManagerMatchesConfig: the chart's default Deployment runs the manager
// as config/manager does — same name and namespace (as release
// sandbox-controller), security contexts, resources, credentials, and every
// argument config passes.
func TestManagerMatchesConfig(t *testing.T) {
	want := theDeployment(t, kustomize(t, "config/default"))
	got := theDeployment(t, render(t, deployRelease, deployNamespace))
	if got.Name != want.Name || got.Namespace != want.Namespace {
		t.Errorf("Deployment %s/%s, config %s/%s", got.Namespace, got.Name, want.Namespace, want.Name)
	}
	gp, wp := got.Spec.Template.Spec, want.Spec.Template.Spec
	gc, wc := gp.Containers[0], wp.Containers[0]
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"pod securityContext", gp.SecurityContext, wp.SecurityContext},
		{"container securityContext", gc.SecurityContext, wc.SecurityContext},
		{"resources", gc.Resources, wc.Resources},
		{"env", gc.Env, wc.Env},
		{"command", gc.Command, wc.Command},
		{"terminationGracePeriodSeconds", gp.TerminationGracePeriodSeconds, wp.TerminationGracePeriodSeconds},
		{"replicas", got.Spec.Replicas, want.Spec.Replicas},
	} {
		if !apiequality.Semantic.DeepEqual(f.got, f.want) {
			t.Errorf("%s differs from config/manager:\n chart  %+v\n config %+v", f.name, f.got, f.want)
		}
	}
	for _, v := range wp.Volumes {
		if !slices.ContainsFunc(gp.Volumes, func(g corev1.Volume) bool { return apiequality.Semantic.DeepEqual(g, v) }) {
			t.Errorf("config/manager's volume %+v is not in the chart's %+v", v, gp.Volumes)
		}
	}
	for _, m := range wc.VolumeMounts {
		if !slices.ContainsFunc(gc.VolumeMounts, func(g corev1.VolumeMount) bool { return apiequality.Semantic.DeepEqual(g, m) }) {
			t.Errorf("config/manager's volume mount %+v is not in the chart's %+v", m, gc.VolumeMounts)
		}
	}
	// A boolean flag given bare (--leader-elect) is --leader-elect=true.
	normalize := func(args []string) []string {
		var out []string
		for _, a := range args {
			if !strings.Contains(a, "=") {
				a += "=true"
			}
			out = append(out, a)
		}
		return out
	}
	chartArgs := normalize(gc.Args)
	for _, a := range normalize(wc.Args) {
		if !slices.Contains(chartArgs, a) {
			t.Errorf("config/manager passes %s; the chart's default args %q do not", a, gc.Args)
		}
	}
}
