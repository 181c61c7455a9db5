// Package monitoring checks what the operator ships for Prometheus and
// Grafana (config/prometheus and the chart's copy): the alerts pass their
// promtool unit tests, select the job the shipped ServiceMonitors give the
// manager, link a runbook that exists, and the chart ships the same rules and
// dashboard as kustomize. test/e2e (TestEveryMonitoredMetricIsServed) uses
// the helpers here to check that every metric a rule or a dashboard panel
// reads appears in a live scrape of the manager.
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"sigs.k8s.io/yaml"
)

// Where the shipped monitoring lives, relative to the repository root.
const (
	RuleFile      = "config/prometheus/prometheusrule.yaml"
	DashboardFile = "config/prometheus/dashboard.json"
	ChartCopyDir  = "charts/sandbox-controller/files/monitoring"
)

// Rule is one alerting rule of the PrometheusRule.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Group is a rule group, as promtool reads it.
type Group struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// PrometheusRule is the part of the shipped object the tests read.
type PrometheusRule struct {
	Kind string `json:"kind"`
	Spec struct {
		Groups []Group `json:"groups"`
	} `json:"spec"`
}

// LoadRules reads the shipped PrometheusRule.
func LoadRules(root string) (*PrometheusRule, error) {
	b, err := os.ReadFile(filepath.Join(root, RuleFile))
	if err != nil {
		return nil, err
	}
	r := &PrometheusRule{}
	if err := yaml.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: %w", RuleFile, err)
	}
	if r.Kind != "PrometheusRule" || len(r.Spec.Groups) == 0 {
		return nil, fmt.Errorf("%s: no PrometheusRule with groups", RuleFile)
	}
	return r, nil
}

// Panel is the part of a dashboard panel the tests read.
type Panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// DashboardQueries returns every panel's PromQL queries by panel title.
func DashboardQueries(root string) (map[string][]string, error) {
	b, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels []Panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	out := map[string][]string{}
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr != "" {
					out[p.Title] = append(out[p.Title], t.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, nil
}

// metricName matches the names of the series the manager exports (its own,
// controller-runtime's, client-go's work queues, leader election and REST
// client); `up` and Grafana's $__ variables are not among them.
var metricName = regexp.MustCompile(`\b(?:sandbox_controller_|controller_runtime_|workqueue_|leader_election_|rest_client_)[a-zA-Z0-9_:]*`)

// MetricNames returns the manager's metric names an expression reads,
// sorted, each once (histograms by their _bucket, _sum or _count name, as
// written).
func MetricNames(expr string) []string {
	names := metricName.FindAllString(expr, -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// selector matches a metric name and its label matchers, if any.
var selector = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)

// SelectorsWithout returns the selectors of expr (metric names the manager
// exports, and `up`) that lack the matcher want, e.g. job="sandbox-controller".
func SelectorsWithout(expr, want string) []string {
	var bad []string
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		if name != "up" && !metricName.MatchString(name) {
			continue
		}
		if !regexp.MustCompile(`[{,]\s*` + regexp.QuoteMeta(want) + `\s*[,}]`).MatchString(m[2]) {
			bad = append(bad, m[0])
		}
	}
	return bad
}

// ScrapedNames returns the sample names of a Prometheus text exposition.
func ScrapedNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`).FindAllStringSubmatch(body, -1) {
		names[m[1]] = true
	}
	return names
}
