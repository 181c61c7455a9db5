//go:build !race

package controllers

// TestSimulatedHourRequestBudget runs without -race (make test runs it in
// test-packages-norace): it is one goroutine driving the reconciler, the
// fake client and the emulator's handlers one request at a time, so the
// race detector has nothing to watch, and under it the test took 75 s of a
// core instead of 10 (the fake client's JSON round trips). The other
// simulations, short, stay in sandbox_lifecycle_sim_test.go.

import (
	"testing"
	"time"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// TestSimulatedHourRequestBudget: 100 running Sandboxes with a 5-minute idle
// window whose clients heartbeat every 30 s, on a plan whose sessions last at
// most 45 minutes. The budget the issue sets: at most one poll per Sandbox per
// interval, plus the extensions the heartbeats require (one per idle window
// minus the extension margin, not one per heartbeat); the plan maximum ends
// each session (MaxSessionLength) without a refused extension, and a heartbeat
// wakes it.
func TestSimulatedHourRequestBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates an hour of 100 sandboxes")
	}
	sim := newSimulation(t, 100, 5*time.Minute, 45*time.Minute)
	sim.run(time.Hour, 30*time.Second)

	margin := extendMargin(sim.idle)
	resumes := sim.events.get("Normal Resumed")
	polls := sim.requests["getSandbox"] - resumes
	extends := sim.requests["extendTimeout"]
	intervals := int(time.Hour / sim.poll)
	t.Logf("simulated 1h: %d sandboxes, %d heartbeats; Vercel requests: %d polls (%.2f per sandbox per %s interval), %d extensions (%.1f per sandbox), %d resumes, %d creates; by endpoint and status: %v",
		sim.n, sim.heartbeats, polls, float64(polls)/float64(sim.n*intervals), sim.poll, extends, float64(extends)/float64(sim.n), resumes, sim.requests["createSandbox"], sim.requests)

	// One poll per interval, plus one look after each session's deadline.
	if limit := sim.n * (intervals + 2); polls > limit {
		t.Errorf("polls = %d, want at most %d (one per sandbox per interval, plus one look at each session's end)", polls, limit)
	}
	if polls < sim.n*intervals*3/4 {
		t.Errorf("polls = %d: running sandboxes must still be observed about once per interval", polls)
	}
	if limit := sim.n * (int(time.Hour/(sim.idle-margin)) + 2); extends > limit {
		t.Errorf("extensions = %d, want at most %d (one per idle window minus margin)", extends, limit)
	}
	if extends > sim.heartbeats/5 {
		t.Errorf("extensions = %d for %d heartbeats: heartbeats must be folded into few extensions", extends, sim.heartbeats)
	}
	for key, n := range sim.requests {
		if key == "extendTimeout 400" || key == "getSandbox 410" {
			t.Errorf("%d requests answered %s", n, key)
		}
	}
	if n := sim.events.get("Warning " + sandboxv1.ReasonMaxSessionLength); n > 0 {
		t.Errorf("%d extensions were refused at the plan maximum", n)
	}
	// Every first session reached the plan maximum, was reported, and a
	// heartbeat then resumed the sandbox in a second session.
	if n := sim.events.get("Normal " + sandboxv1.ReasonMaxSessionLength); n != sim.n {
		t.Errorf("MaxSessionLength events = %d, want %d; events %v", n, sim.n, sim.events.counts)
	}
	if n := sim.events.get("Normal " + sandboxv1.ReasonIdleTimeout); n != 0 {
		t.Errorf("IdleTimeout events = %d, want 0 (heartbeats kept every session busy)", n)
	}
	if resumes != sim.n {
		t.Errorf("resumes = %d, want %d", resumes, sim.n)
	}
	sessions := sim.sessions()
	for _, sbx := range sim.sandboxes() {
		if sbx.Status.Phase != sandboxv1.SandboxRunning || sbx.Status.ExpiresAt == nil {
			t.Errorf("%s: phase %s, expiresAt %v; want Running with a deadline", sbx.Name, sbx.Status.Phase, sbx.Status.ExpiresAt)
			continue
		}
		if got := sessions[sbx.Status.VercelName]; got != 2 {
			t.Errorf("%s: %d sessions, want 2", sbx.Name, got)
		}
		if left := sbx.Status.ExpiresAt.Sub(sim.clk.Now()); left <= 0 || left > sim.idle+time.Second {
			t.Errorf("%s: deadline %s away, want within one idle window", sbx.Name, left)
		}
	}
}
