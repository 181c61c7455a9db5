package controllers

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Each kind reports an error alike: Synced=False with the classified reason,
// lastError, one Warning event; a success clears lastError.
func TestReportOutcomeEveryKind(t *testing.T) {
	for _, o := range []client.Object{&sandboxv1.Sandbox{}, &sandboxv1.SandboxSnapshot{}, &sandboxv1.SandboxFork{}} {
		rec := events.NewFakeRecorder(10)
		o.SetGeneration(3)
		if _, err := reportOutcome(rec, o, ctrl.Result{}, &secretError{name: "creds", missing: "secret"}); err == nil {
			t.Fatalf("%T: the error was swallowed", o)
		}
		st := statusOf(o)
		synced := meta.FindStatusCondition(*st.conditions, sandboxv1.ConditionSynced)
		if synced == nil || synced.Status != "False" || synced.Reason != sandboxv1.ReasonSecretNotFound || synced.ObservedGeneration != 3 {
			t.Errorf("%T: Synced %+v, want False SecretNotFound at generation 3", o, synced)
		}
		if e := *st.lastError; e == nil || e.Reason != sandboxv1.ReasonSecretNotFound || e.Message != `Secret "creds" not found` {
			t.Errorf("%T: lastError %+v", o, e)
		}
		if n := len(rec.Events); n != 1 {
			t.Fatalf("%T: %d events, want 1", o, n)
		}
		if ev := <-rec.Events; ev != `Warning SecretNotFound Secret "creds" not found` {
			t.Errorf("%T: event %q", o, ev)
		}
		if _, err := reportOutcome(rec, o, ctrl.Result{}, nil); err != nil {
			t.Fatal(err)
		}
		if *st.lastError != nil || !meta.IsStatusConditionTrue(*st.conditions, sandboxv1.ConditionSynced) {
			t.Errorf("%T: success left lastError %v, Synced %v", o, *st.lastError, meta.FindStatusCondition(*st.conditions, sandboxv1.ConditionSynced))
		}
	}
}

// A long error fits the status field's 4096-character limit, and the same
// error reported again emits no second event.
func TestReportOutcomeLongErrorOnce(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	sbx := &sandboxv1.Sandbox{}
	sbx.Generation = 1
	long := errors.New(strings.Repeat("x", 10_000))
	for range 2 {
		if _, err := reportOutcome(rec, sbx, ctrl.Result{}, long); err == nil {
			t.Fatal("the error was swallowed")
		}
	}
	if got := len(sbx.Status.LastError.Message); got != maxErrorMessage {
		t.Errorf("lastError.message has %d characters, want %d", got, maxErrorMessage)
	}
	if n := len(rec.Events); n != 1 {
		t.Errorf("%d events for one repeated error, want 1", n)
	}
	if ev := <-rec.Events; len(ev) > maxEventNote+len("Warning ReconcileError ") {
		t.Errorf("event of %d characters", len(ev))
	}

	sbx.Generation = 2
	if _, err := reportOutcome(rec, sbx, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if sbx.Status.LastError != nil || !meta.IsStatusConditionTrue(sbx.Status.Conditions, sandboxv1.ConditionSynced) {
		t.Errorf("success left lastError %v, Synced %v", sbx.Status.LastError, meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSynced))
	}
}
