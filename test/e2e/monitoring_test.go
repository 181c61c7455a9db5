package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/getsentry/sandbox-controller/test/monitoring"
)

// TestEveryMonitoredMetricIsServed scrapes the deployed manager binary (its
// Deployment's arguments, HTTPS behind a metrics-reader token, as Prometheus
// would) after a Sandbox ran, a recipe SandboxSnapshot was built and a
// SandboxQuota counted them, and checks that every metric an alert of
// config/prometheus/prometheusrule.yaml or a panel of the Grafana dashboard
// reads is in the scrape: a renamed or never-registered metric would leave
// an alert that can never fire or an empty panel.
func TestEveryMonitoredMetricIsServed(t *testing.T) {
	e := newEnv(t, envOptions{noManager: true})
	mgr := e.startManager("manager")

	// What each rule and panel reads.
	want := map[string][]string{} // metric → who reads it
	rules, err := monitoring.LoadRules(repoRoot)
	must(t, err)
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			for _, n := range monitoring.MetricNames(r.Expr) {
				want[n] = append(want[n], "alert "+r.Alert)
			}
		}
	}
	queries, err := monitoring.DashboardQueries(repoRoot)
	must(t, err)
	for title, qs := range queries {
		for _, q := range qs {
			for _, n := range monitoring.MetricNames(q) {
				want[n] = append(want[n], fmt.Sprintf("panel %q", title))
			}
		}
	}
	if len(want) < 15 {
		t.Fatalf("the rules and the dashboard read only %d metrics: %v", len(want), want)
	}

	// Prometheus's ServiceAccount, bound as docs/operations.md says.
	cs, err := kubernetes.NewForConfig(e.cp.Config)
	must(t, err)
	const ns = "monitoring"
	_, err = cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{})
	must(t, err)
	if out, err := e.kubectl("create", "clusterrolebinding", "prometheus-sandbox-controller-metrics",
		"--clusterrole="+metricsReaderRole, "--serviceaccount="+ns+":prometheus"); err != nil {
		t.Fatal(out, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(e.ctx, "prometheus", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	must(t, err)

	// Work for every per-object metric: a Sandbox with a session (phases,
	// time to Ready, vCPU seconds, Vercel requests), a recipe build (build
	// durations) and a SandboxQuota (quota use) with a budget (spend).
	e.apply(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxQuota
metadata:
  name: budget
  namespace: ` + ns + `
spec:
  hard:
    runningSandboxes: 10
    runningVCPUs: 8
  budgets:
  - name: monthly
    window:
      calendarMonth: {}
    limit: "500"
    warnAtPercent: 80
---
apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: watched
  namespace: ` + ns + `
spec:
  source:
    runtime: node24
---
apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: built
  namespace: ` + ns + `
spec:
  source:
    recipe:
      runtime: node24
      setup:
      - name: hello
        command: sh
        args: ["-c", "echo hello > /tmp/hello"]
`)
	for _, obj := range []string{"sandbox/watched", "sandboxsnapshot/built"} {
		if out, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", obj, "--timeout=120s"); err != nil {
			t.Fatal(out, err)
		}
	}

	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the manager's self-signed certificate, as the ServiceMonitor accepts it
	}}
	scrape := func() (string, error) {
		req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, "https://"+mgr.MetricsAddr+"/metrics", nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := httpClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET /metrics: %d %s", resp.StatusCode, b)
		}
		return string(b), err
	}

	// The quota and the Sandbox gauges follow the objects within a
	// reconcile or two: wait until every wanted metric is there.
	var missing []string
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for {
		if mgr.Exited() {
			t.Fatalf("the manager exited: %v\n%s", mgr.Err(), mgr.LogTail())
		}
		body, err = scrape()
		must(t, err)
		served := monitoring.ScrapedNames(body)
		missing = missing[:0]
		for n := range want {
			if !served[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	slices.Sort(missing)
	for _, n := range missing {
		t.Errorf("%s is not in the manager's scrape; read by %s", n, strings.Join(want[n], ", "))
	}
	if t.Failed() {
		t.Logf("served sandbox_controller_ series:\n%s", grepLines(body, "sandbox_controller_"))
		return
	}
	t.Logf("%d metrics read by the alerts and the dashboard, all served", len(want))
}
