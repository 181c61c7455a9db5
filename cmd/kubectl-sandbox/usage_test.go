package main

import (
	"strconv"
	"strings"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

const cpuHour = int64(3_600_000)

func usageOf(cpuMillis, memMBMillis, egress int64) *sandboxv1.SandboxUsage {
	return &sandboxv1.SandboxUsage{Total: &sandboxv1.UsageAmounts{ActiveCPUMillis: cpuMillis, MemoryMBMillis: memMBMillis, EgressBytes: egress}}
}

func TestBuildUsageReport(t *testing.T) {
	half := sandboxv1.Decimal("0.064")
	prices := map[string]*sandboxv1.SandboxPrices{"half": {ActiveCPUHour: &half}, "eu": {Currency: "EUR"}}
	objs := []usedObj{
		{"team-a", "Sandbox", "one", "", usageOf(cpuHour, 2048*cpuHour, 1_000_000_000), 0},
		{"team-a", "Sandbox", "two", "half", usageOf(2*cpuHour, 0, 0), 0},
		{"team-a", "SandboxSnapshot", "base", "", usageOf(cpuHour/2, 0, 0), 5_000_000_000},
		{"team-b", "Sandbox", "three", "eu", usageOf(cpuHour, 0, 0), 0},
		{"team-b", "Sandbox", "new", "", nil, 0},
	}
	for _, tc := range []struct {
		by   string
		want []string // "key cost currency objects"
	}{
		{"sandbox", []string{"team-a/Sandbox/one 0.3204 USD 1", "team-a/Sandbox/two 0.128 USD 1", "team-a/SandboxSnapshot/base 0.064 USD 1",
			"team-b/Sandbox/new 0 USD 1", "team-b/Sandbox/three 0.128 EUR 1"}},
		// one: 0.128 CPU + 0.0424 memory + 0.15 transfer; two: 2 h at 0.064.
		{"namespace", []string{"team-a/*/ 0.5124 USD 3", "team-b/*/ 0.128 EUR 1", "team-b/*/ 0 USD 1"}},
		{"class", []string{"// 0.3844 USD 3", "eu// 0.128 EUR 1", "half// 0.128 USD 1"}},
	} {
		t.Run(tc.by, func(t *testing.T) {
			r, err := buildUsageReport(objs, prices, tc.by)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, row := range r.Rows {
				key := row.Namespace + "/" + row.Kind + "/" + row.Name
				if tc.by == "namespace" {
					key = row.Namespace + "/" + row.Class + "/"
				} else if tc.by == "class" {
					key = row.Class + "//"
				}
				got = append(got, strings.Join([]string{key, string(row.Cost), row.Currency, strconv.Itoa(row.Objects)}, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	bad := sandboxv1.Decimal("x")
	if _, err := buildUsageReport(objs, map[string]*sandboxv1.SandboxPrices{"half": {TransferGB: &bad}}, "class"); err == nil ||
		!strings.Contains(err.Error(), "SandboxClass half spec.prices.transferGB") {
		t.Errorf("a bad class price: got %v, want an error naming the field", err)
	}
}

// TestUsageCommand runs `kubectl sandbox usage` on a Sandbox whose usage
// status is set by hand (paused, so the manager leaves its status alone).
func TestUsageCommand(t *testing.T) {
	ns := newNamespace(t)
	manifest := `apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: metered
  annotations:
    sandbox.sentry.io/paused: "true"
spec:
  source:
    runtime: node24
`
	if r := kubectlIn(t, manifest, "apply", "-n", ns, "-f", "-"); r.code != 0 {
		t.Fatalf("apply: %s", r)
	}
	ok(t, "patch", "sandbox", "metered", "-n", ns, "--subresource=status", "--type=merge",
		"-p", `{"status":{"usage":{"total":{"activeCPUMillis":7200000,"memoryMBMillis":7372800000,"egressBytes":2000000000}}}}`)
	report := decodeJSON[usageReport](t, ok(t, sandbox(ns, "usage", "-o", "json")...))
	if len(report.Rows) != 1 {
		t.Fatalf("rows: %+v", report.Rows)
	}
	// 2 h × 0.128 + 2 GB-h × 0.0212 + 2 GB × 0.15.
	row := report.Rows[0]
	if row.Name != "metered" || row.ActiveCPUHours != "2" || row.MemoryGBHours != "2" || row.TransferGB != "2" || row.Cost != "0.5984" || row.Currency != "USD" {
		t.Errorf("usage -o json: %+v", row)
	}
	table := ok(t, sandbox(ns, "usage", "--by", "namespace")...)
	if !strings.Contains(table, ns) || !strings.Contains(table, "0.5984 USD") {
		t.Errorf("usage --by namespace:\n%s", table)
	}
	if r := kubectl(t, sandbox(ns, "usage", "--by", "pod")...); r.code == 0 || !strings.Contains(r.stderr, "--by \"pod\"") {
		t.Errorf("--by pod: %s", r)
	}
}
