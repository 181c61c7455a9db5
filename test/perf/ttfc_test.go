package perf

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTTFCSchedules(t *testing.T) {
	s := ttfcSchedules(TTFCConfig{Rates: []float64{10, 0.5}, Conversations: 3, Burst: 4})
	if len(s) != 3 {
		t.Fatalf("%d schedules, want 3", len(s))
	}
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
	if s[0].name != "10/s" || s[0].key != "r10" || !slices.Equal(s[0].at, want) {
		t.Errorf("10/s: %+v", s[0])
	}
	if s[1].key != "r0p5" || s[1].at[2] != 4*time.Second {
		t.Errorf("0.5/s: %+v", s[1])
	}
	if s[2].name != "burst 4" || s[2].key != "b4" || !slices.Equal(s[2].at, make([]time.Duration, 4)) {
		t.Errorf("burst: %+v", s[2])
	}
	if s := ttfcSchedules(TTFCConfig{Rates: []float64{1}, Conversations: 1, Burst: -1}); len(s) != 1 {
		t.Errorf("a negative burst is skipped: %+v", s)
	}
}

// TestRunSchedule: conversations start on schedule, each timed from its
// scheduled start (a wait in the client counts), failures are reported
// apart.
func TestRunSchedule(t *testing.T) {
	sched := ttfcSchedule{key: "r10", at: []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}}
	var (
		mu      sync.Mutex
		started []time.Duration
	)
	t0 := time.Now()
	times, errs, wall := runSchedule(context.Background(), sched, time.Second, func(ctx context.Context, id string) error {
		mu.Lock()
		started = append(started, time.Since(t0))
		mu.Unlock()
		if at := scheduledStart(ctx); at.IsZero() || time.Since(at) > 100*time.Millisecond {
			t.Errorf("%s: scheduled start %v, want the moment it was started", id, at)
		}
		time.Sleep(50 * time.Millisecond)
		if strings.HasSuffix(id, "c0001") {
			return errors.New("refused")
		}
		return nil
	})
	if len(times) != 2 || len(errs) != 1 || !strings.Contains(errs[0], "r10-c0001: refused") {
		t.Fatalf("times %v errs %v", times, errs)
	}
	for _, d := range times {
		if d < 50*time.Millisecond || d > 500*time.Millisecond {
			t.Errorf("time %s, want about 50ms", d)
		}
	}
	if wall < 250*time.Millisecond {
		t.Errorf("wall %s: the last conversation starts at 200ms and takes 50ms", wall)
	}
	slices.Sort(started)
	if len(started) != 3 || started[2] < 200*time.Millisecond {
		t.Errorf("starts %v, want the last at ≥ 200ms", started)
	}
}

func TestPoolStatsFromMetricDeltas(t *testing.T) {
	const ns = "bench-ttfc-1"
	series := func(name, labels string) string {
		return name + "{namespace=" + ns + labels + ",pool=" + ttfcPoolName + "}"
	}
	hit := series("sandbox_controller_pool_claims_total", ",outcome=hit")
	empty := series("sandbox_controller_pool_claims_total", ",outcome=PoolEmpty")
	claim := "sandbox_controller_pool_claim_seconds{namespace=" + ns + ",pool=" + ttfcPoolName + "}"
	idle := "sandbox_controller_pool_member_idle_seconds{namespace=" + ns + ",pool=" + ttfcPoolName + "}"
	other := "sandbox_controller_pool_claims_total{namespace=other,outcome=hit,pool=" + ttfcPoolName + "}"
	before := map[string]float64{hit: 2, claim + "_sum": 1, claim + "_count": 2, idle + "_sum": 10, idle + "_count": 2, other: 5}
	after := map[string]float64{hit: 5, empty: 1, claim + "_sum": 1.6, claim + "_count": 5, idle + "_sum": 40, idle + "_count": 5, other: 50}
	got := poolStats(ns, before, after)
	if got.Hits != 3 || got.Cold() != 1 || got.Misses["PoolEmpty"] != 1 {
		t.Errorf("hits %d, misses %v; want 3 hits and 1 PoolEmpty", got.Hits, got.Misses)
	}
	if math.Abs(got.ClaimMeanMs-200) > 1e-6 || math.Abs(got.IdleMeanSeconds-10) > 1e-6 {
		t.Errorf("claim mean %.3f ms, idle mean %.3f s; want 200 ms and 10 s", got.ClaimMeanMs, got.IdleMeanSeconds)
	}
}
