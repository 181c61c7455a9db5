package controllers

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

var notifyT0 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func sandboxIn(phase sandboxv1.SandboxPhase, ready metav1.ConditionStatus, at metav1.Time) *sandboxv1.Sandbox {
	s := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"}}
	s.Status.Phase = phase
	s.Status.Conditions = []metav1.Condition{{Type: sandboxv1.ConditionReady, Status: ready, Reason: "R", LastTransitionTime: at}}
	return s
}

func eventTypes(evs []notifyEventView) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

type notifyEventView struct{ Type, ID, Source string }

func fired(before, after client.Object) []notifyEventView {
	var out []notifyEventView
	for _, e := range transitions(before, after, time.Now()) {
		out = append(out, notifyEventView{e.Type, e.ID, e.Source})
	}
	return out
}

func TestTransitions(t *testing.T) {
	t1 := metav1.NewTime(notifyT0.Add(time.Minute))
	snap := func(p sandboxv1.SandboxSnapshotPhase) *sandboxv1.SandboxSnapshot {
		s := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u2"}}
		s.Status.Phase = p
		return s
	}
	fork := func(p sandboxv1.SandboxForkPhase) *sandboxv1.SandboxFork {
		f := &sandboxv1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f", UID: "u3"}}
		f.Status.Phase = p
		return f
	}
	for _, c := range []struct {
		name          string
		before, after client.Object
		want          []string
	}{
		{"sandbox becomes Ready", sandboxIn(sandboxv1.SandboxCreating, metav1.ConditionFalse, notifyT0), sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, t1), []string{"io.sentry.sandbox.sandbox.ready"}},
		{"sandbox stays Ready", sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0), sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0), nil},
		{"sandbox goes Idle", sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0), sandboxIn(sandboxv1.SandboxIdle, metav1.ConditionFalse, t1), []string{"io.sentry.sandbox.sandbox.idle"}},
		{"sandbox stays Idle", sandboxIn(sandboxv1.SandboxIdle, metav1.ConditionFalse, notifyT0), sandboxIn(sandboxv1.SandboxIdle, metav1.ConditionFalse, notifyT0), nil},
		{"sandbox fails", sandboxIn(sandboxv1.SandboxCreating, metav1.ConditionFalse, notifyT0), sandboxIn(sandboxv1.SandboxFailed, metav1.ConditionFalse, notifyT0), []string{"io.sentry.sandbox.sandbox.failed"}},
		{"sandbox stops (not announced)", sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0), sandboxIn(sandboxv1.SandboxStopped, metav1.ConditionFalse, t1), nil},
		{"snapshot becomes Ready", snap(sandboxv1.SnapshotBuilding), snap(sandboxv1.SnapshotReady), []string{"io.sentry.sandbox.sandboxsnapshot.ready"}},
		{"snapshot stays Ready", snap(sandboxv1.SnapshotReady), snap(sandboxv1.SnapshotReady), nil},
		{"snapshot fails", snap(sandboxv1.SnapshotBuilding), snap(sandboxv1.SnapshotFailed), []string{"io.sentry.sandbox.sandboxsnapshot.failed"}},
		{"snapshot expires (not announced)", snap(sandboxv1.SnapshotReady), snap(sandboxv1.SnapshotExpired), nil},
		{"fork becomes Ready", fork(sandboxv1.ForkCreating), fork(sandboxv1.ForkReady), []string{"io.sentry.sandbox.sandboxfork.ready"}},
		{"fork fails", fork(sandboxv1.ForkPending), fork(sandboxv1.ForkFailed), []string{"io.sentry.sandbox.sandboxfork.failed"}},
	} {
		if got := eventTypes(fired(c.before, c.after)); !slices.Equal(got, c.want) {
			t.Errorf("%s: fired %v, want %v", c.name, got, c.want)
		}
	}
}

// A transition observed twice (a stale cache, a retried write) has one id; the
// next transition of the same type has another.
func TestTransitionIDsAreStablePerTransition(t *testing.T) {
	t1 := metav1.NewTime(notifyT0.Add(time.Hour))
	first := fired(sandboxIn(sandboxv1.SandboxCreating, metav1.ConditionFalse, notifyT0), sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0))
	again := fired(sandboxIn(sandboxv1.SandboxSettingUp, metav1.ConditionFalse, notifyT0), sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0))
	later := fired(sandboxIn(sandboxv1.SandboxIdle, metav1.ConditionFalse, notifyT0), sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, t1))
	if first[0].ID != again[0].ID {
		t.Errorf("one transition has two ids: %s, %s", first[0].ID, again[0].ID)
	}
	if first[0].ID == later[0].ID {
		t.Errorf("two transitions share the id %s", first[0].ID)
	}
	if first[0].Source != "/namespaces/ns/sandboxes/a" {
		t.Errorf("source %q", first[0].Source)
	}
	idle := sandboxIn(sandboxv1.SandboxIdle, metav1.ConditionFalse, notifyT0)
	idle.Status.StoppedAt = &t1
	i1 := fired(sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0), idle)
	idle2 := idle.DeepCopy()
	idle2.Status.StoppedAt = &metav1.Time{Time: t1.Add(time.Hour)}
	i2 := fired(sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0), idle2)
	if i1[0].ID == i2[0].ID {
		t.Errorf("two idle stops share the id %s", i1[0].ID)
	}
}

// The deletion of an announcing kind is announced once per object (one id
// for every retry of the finalizer's removal); a pool's is not.
func TestDeletedEvent(t *testing.T) {
	s := sandboxIn(sandboxv1.SandboxRunning, metav1.ConditionTrue, notifyT0)
	e, ok := deletedEvent(s, time.Now())
	if !ok || e.Type != "io.sentry.sandbox.sandbox.deleted" || e.Source != "/namespaces/ns/sandboxes/a" || e.Subject != "a" || e.Namespace != "ns" {
		t.Fatalf("deletedEvent(Sandbox) = %+v, %v", e, ok)
	}
	again, _ := deletedEvent(s.DeepCopy(), time.Now().Add(time.Minute))
	if again.ID != e.ID {
		t.Errorf("one deletion has two ids: %s, %s", e.ID, again.ID)
	}
	other := s.DeepCopy()
	other.UID = "u9"
	if o, _ := deletedEvent(other, time.Now()); o.ID == e.ID {
		t.Errorf("two Sandboxes' deletions share the id %s", e.ID)
	}
	snap := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u2"}}
	if e, ok := deletedEvent(snap, time.Now()); !ok || e.Type != "io.sentry.sandbox.sandboxsnapshot.deleted" {
		t.Errorf("deletedEvent(SandboxSnapshot) = %+v, %v", e, ok)
	}
	fork := &sandboxv1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f", UID: "u3"}}
	if e, ok := deletedEvent(fork, time.Now()); !ok || e.Type != "io.sentry.sandbox.sandboxfork.deleted" {
		t.Errorf("deletedEvent(SandboxFork) = %+v, %v", e, ok)
	}
	if _, ok := deletedEvent(&sandboxv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}, time.Now()); ok {
		t.Error("a SandboxPool's deletion is announced")
	}
}
