package metrics

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func sandbox(uid, ns string, created time.Time, phase sandboxv1.SandboxPhase, ready bool, session string, vcpus int32) *sandboxv1.Sandbox {
	s := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: ns, Name: "name-" + uid, CreationTimestamp: metav1.NewTime(created)}}
	s.Status.Phase = phase
	s.Status.SessionID = session
	if session != "" {
		s.Status.StartedAt = &metav1.Time{Time: created}
	}
	if vcpus > 0 {
		s.Spec.Resources = &sandboxv1.SandboxResources{VCPUs: &vcpus}
	}
	st := metav1.ConditionFalse
	if ready {
		st = metav1.ConditionTrue
	}
	s.Status.Conditions = []metav1.Condition{{Type: sandboxv1.ConditionReady, Status: st}}
	return s
}

// collect runs the tracker's collector and returns its series as text.
func collect(t *testing.T, tr *tracker) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	c := &sandboxCollector{}
	c.active.Store(tr)
	reg.MustRegister(c)
	var b strings.Builder
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, lp.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if v != 0 {
				fmt.Fprintf(&b, "%s{%s} %g\n", f.GetName(), strings.Join(l, ","), math.Round(v*1000)/1000)
			}
		}
	}
	return b.String()
}

func TestTrackerPhasesSessionsAndTimeToReady(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: t0}
	tr := newTracker(clk.now)
	tr.start = t0

	// a: created, seen 300 ms later (within creationTimestamp's second), Ready 2 s later.
	clk.t = t0.Add(300 * time.Millisecond)
	tr.observe(sandbox("a", "team-a", t0, sandboxv1.SandboxCreating, false, "", 4))
	clk.t = t0.Add(2300 * time.Millisecond)
	hBefore := histogramSum(t)
	tr.observe(sandbox("a", "team-a", t0, sandboxv1.SandboxRunning, true, "sess-1", 4))
	if got := histogramSum(t) - hBefore; got < 1.999 || got > 2.001 {
		t.Errorf("time to Ready observed %.3fs, want 2s (from the sighting, not the truncated timestamp)", got)
	}
	// A second Ready (after a resume) is not a first Ready.
	tr.observe(sandbox("a", "team-a", t0, sandboxv1.SandboxStopped, false, "sess-1", 4))
	hBefore = histogramSum(t)
	clk.t = t0.Add(10 * time.Second)
	tr.observe(sandbox("a", "team-a", t0, sandboxv1.SandboxRunning, true, "sess-2", 4))
	if got := histogramSum(t) - hBefore; got != 0 {
		t.Errorf("a second Ready was observed (%.3fs)", got)
	}
	// b: already Ready when first seen (a restart): no observation, and its
	// session counts from the tracker's start only.
	hBefore = histogramSum(t)
	tr.observe(sandbox("b", "team-b", t0.Add(-time.Hour), sandboxv1.SandboxRunning, true, "sess-b", 0))
	if got := histogramSum(t) - hBefore; got != 0 {
		t.Errorf("a Sandbox Ready when first seen was observed (%.3fs)", got)
	}
	tr.observe(sandbox("c", "team-b", t0, "", false, "", 0))

	clk.t = t0.Add(20 * time.Second)
	got := collect(t, tr)
	// a: session 1 from 0 (startedAt) to 2.3 s stopped at... it stopped at
	// the Stopped event (2.3 s), 2.3 s; session 2 from its startedAt (t0,
	// clamped to tracker start t0) to 20 s: 20 s. 22.3 s x 4 vCPUs.
	// b: 20 s x 2 (default) vCPUs.
	for _, want := range []string{
		"sandbox_controller_sandboxes{Running} 2",
		"sandbox_controller_sandboxes{Unknown} 1",
		"sandbox_controller_session_seconds_total{team-a} 22.3",
		"sandbox_controller_vcpu_seconds_total{team-a} 89.2",
		"sandbox_controller_session_seconds_total{team-b} 20",
		"sandbox_controller_vcpu_seconds_total{team-b} 40",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}

	// Deleting b closes its session into the namespace total.
	tr.forget(sandbox("b", "team-b", t0, sandboxv1.SandboxRunning, true, "sess-b", 0))
	clk.t = t0.Add(30 * time.Second)
	got = collect(t, tr)
	if !strings.Contains(got, "sandbox_controller_session_seconds_total{team-b} 20\n") {
		t.Errorf("deleted Sandbox's seconds lost or still counting:\n%s", got)
	}
}

func histogramSum(t *testing.T) float64 {
	t.Helper()
	return gather(t, SandboxTimeToReady)[0].GetHistogram().GetSampleSum()
}

func TestInstrumentVercelBoundedLabels(t *testing.T) {
	var chained int
	cfg := vercel.Config{OnRequest: func(string, int, time.Duration) { chained++ }}
	InstrumentVercel(&cfg)
	cfg.OnRequest(vercel.EPGetSandbox, 200, 10*time.Millisecond)
	cfg.OnRequest(vercel.EPGetSandbox, 0, time.Second)
	cfg.OnRequest(vercel.EPCreateSandbox, 999, time.Second)
	cfg.OnLimiterWait(50 * time.Millisecond)
	if chained != 3 {
		t.Errorf("previous OnRequest hook called %d times, want 3", chained)
	}
	for _, c := range []struct {
		endpoint, code string
		want           float64
	}{{vercel.EPGetSandbox, "200", 1}, {vercel.EPGetSandbox, "none", 1}, {vercel.EPCreateSandbox, "other", 1}} {
		if got := counterValue(t, VercelRequests.WithLabelValues(c.endpoint, c.code)); got != c.want {
			t.Errorf("requests{%s,%s} = %v, want %v", c.endpoint, c.code, got, c.want)
		}
	}
	if got := histogramCount(t, VercelLimiterWait); got != 1 {
		t.Errorf("limiter wait series = %d", got)
	}
}

func TestObserveSnapshotBuildBoundsOutcome(t *testing.T) {
	ObserveSnapshotBuild(BuildSucceeded, time.Minute)
	ObserveSnapshotBuild("some-object-name", time.Minute)
	if n := seriesCount(t, SnapshotBuildDuration); n != 2 {
		t.Errorf("%d outcome series, want 2 (Succeeded, Other)", n)
	}
}

func gather(t *testing.T, c prometheus.Collector) []*dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range fams {
		out = append(out, f.GetMetric()...)
	}
	return out
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	return gather(t, c)[0].GetCounter().GetValue()
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	return gather(t, h)[0].GetHistogram().GetSampleCount()
}

func seriesCount(t *testing.T, c prometheus.Collector) int { return len(gather(t, c)) }

// A shard's tracker counts its own namespaces only, so that summing the
// shards' leaders counts each Sandbox once.
func TestTrackerCountsOwnShardOnly(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: t0}
	tr := newTracker(clk.now)
	tr.start = t0
	tr.owns = func(ns string) bool { return ns == "mine" }
	tr.observe(sandbox("a", "mine", t0, sandboxv1.SandboxRunning, true, "sess-a", 2))
	tr.observe(sandbox("b", "theirs", t0, sandboxv1.SandboxRunning, true, "sess-b", 2))
	clk.t = t0.Add(10 * time.Second)
	got := collect(t, tr)
	if !strings.Contains(got, "sandbox_controller_sandboxes{Running} 1\n") || strings.Contains(got, "theirs") {
		t.Errorf("a shard counted another shard's Sandbox:\n%s", got)
	}
}
