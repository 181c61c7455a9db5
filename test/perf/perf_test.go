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

// TestShortBench runs the whole harness at N=50 with short phases (and 10
// SandboxSnapshots, a fork of 5), so that the harness cannot rot, and checks
// the targets that do not depend on the machine's speed. Timing targets are `make bench`'s (the race detector,
// which `make test` enables, would distort them anyway).
func TestShortBench(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: run `make test`, which builds the envtest binaries")
	}
	if testing.Short() {
		t.Skip("the short benchmark takes about 45 s")
	}
	ctrl.SetLogger(logr.Discard())
	// Two minutes for the harness, one more for the sharded arm's rounds.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
		Snapshots:       10,
		ForkReplicas:    5,
		Shards:          2,
		// The time-to-first-command path, without the latency profile: a
		// few conversations per arm (the figures are make bench's).
		TTFC: &TTFCConfig{Profile: "none", Rates: []float64{10}, Conversations: 3, Burst: 5},
		Log:  &log,
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
		if g.LatencyMs > 0 {
			// With latency, requests are seen in flight, never more than
			// the bound the manager and the direct arm share.
			for _, arm := range []string{ArmOperator, ArmDirect} {
				if f := g.Arms[arm].VercelInFlightToP50; f <= 0 || f > float64(rep.Config.VercelInFlight) {
					t.Errorf("latency %gms, arm %s: %.2f Vercel requests in flight until p50, want in (0, %d]", g.LatencyMs, arm, f, rep.Config.VercelInFlight)
				}
			}
		}
		op := g.Arms[ArmOperator]
		// One write: with the finalizer added at admission (the harness
		// installs config/admission) the controller records the derived name
		// with the create's result, in the status write that makes it Ready.
		if op.SandboxWritesPerObject != 1 {
			t.Errorf("operator: %.2f API-server writes per Sandbox from create to Ready, want 1", op.SandboxWritesPerObject)
		}
		// Exactly one create; the stale-cache guard's reads (see the
		// sharded arm below) appear under load: 1.02 and 1.04 per object
		// inside a loaded make test, 1.00 alone. A read per object would be
		// 2.00: bounded well below that.
		if op.VercelRequestsPerObject > 1.25 || op.VercelCreatesPerObject != 1 {
			t.Errorf("operator: %.2f Vercel requests and %.2f creates per Sandbox from create to Ready, want at most 1.25 and exactly 1", op.VercelRequestsPerObject, op.VercelCreatesPerObject)
		}
		// The sharded arm: the same work, split between two managers, each
		// object's Vercel sandbox called for by its own shard only.
		sh := g.Arms[ArmSharded]
		if sh == nil || sh.Objects != 50 || sh.Failed != 0 {
			t.Fatalf("latency %gms, sharded arm: %+v, want 50 objects Ready", g.LatencyMs, sh)
		}
		if sh.ShardViolations != 0 || len(sh.ShardObjects) != 2 || sh.ShardObjects[0] == 0 || sh.ShardObjects[1] == 0 || sh.ShardObjects[0]+sh.ShardObjects[1] != 50 {
			t.Errorf("sharded arm: objects per shard %v, %d called for by two shards or the wrong one: want both shards busy, 50 in all, 0", sh.ShardObjects, sh.ShardViolations)
		}
		// Exactly one create per object. A request beyond it is a read by the
		// stale-cache guard (controllers/sandbox_controller.go: an event of a
		// manager's own finalizer write handled before its status write
		// reached the cache makes it look in Vercel rather than create
		// blind); with two managers sharing the machine it fires under load
		// (1.02 per object at load 5.7 on 2 cores, 1.56 at load 10), so it is
		// bounded below one read per object instead of asserted away.
		if sh.SandboxWritesPerObject != 1 || sh.VercelCreatesPerObject != 1 || sh.VercelRequestsPerObject > 1.75 {
			t.Errorf("sharded arm: %.2f writes, %.2f creates and %.2f Vercel requests per object, want 1, 1 and at most 1.75", sh.SandboxWritesPerObject, sh.VercelCreatesPerObject, sh.VercelRequestsPerObject)
		}
		if f := g.Arms[ArmFloor]; f.SandboxWritesPerObject != 1 || f.VercelRequestsPerObject != 0 {
			t.Errorf("floor: %.2f writes and %.2f Vercel requests per object, want 1 and 0", f.SandboxWritesPerObject, f.VercelRequestsPerObject)
		}
		if g.RatioABDrain <= 0 || g.RatioACDrain <= 0 {
			t.Errorf("ratios not computed: %+v", g)
		}
	}

	checkKinds(t, rep.Kinds, md.String())
	checkTTFC(t, rep.TTFC, md.String())

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

// checkKinds checks the kinds phase of TestShortBench: 10 SandboxSnapshots
// capturing 10 Sandboxes, and one SandboxFork of 5 from one SandboxSnapshot.
func checkKinds(t *testing.T, k *KindsResult, md string) {
	t.Helper()
	if k == nil || k.Snapshot == nil || k.Fork == nil {
		t.Fatalf("kinds phase missing: %+v", k)
	}
	for _, r := range []*KindResult{k.Snapshot, k.Fork} {
		want := map[string]int{KindSnapshot: 10, KindFork: 5}[r.Kind]
		if r.Objects != want || r.Failed != 0 || r.Verified != want {
			t.Errorf("%s: %d objects, %d not Ready, %d verified in the emulator; want %d Ready and verified (not Ready: %v)", r.Kind, r.Objects, r.Failed, r.Verified, want, r.NotReady)
		}
		if len(r.LeakedSandboxes) != 0 || len(r.LeakedSnapshots) != 0 || len(r.TeardownIncomplete) != 0 {
			t.Errorf("%s: after deleting everything, left in Vercel: sandboxes %v, snapshots %v; objects left: %v", r.Kind, r.LeakedSandboxes, r.LeakedSnapshots, r.TeardownIncomplete)
		}
		if r.TeardownObjects == 0 {
			t.Errorf("%s: teardown deleted nothing", r.Kind)
		}
	}

	s := k.Snapshot
	// Exactly one Vercel snapshot per capture: a second createSnapshot would
	// stop the source's next session. (Other requests depend on timing: the
	// 2 s poll interval polls the sources during the step.)
	if c := s.VercelRequestsByEndpoint["createSnapshot"]; c != 1 {
		t.Errorf("snapshot: %.2f createSnapshot requests per SandboxSnapshot, want 1", c)
	}
	// Writes per capture. The path, with the finalizer added at admission:
	// the capture intent (PATCH status, before Vercel is asked), the result
	// (PATCH status), the annotation that makes the source Sandbox look at
	// Vercel again (PATCH sandboxes) and that Sandbox's status write (its
	// session was stopped by the capture; lastHandledReconcileAt): 4, as
	// measured (4.00 for 1000 captures at 50 ms). A controller that adds the
	// finalizer itself writes one more; a re-run from a stale cached copy
	// (which capturesOf prevents) would repeat the last three: 8 bounds
	// both. Fewer than 2 (intent and result) would mean writes went
	// uncounted.
	if s.WritesPerObject < 2 || s.WritesPerObject > 8 {
		t.Errorf("snapshot: %.2f API-server writes per capture (%v), want 2–8", s.WritesPerObject, s.WritesByRequest)
	}

	f := k.Fork
	if c := f.VercelRequestsByEndpoint["createSandbox"]; c != 1 {
		t.Errorf("fork: %.2f createSandbox requests per child, want 1", c)
	}
	// The fork's own Ready (with readyReplicas 5) came within the timeout.
	// (Not compared with the children's: separate watches may deliver in
	// either order.)
	if f.ForkReadyMs <= 0 {
		t.Errorf("fork: its Ready condition did not turn True with all 5 children Ready (%v)", f.NotReady)
	}
	// Writes per child: its create by the fork (POST sandboxes), then what
	// the Sandbox arm's operator pays (≤ 3: finalizer, creating, running;
	// 2 with the finalizer added at admission), and the fork's own
	// (finalizer, and a status write per change of its children's phases,
	// up to 2 per child) spread over 5 children: at most
	// 1 + 3 + (1 + 1 + 2·5)/5 = 6.4. Measured with the admission policy:
	// 3.22 per child for 100 children at 50 ms. Fewer than 2 (the create
	// and a Ready status) would mean writes went uncounted.
	if f.WritesPerObject < 2 || f.WritesPerObject > 6.4 {
		t.Errorf("fork: %.2f API-server writes per child (%v), want 2–6.4", f.WritesPerObject, f.WritesByRequest)
	}
	for _, row := range []string{"| SandboxSnapshot (capture) | 10 |", "| SandboxFork children | 5 |"} {
		if !strings.Contains(md, row) {
			t.Errorf("markdown lacks the row %q", row)
		}
	}
}

// checkTTFC checks the time-to-first-command phase of TestShortBench: both
// arms ran every conversation of both schedules to its first command.
func checkTTFC(t *testing.T, r *TTFCResult, md string) {
	t.Helper()
	if r == nil || len(r.Rows) != 4 {
		t.Fatalf("time to first command: %+v, want 4 rows (2 arms × 10/s and a burst of 5)", r)
	}
	for _, row := range r.Rows {
		want := map[string]int{"10/s": 3, "burst 5": 5}[row.Schedule]
		if row.Conversations != want || row.Failed != 0 || row.P50Ms <= 0 || row.P99Ms < row.P50Ms {
			t.Errorf("ttfc %s %s: %+v, want %d conversations, none failed", row.Schedule, row.Arm, row, want)
		}
	}
	if v := r.RatioP50["10/s"][TTFCArmOperator]; v <= 0 {
		t.Errorf("ttfc: no operator/sdk p50 ratio: %v", r.RatioP50)
	}
	if !strings.Contains(md, "| burst 5 | operator | 5 |") {
		t.Errorf("markdown lacks the ttfc operator row")
	}
}

func TestMeanInFlight(t *testing.T) {
	v := vercelSamples{inFlight: []int64{4, 4, 2, 2, 0, 0}}
	for _, c := range []struct {
		until time.Duration
		want  float64
	}{
		{0, 0},
		{2 * inFlightEvery, 4},
		{4 * inFlightEvery, 3},
		{time.Hour, 2}, // past the samples: all of them
	} {
		if got := v.meanInFlight(c.until); got != c.want {
			t.Errorf("meanInFlight(%s) = %v, want %v", c.until, got, c.want)
		}
	}
}
