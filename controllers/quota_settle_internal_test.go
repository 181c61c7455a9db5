package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// What a Sandbox holds after its reconcile, and whether that frees capacity
// for the waiters.
func TestSettledHolding(t *testing.T) {
	running := holding{uid: "u1", remote: true, running: true, vcpus: 2}
	sbx := func(uid string, session string, phase sandboxv1.SandboxPhase, deleting bool) *sandboxv1.Sandbox {
		s := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}}
		s.Status.SessionID, s.Status.Phase, s.Status.SessionVCPUs = session, phase, 2
		if deleting {
			now := metav1.Now()
			s.DeletionTimestamp = &now
		}
		return s
	}
	tests := []struct {
		name            string
		old             holding
		had             bool
		sbx             *sandboxv1.Sandbox
		want            holding
		holds, releases bool
	}{
		{"gone", running, true, nil, holding{}, false, true},
		{"never held, still nothing", holding{}, false, sbx("u1", "", sandboxv1.SandboxPending, false), holding{}, false, false},
		{"runs on", running, true, sbx("u1", "s1", sandboxv1.SandboxRunning, false), running, true, false},
		{"stopped: keeps its Vercel sandbox, frees its session", running, true, sbx("u1", "s1", sandboxv1.SandboxStopped, false),
			holding{uid: "u1", remote: true, vcpus: 2}, true, true},
		{"deleted before its create was answered runs until the finalizer is done", running, true, sbx("u1", "", sandboxv1.SandboxPending, true),
			running, true, false},
		{"a new object of the same name, not created yet", running, true, sbx("u2", "", sandboxv1.SandboxPending, true),
			holding{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, holds := settledHolding(tt.old, tt.had, tt.sbx)
			if h != tt.want || holds != tt.holds {
				t.Errorf("settledHolding = %+v, %v; want %+v, %v", h, holds, tt.want, tt.holds)
			}
			if got := releases(tt.old, tt.had, h, holds); got != tt.releases {
				t.Errorf("releases = %v, want %v", got, tt.releases)
			}
		})
	}
}

// A Sandbox stops waiting once it no longer says it waits, or is gone.
func TestStopWaiting(t *testing.T) {
	waiting := &sandboxv1.Sandbox{}
	setCondition(&waiting.Status.Conditions, 1, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonQuotaExceeded, "waits")
	started := &sandboxv1.Sandbox{}
	setCondition(&started.Status.Conditions, 1, sandboxv1.ConditionReady, metav1.ConditionTrue, sandboxv1.ReasonRunning, "runs")
	tests := []struct {
		name    string
		waiter  bool
		sbx     *sandboxv1.Sandbox
		stopped bool
	}{
		{"not a waiter", false, started, false},
		{"still waits", true, waiting, false},
		{"started", true, started, true},
		{"gone", true, nil, true},
	}
	for _, tt := range tests {
		n := &nsLedger{waiters: map[string]waiter{}}
		if tt.waiter {
			n.waiters["a"] = waiter{name: "a"}
		}
		if got := n.stopWaiting("a", tt.sbx); got != tt.stopped {
			t.Errorf("%s: stopWaiting = %v, want %v", tt.name, got, tt.stopped)
		}
		if _, still := n.waiters["a"]; still == tt.stopped && tt.waiter {
			t.Errorf("%s: waiter kept = %v", tt.name, still)
		}
	}
}
