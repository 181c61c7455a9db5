package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// What config/rbac names the metrics roles after config/default's namePrefix.
const (
	metricsReaderRole = "sandbox-controller-metrics-reader"
	leaseName         = "sandbox-controller.sandbox.sentry.io"
)

// TestSecureMetrics scrapes the manager binary, started with the deployed
// Deployment's arguments (so metrics are served as a cluster gets them: HTTPS,
// behind the API server's TokenReview and SubjectAccessReview, checked by the
// manager with the deployed metrics-auth RBAC). A ServiceAccount bound to
// the metrics-reader ClusterRole reads the metrics; one without the binding
// is refused with 403, a request without a token or with a forged one with
// 401; plain HTTP and HTTP/2 are not served.
func TestSecureMetrics(t *testing.T) {
	e := newEnv(t, envOptions{noManager: true})
	mgr := e.startManager("manager")
	metricsURL := "https://" + mgr.MetricsAddr + "/metrics"

	cs, err := kubernetes.NewForConfig(e.cp.Config)
	must(t, err)
	const ns = "monitoring"
	_, err = cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)
	for _, sa := range []string{"prometheus", "intruder"} {
		_, err = cs.CoreV1().ServiceAccounts(ns).Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		must(t, err)
	}
	// What docs/operations.md tells users to do for their Prometheus.
	if out, err := e.kubectl("create", "clusterrolebinding", "prometheus-sandbox-controller-metrics",
		"--clusterrole="+metricsReaderRole, "--serviceaccount="+ns+":prometheus"); err != nil {
		t.Fatal(out, err)
	}
	token := func(sa string) string {
		t.Helper()
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(e.ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		must(t, err)
		return tr.Status.Token
	}
	reader, intruder := token("prometheus"), token("intruder")

	// The manager's certificate is self-signed (no --metrics-cert-path), as
	// Prometheus's insecureSkipVerify in config/prometheus expects. The
	// client offers HTTP/2 so that the server's refusal of it is observable.
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed by design
		ForceAttemptHTTP2: true,
	}}
	type answer struct {
		status int
		body   string
		resp   *http.Response
	}
	scrape := func(url, bearer string) (answer, error) {
		req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, url, nil)
		if err != nil {
			return answer{}, err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, string(b), resp}, err
	}

	// Some work to count: a Sandbox, reconciled to Ready.
	e.apply(fmt.Sprintf("apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: counted\n  namespace: %s\nspec:\n  source:\n    runtime: node24\n", ns))
	if out, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", "sandbox/counted", "--timeout=90s"); err != nil {
		t.Fatal(out, err)
	}

	var ok answer
	eventually(t, 60*time.Second, func() error {
		if mgr.Exited() {
			t.Fatalf("the manager exited: %v\n%s", mgr.Err(), mgr.LogTail())
		}
		a, err := scrape(metricsURL, reader)
		if err != nil {
			return err
		}
		if a.status != http.StatusOK {
			return fmt.Errorf("GET /metrics with the metrics-reader's token: %d %s", a.status, strings.TrimSpace(a.body))
		}
		if !regexp.MustCompile(`(?m)^controller_runtime_reconcile_total\{controller="sandbox",result="(success|requeue|requeue_after)"\} [1-9]`).MatchString(a.body) {
			return fmt.Errorf("GET /metrics: no successful reconcile of the sandbox controller counted yet:\n%s", grepLines(a.body, "controller_runtime_reconcile_total"))
		}
		ok = a
		return nil
	})
	t.Run("reader", func(t *testing.T) {
		if ok.resp.TLS == nil {
			t.Fatal("the metrics were served without TLS")
		}
		if p := ok.resp.TLS.NegotiatedProtocol; p == "h2" || ok.resp.ProtoMajor != 1 {
			t.Errorf("negotiated %q (HTTP/%d): HTTP/2 must be off unless --enable-http2", p, ok.resp.ProtoMajor)
		}
		for _, want := range []string{
			`controller_runtime_reconcile_errors_total{controller="sandbox"}`,
			`workqueue_depth{controller="sandbox"`,
			`sandbox_controller_vercel_requests_total{code="200",endpoint="createSandbox"} 1`,
			`sandbox_controller_sandboxes{phase="Running"} 1`,
			`leader_election_master_status{name="` + leaseName + `"} 1`,
		} {
			if !strings.Contains(ok.body, want) {
				t.Errorf("the scrape lacks %s", want)
			}
		}
		if t.Failed() {
			t.Logf("scraped series:\n%s", grepLines(ok.body, "_"))
		}
	})

	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		// The API server answers the TokenReview of a token it did not
		// issue with an error, which controller-runtime's filter turns into
		// a 500 rather than a 401.
		{"forged token", "eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl", http.StatusInternalServerError},
		{"ServiceAccount without the role", intruder, http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := scrape(metricsURL, c.token)
			must(t, err)
			if a.status != c.want {
				t.Errorf("GET /metrics: %d %s, want %d", a.status, strings.TrimSpace(a.body), c.want)
			}
			if strings.Contains(a.body, "controller_runtime_") {
				t.Error("the refusal carries metrics")
			}
		})
	}

	t.Run("plain HTTP", func(t *testing.T) {
		a, err := scrape(strings.Replace(metricsURL, "https://", "http://", 1), reader)
		if err == nil && a.status == http.StatusOK {
			t.Fatalf("metrics served over plain HTTP")
		}
	})

	// The reviews ran with the manager's deployed RBAC (metrics-auth-role):
	// a missing permission would show as forbidden in its log.
	if strings.Contains(strings.ToLower(mgr.Log()), "forbidden") {
		t.Errorf("the manager logged forbidden requests:\n%s", grepLines(mgr.Log(), "forbidden"))
	}
}

// TestMetricsServiceRoutesToManager checks, on the rendered config/default,
// what the API server cannot: that the metrics Service reaches the manager's
// HTTPS metrics port, and that config/prometheus's ServiceMonitor selects
// that Service and names its port.
func TestMetricsServiceRoutesToManager(t *testing.T) {
	manifests, err := controlplane.Render(repoRoot, "config/default")
	must(t, err)
	d := findDeployment(t, manifests)
	c := d.Spec.Template.Spec.Containers[0]

	var bindPort string
	for _, a := range c.Args {
		if flagName(a) == "metrics-bind-address" {
			_, v, _ := strings.Cut(a, "=")
			_, bindPort, _ = strings.Cut(v, ":")
		}
		if flagName(a) == "metrics-secure" && !strings.HasSuffix(a, "=true") {
			t.Errorf("the Deployment sets %s: metrics must stay behind authentication", a)
		}
	}
	if bindPort == "" {
		t.Fatalf("the Deployment's args %v set no --metrics-bind-address", c.Args)
	}
	var svc *corev1.Service
	var reader *rbacv1.ClusterRole
	for _, doc := range splitYAML(t, manifests) {
		var obj metav1.PartialObjectMetadata
		must(t, yaml.Unmarshal(doc, &obj))
		switch {
		case obj.Kind == "Service" && obj.Name == "sandbox-controller-controller-manager-metrics-service":
			svc = &corev1.Service{}
			must(t, yaml.UnmarshalStrict(doc, svc))
		case obj.Kind == "ClusterRole" && obj.Name == metricsReaderRole:
			reader = &rbacv1.ClusterRole{}
			must(t, yaml.UnmarshalStrict(doc, reader))
		}
	}
	if svc == nil {
		t.Fatal("config/default renders no metrics Service")
	}
	if svc.Namespace != systemNamespace {
		t.Errorf("metrics Service in namespace %q, want %s", svc.Namespace, systemNamespace)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s; the manager's pods are labelled %v", k, v, d.Spec.Template.Labels)
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Error("the metrics Service selects no pods")
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("metrics Service ports %v, want one", svc.Spec.Ports)
	}
	p := svc.Spec.Ports[0]
	if p.Name != "https" || p.Port != 8443 {
		t.Errorf("metrics Service port %s/%d, want https/8443", p.Name, p.Port)
	}
	// The container must declare the metrics port, and the Service target
	// it by number or by that declaration's name.
	var declared *corev1.ContainerPort
	for i, cp := range c.Ports {
		if strconv.Itoa(int(cp.ContainerPort)) == bindPort {
			declared = &c.Ports[i]
		}
	}
	if declared == nil {
		t.Fatalf("the container declares ports %v, not the metrics port %s", c.Ports, bindPort)
	}
	if target := p.TargetPort; !(target.Type == intstr.Int && strconv.Itoa(target.IntValue()) == bindPort) &&
		!(target.Type == intstr.String && target.StrVal == declared.Name) {
		t.Errorf("the Service targets port %s; the manager binds metrics to :%s (container port %q)", target.String(), bindPort, declared.Name)
	}
	if d.Spec.Template.Spec.TerminationGracePeriodSeconds == nil {
		t.Error("the Deployment sets no terminationGracePeriodSeconds")
	}

	// The metrics-reader role grants exactly GET /metrics.
	if reader == nil {
		t.Fatalf("config/default renders no ClusterRole %s", metricsReaderRole)
	}
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if fmt.Sprint(reader.Rules) != fmt.Sprint(want) {
		t.Errorf("%s rules %v, want %v", metricsReaderRole, reader.Rules, want)
	}

	// The optional ServiceMonitor (config/prometheus, not in config/default).
	mon, err := controlplane.Render(repoRoot, "config/prometheus")
	must(t, err)
	var sm struct {
		Kind string `json:"kind"`
		Spec struct {
			Endpoints []struct {
				Port   string `json:"port"`
				Scheme string `json:"scheme"`
				Path   string `json:"path"`
			} `json:"endpoints"`
			Selector metav1.LabelSelector `json:"selector"`
		} `json:"spec"`
	}
	// config/prometheus also renders the alerts and the dashboard.
	for _, doc := range splitYAML(t, mon) {
		must(t, yaml.Unmarshal(doc, &sm))
		if sm.Kind == "ServiceMonitor" {
			break
		}
	}
	if sm.Kind != "ServiceMonitor" || len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("config/prometheus renders %s with %d endpoints, want one ServiceMonitor endpoint", sm.Kind, len(sm.Spec.Endpoints))
	}
	if ep := sm.Spec.Endpoints[0]; ep.Port != p.Name || ep.Scheme != "https" || ep.Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoint %+v, want port %s, https, /metrics", ep, p.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	must(t, err)
	if sel.Empty() || !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor's selector %s does not select the metrics Service (labels %v)", sel, svc.Labels)
	}
	if strings.Contains(string(manifests), "kind: ServiceMonitor") {
		t.Error("config/default renders a ServiceMonitor: it needs the Prometheus Operator's CRDs and must stay optional")
	}
}
