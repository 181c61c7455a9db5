package controllers

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// A long error fits the status field's 4096-character limit, and the same
// error reported again emits no second event.
func TestReportOutcomeLongErrorOnce(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	sbx := &sandboxv1.Sandbox{}
	long := errors.New(strings.Repeat("x", 10_000))
	for range 2 {
		if _, err := reportOutcome(rec, sbx, 1, &sbx.Status.Conditions, &sbx.Status.LastError, ctrl.Result{}, long); err == nil {
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

	if _, err := reportOutcome(rec, sbx, 2, &sbx.Status.Conditions, &sbx.Status.LastError, ctrl.Result{}, nil); err != nil {
		t.Fatal(err)
	}
	if sbx.Status.LastError != nil || !meta.IsStatusConditionTrue(sbx.Status.Conditions, sandboxv1.ConditionSynced) {
		t.Errorf("success left lastError %v, Synced %v", sbx.Status.LastError, meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSynced))
	}
}
