package perf

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// TestShortBench runs the whole harness at N=50 with short phases, so that
// the harness cannot rot, and checks the targets that do not depend on the
// machine's speed. Timing targets are `make bench`'s (the race detector,
// which `make test` enables, would distort them anyway).
func TestShortBench(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: run `make test`, which builds the envtest binaries")
	}
	if testing.Short() {
		t.Skip("the short benchmark takes about 30 s")
	}
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	cfg := Config{
		Sizes:           []int{50},
		Latencies:       []time.Duration{0, 10 * time.Millisecond},
		Rounds:          1,
		PollInterval:    2 * time.Second,
		BackoffCap:      2 * time.Second,
		ReadyTimeout:    30 * time.Second,
		IdleWindow:      7 * time.Second,
		Outage:          5 * time.Second,
		RecoveryTimeout: 30 * time.Second,
		Log:             &log,
	}
	start := time.Now()
	rep, err := Run(ctx, cfg)
	t.Logf("harness log:\n%s", log.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("ran in %s", time.Since(start).Round(time.Second))

	var md bytes.Buffer
	rep.Markdown(&md)
	t.Logf("report:\n%s", md.String())
	if _, err := rep.WriteJSON(t.TempDir()); err != nil {
		t.Errorf("WriteJSON: %v", err)
	}

	if len(rep.Runs) != 2 {
		t.Fatalf("%d grid points, want 2", len(rep.Runs))
	}
	for _, g := range rep.Runs {
		for _, arm := range []string{ArmOperator, ArmDirect, ArmFloor} {
			a := g.Arms[arm]
			if a == nil || a.Objects != 50 || a.Failed != 0 {
				t.Fatalf("latency %gms, arm %s: %+v, want 50 objects Ready", g.LatencyMs, arm, a)
			}
		}
		op := g.Arms[ArmOperator]
		if op.SandboxWritesPerObject > 3 {
			t.Errorf("operator: %.2f API-server writes per Sandbox from create to Ready, target ≤ 3", op.SandboxWritesPerObject)
		}
		if op.VercelRequestsPerObject != 1 {
			t.Errorf("operator: %.2f Vercel requests per Sandbox from create to Ready, want 1 (the create)", op.VercelRequestsPerObject)
		}
		if f := g.Arms[ArmFloor]; f.SandboxWritesPerObject != 1 || f.VercelRequestsPerObject != 0 {
			t.Errorf("floor: %.2f writes and %.2f Vercel requests per object, want 1 and 0", f.SandboxWritesPerObject, f.VercelRequestsPerObject)
		}
		if g.RatioABDrain <= 0 || g.RatioACDrain <= 0 {
			t.Errorf("ratios not computed: %+v", g)
		}
	}

	idle := rep.Idle
	if idle == nil {
		t.Fatal("no idle result")
	}
	if idle.ResyncSandboxWritesPerObject != 0 {
		t.Errorf("no-op resync: %.3f writes per Sandbox, target 0", idle.ResyncSandboxWritesPerObject)
	}
	if idle.SandboxWritesInWindow != 0 {
		t.Errorf("steady state: %.0f writes, want 0", idle.SandboxWritesInWindow)
	}
	if p := idle.VercelRequestsPerObjectPoll; p <= 0.5 || p > 1.0 {
		t.Errorf("steady state: %.3f Vercel requests per Sandbox per poll interval, target ≤ 1 (and > 0.5: the polls ran)", p)
	}
	if idle.RSSMiB <= 0 || idle.CPUSeconds < 0 {
		t.Errorf("usage not measured: %+v", idle)
	}

	o := rep.Outage
	if o == nil {
		t.Fatal("no outage result")
	}
	if o.Recovered != 50 {
		t.Errorf("%d of 50 Sandboxes Synced after the outage", o.Recovered)
	}
	if o.RequestsDuringOutage == 0 || o.RequestsDuringOutage > o.BoundRequests {
		t.Errorf("outage: %d requests, want between 1 and the backoff-implied bound %d", o.RequestsDuringOutage, o.BoundRequests)
	}
	if !strings.Contains(md.String(), "| 50 | 0ms | operator |") {
		t.Errorf("markdown lacks the operator row")
	}
	for _, m := range []string{
		"sandbox_controller_vercel_requests_total{code=200,endpoint=createSandbox}",
		"sandbox_controller_sandbox_time_to_ready_seconds_count",
		"sandbox_controller_sandboxes{phase=Running}",
	} {
		if _, ok := rep.ManagerMetrics[m]; !ok {
			t.Errorf("manager metrics lack %s (have %d series)", m, len(rep.ManagerMetrics))
		}
	}
}
