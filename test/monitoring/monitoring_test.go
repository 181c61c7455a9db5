package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// job is what the shipped ServiceMonitors call the manager's targets and what
// every rule and panel selects; TestServiceMonitorsSetTheJob reads it back
// from the renderings.
const job = `job="sandbox-controller"`

var root = func() string {
	d, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return d
}()

// binary returns the path of a tool `make <target>` puts into bin/ (or the
// environment variable env names); a missing one fails the test.
func binary(t *testing.T, env, name, target string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(root, "bin", name)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v: run `make %s` (make test does)", name, err, target)
	}
	return p
}

func run(t *testing.T, name string, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// writeGroups writes groups as a promtool rules file into dir.
func writeGroups(t *testing.T, dir string, groups any) string {
	t.Helper()
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRulesPromtool checks the shipped alerts with the real promtool: `check
// rules` (syntax, templates) and `test rules` with testdata/rules_test.yaml,
// whose series carry the labels the shipped ServiceMonitor produces.
func TestRulesPromtool(t *testing.T) {
	promtool := binary(t, "PROMTOOL", "promtool", "promtool")
	rules, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeGroups(t, dir, rules.Spec.Groups)
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(run(t, promtool, dir, "check", "rules", "rules.yaml"))
	t.Log(run(t, promtool, dir, "test", "rules", "rules_test.yaml"))

	// Every alert is exercised firing by the unit tests.
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			if !regexp.MustCompile(`(?s)alertname: ` + r.Alert + `\n\s*exp_alerts:\n\s*- exp_labels`).Match(tests) {
				t.Errorf("alert %s is never expected to fire in testdata/rules_test.yaml", r.Alert)
			}
		}
	}
}

// TestDashboardQueriesParse has promtool parse every dashboard query, as a
// recording rule with Grafana's interval variables replaced.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := binary(t, "PROMTOOL", "promtool", "promtool")
	queries, err := DashboardQueries(root)
	if err != nil {
		t.Fatal(err)
	}
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h")
	var rules []map[string]string
	n := 0
	for title, qs := range queries {
		for _, q := range qs {
			n++
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", n), "expr": grafanaVars.Replace(q)})
			if strings.Contains(grafanaVars.Replace(q), "$") {
				t.Errorf("panel %q: unknown variable in %s", title, q)
			}
		}
	}
	if n < 10 {
		t.Fatalf("the dashboard has %d queries", n)
	}
	dir := t.TempDir()
	writeGroups(t, dir, []map[string]any{{"name": "dashboard", "rules": rules}})
	t.Log(run(t, promtool, dir, "check", "rules", "rules.yaml"))
}

// TestSelectorsNameTheJob checks that every selector of a rule or a
// dashboard query names job="sandbox-controller": other operators export
// controller_runtime_ and workqueue_ series too.
func TestSelectorsNameTheJob(t *testing.T) {
	rules, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := DashboardQueries(root)
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	for title, qs := range queries {
		for i, q := range qs {
			exprs[fmt.Sprintf("panel %q query %d", title, i)] = q
		}
	}
	for what, e := range exprs {
		if len(MetricNames(e)) == 0 && !strings.Contains(e, "up{") {
			t.Errorf("%s reads no metric of the manager: %s", what, e)
		}
		if bad := SelectorsWithout(e, job); len(bad) > 0 {
			t.Errorf("%s: selectors without %s: %v", what, job, bad)
		}
	}
	// The check itself catches a missing job.
	if bad := SelectorsWithout(`sum(rate(workqueue_adds_total{name="x"}[5m])) / up`, job); len(bad) != 2 {
		t.Errorf("SelectorsWithout missed unqualified selectors: %v", bad)
	}
}

// serviceMonitorJob returns the job a rendered ServiceMonitor gives its
// targets, failing unless it is set by relabeling and honorLabels is on.
func serviceMonitorJob(t *testing.T, what string, sm *unstructured.Unstructured) string {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("%s: want one endpoint, got %d", what, len(eps))
	}
	ep := eps[0].(map[string]any)
	if ep["honorLabels"] != true {
		t.Errorf("%s: honorLabels is not true: the per-namespace series' namespace label would become exported_namespace", what)
	}
	got := ""
	rels, _ := ep["relabelings"].([]any)
	for _, r := range rels {
		r := r.(map[string]any)
		if r["targetLabel"] == "job" && r["action"] == "replace" && r["sourceLabels"] == nil {
			got, _ = r["replacement"].(string)
		}
	}
	if got == "" {
		t.Fatalf("%s: no relabeling sets the job: the Prometheus Operator would call it after the Service", what)
	}
	return `job="` + got + `"`
}

func decode(t *testing.T, text []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(text), -1) {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if string(j) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		objs = append(objs, u)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	return nil
}

// renderings returns config/prometheus as kustomize renders it, and the
// chart as helm renders it with the ServiceMonitor, the PrometheusRule and
// the dashboard on.
func renderings(t *testing.T) (kustomized, charted []*unstructured.Unstructured) {
	t.Helper()
	k, err := controlplane.Render(root, "config/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	helm := binary(t, "HELM", "helm", "helm")
	home := t.TempDir()
	cmd := exec.Command(helm, "template", "sandbox-controller", "charts/sandbox-controller", "--namespace", "sandbox-controller-system",
		"--set", "metrics.serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	h, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return decode(t, k), decode(t, h)
}

// TestServiceMonitorsSetTheJob checks that both shipped ServiceMonitors
// (kustomize and chart) give the manager the job the rules and the
// dashboard select.
func TestServiceMonitorsSetTheJob(t *testing.T) {
	k, h := renderings(t)
	for what, objs := range map[string][]*unstructured.Unstructured{"config/prometheus": k, "chart": h} {
		sm := find(objs, "ServiceMonitor")
		if sm == nil {
			t.Fatalf("%s renders no ServiceMonitor", what)
		}
		if got := serviceMonitorJob(t, what+" ServiceMonitor", sm); got != job {
			t.Errorf("%s ServiceMonitor sets %s; the rules and the dashboard select %s", what, got, job)
		}
	}
}

// TestChartShipsTheSameMonitoring checks that the chart's copies are the
// files of config/prometheus, and that both renderings carry the same rules
// and dashboard.
func TestChartShipsTheSameMonitoring(t *testing.T) {
	for _, f := range []string{RuleFile, DashboardFile} {
		a, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		copyPath := filepath.Join(ChartCopyDir, filepath.Base(f))
		b, err := os.ReadFile(filepath.Join(root, copyPath))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: cp %s %s", copyPath, f, f, copyPath)
		}
	}
	k, h := renderings(t)
	kr, hr := find(k, "PrometheusRule"), find(h, "PrometheusRule")
	if kr == nil || hr == nil {
		t.Fatalf("PrometheusRule rendered by kustomize: %v, by the chart: %v", kr != nil, hr != nil)
	}
	if !reflect.DeepEqual(kr.Object["spec"], hr.Object["spec"]) {
		t.Error("the chart's PrometheusRule spec differs from config/prometheus's")
	}
	// config/default adds the namePrefix the chart's release name matches.
	if "sandbox-controller-"+kr.GetName() != hr.GetName() {
		t.Errorf("PrometheusRule sandbox-controller-%s (make deploy) vs %s (chart, release sandbox-controller)", kr.GetName(), hr.GetName())
	}
	want, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	for what, objs := range map[string][]*unstructured.Unstructured{"config/prometheus": k, "chart": h} {
		cm := find(objs, "ConfigMap")
		if cm == nil {
			t.Fatalf("%s renders no dashboard ConfigMap", what)
		}
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("%s dashboard ConfigMap %s lacks the label grafana_dashboard=1: %v", what, cm.GetName(), cm.GetLabels())
		}
		got, _, _ := unstructured.NestedString(cm.Object, "data", "sandbox-controller.json")
		if got != string(want) {
			t.Errorf("%s dashboard ConfigMap %s does not hold %s", what, cm.GetName(), DashboardFile)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s dashboard is not JSON", what)
		}
	}
}

// TestRunbooks checks that every alert links its runbook section in
// docs/operations.md, and that the section exists.
func TestRunbooks(t *testing.T) {
	rules, err := LoadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/getsentry/sandbox-controller/blob/main/docs/operations.md#"
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a severity label, a summary or a description", r.Alert)
			}
			if want := base + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !regexp.MustCompile(`(?m)^#### ` + r.Alert + `\s*$`).Match(doc) {
				t.Errorf("docs/operations.md has no runbook section \"#### %s\"", r.Alert)
			}
		}
	}
}
