package vercel

import (
	"testing"
	"time"
)

var testBackoff = throttleBackoff{base: time.Second, cap: 8 * time.Second}

func TestThrottleBackoffSteps(t *testing.T) {
	var got []time.Duration
	for f := 0; f <= 6; f++ {
		got = append(got, testBackoff.step(f))
	}
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("steps = %v, want %v", got, want)
		}
	}
	if d := (throttleBackoff{base: time.Second, cap: time.Hour}).step(1000); d != time.Hour {
		t.Errorf("step after many failures = %s, want the cap", d)
	}
	for range 100 {
		if j := jitter(time.Second); j < time.Second || j > 1500*time.Millisecond {
			t.Fatalf("jitter(1s) = %s", j)
		}
	}
}

// Concurrency 429s on starts: requests admitted together count as one
// round; the next round waits a doubled backoff; one probe goes when it
// ends; a delete opens the gate at once.
func TestThrottleStartsGate(t *testing.T) {
	var th throttle
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// Ten creates admitted before any answer: all go.
	var tks []ticket
	for range 10 {
		tk, wait := th.admit(laneStart, t0, testBackoff)
		if wait != 0 {
			t.Fatalf("open gate made a create wait %s", wait)
		}
		tks = append(tks, tk)
	}
	// All ten answer 429 without Retry-After: one round, 1 s.
	for _, tk := range tks {
		if w := th.settle(tk, 429, 0, false, t0, testBackoff); w != time.Second {
			t.Fatalf("settle wait = %s, want 1s", w)
		}
	}
	if th.starts.failures != 1 || th.all.failures != 0 {
		t.Fatalf("failures: starts %d, all %d; want 1 round on starts only", th.starts.failures, th.all.failures)
	}
	if _, wait := th.admit(laneStart, at(500*time.Millisecond), testBackoff); wait != 500*time.Millisecond {
		t.Errorf("create during the backoff waits %s, want the 500ms left", wait)
	}
	// Reads and deletes are not held back by the concurrency gate.
	for _, l := range []lane{laneDefault, laneFree} {
		if _, wait := th.admit(l, at(500*time.Millisecond), testBackoff); wait != 0 {
			t.Errorf("lane %d waits %s behind the starts gate", l, wait)
		}
	}
	// The backoff ends: one probe goes, the next start waits for it.
	probe, wait := th.admit(laneStart, at(time.Second), testBackoff)
	if wait != 0 || !probe.probes[1] {
		t.Fatalf("probe: wait %s, probes %v", wait, probe.probes)
	}
	if _, wait := th.admit(laneStart, at(time.Second), testBackoff); wait != 2*time.Second {
		t.Errorf("second start during the probe waits %s, want the next step (2s)", wait)
	}
	// The probe fails: two rounds, 2 s.
	if w := th.settle(probe, 429, 0, false, at(time.Second), testBackoff); w != 2*time.Second {
		t.Errorf("probe's 429: wait %s, want 2s", w)
	}
	if _, wait := th.admit(laneStart, at(1500*time.Millisecond), testBackoff); wait != 1500*time.Millisecond {
		t.Errorf("after the failed probe: wait %s, want 1.5s", wait)
	}
	// A delete succeeds: a session ended, so one start may go at once.
	del, _ := th.admit(laneFree, at(1600*time.Millisecond), testBackoff)
	th.settle(del, 200, 0, true, at(1600*time.Millisecond), testBackoff)
	probe, wait = th.admit(laneStart, at(1600*time.Millisecond), testBackoff)
	if wait != 0 || !probe.probes[1] {
		t.Fatalf("after a delete: wait %s, probe %v; want a probe at once", wait, probe.probes)
	}
	// It starts: the gate opens for everyone.
	th.settle(probe, 200, 0, false, at(1700*time.Millisecond), testBackoff)
	if th.starts.failures != 0 {
		t.Errorf("failures after a successful start: %d", th.starts.failures)
	}
	for range 3 {
		if tk, wait := th.admit(laneStart, at(1700*time.Millisecond), testBackoff); wait != 0 || tk.probes[1] {
			t.Errorf("after the gate opened: wait %s, probe %v", wait, tk.probes)
		}
	}
}

// A 429 with Retry-After closes the gate of every lane but the free one for
// that long; without Retry-After on a read it backs off the same way, and
// any answer but 429 resets the backoff.
func TestThrottleAllGate(t *testing.T) {
	var th throttle
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tk, _ := th.admit(laneDefault, t0, testBackoff)
	if w := th.settle(tk, 429, 5*time.Second, false, t0, testBackoff); w != 5*time.Second {
		t.Errorf("Retry-After 5s: wait %s", w)
	}
	for _, l := range []lane{laneDefault, laneStart} {
		if _, wait := th.admit(l, at(time.Second), testBackoff); wait != 4*time.Second {
			t.Errorf("lane %d during Retry-After waits %s, want 4s", l, wait)
		}
	}
	if _, wait := th.admit(laneFree, at(time.Second), testBackoff); wait != 0 {
		t.Errorf("a delete waits %s behind the Retry-After", wait)
	}
	// After it: no probe (Retry-After is the server's exact word).
	if tk, wait := th.admit(laneDefault, at(5*time.Second), testBackoff); wait != 0 || tk.probes[0] {
		t.Errorf("after Retry-After: wait %s, probe %v", wait, tk.probes)
	}

	// A read answered 429 without Retry-After: backoff on the all gate,
	// which holds starts back too.
	tk, _ = th.admit(laneDefault, at(6*time.Second), testBackoff)
	if w := th.settle(tk, 429, 0, false, at(6*time.Second), testBackoff); w != time.Second {
		t.Errorf("read's 429: wait %s, want 1s", w)
	}
	if _, wait := th.admit(laneStart, at(6*time.Second), testBackoff); wait != time.Second {
		t.Errorf("a start after a read's 429 waits %s, want 1s", wait)
	}
	// A delete answered 429 counts too (a round of its own), and a later
	// answer of any other status resets the backoff.
	del, _ := th.admit(laneFree, at(6*time.Second), testBackoff)
	th.settle(del, 429, 0, false, at(6*time.Second), testBackoff)
	if th.all.failures != 2 {
		t.Errorf("failures = %d, want 2", th.all.failures)
	}
	tk, _ = th.admit(laneFree, at(7*time.Second), testBackoff)
	th.settle(tk, 404, 0, true, at(7*time.Second), testBackoff)
	if th.all.failures != 0 {
		t.Errorf("failures after a 404 = %d, want 0", th.all.failures)
	}
	// A transport failure (no answer) releases a probe without changing
	// anything else.
	th.all.failures, th.all.until = 1, at(8*time.Second)
	probe, wait := th.admit(laneDefault, at(8*time.Second), testBackoff)
	if wait != 0 || !probe.probes[0] {
		t.Fatalf("probe: %s %v", wait, probe.probes)
	}
	th.settle(probe, 0, 0, false, at(9*time.Second), testBackoff)
	if th.all.probing || th.all.failures != 1 {
		t.Errorf("after a failed probe: probing %v, failures %d", th.all.probing, th.all.failures)
	}
}
