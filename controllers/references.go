package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// DefaultReferenceDeadline is how long an object waits for a reference that
// cannot be resolved (a snapshotRef or baseSnapshotRef to nothing, a cycle of
// baseSnapshotRefs, a Failed SandboxSnapshot) before it is Failed; the
// manager's --reference-deadline flag.
const DefaultReferenceDeadline = 10 * time.Minute

// unresolvedRef is why a reference cannot be resolved now: the ResolvedRefs
// reason and a sentence naming the reference.
type unresolvedRef struct {
	reason, why string
}

// refWait is where an object with an unresolved reference stands.
type refWait struct {
	// failed: the reference stayed unresolved past the deadline.
	failed bool
	// message for Ready (and the Warning event when failed).
	message string
	// retry is when to look again while not failed.
	retry time.Duration
}

// markUnresolved records ResolvedRefs=False with ref's reason. The deadline
// counts from when the condition turned False, not from the object's
// creation, so a reference that goes missing later (its SandboxSnapshot
// deleted while this object waited for it to build) gets the full deadline;
// a reason change (missing, then part of a cycle) keeps the clock running.
func markUnresolved(conds *[]metav1.Condition, generation int64, ref unresolvedRef, now time.Time, deadline time.Duration) refWait {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               sandboxv1.ConditionResolvedRefs,
		Status:             metav1.ConditionFalse,
		Reason:             ref.reason,
		Message:            ref.why,
		ObservedGeneration: generation,
		// Used only when the status changes: the start of the wait.
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
	})
	since := meta.FindStatusCondition(*conds, sandboxv1.ConditionResolvedRefs).LastTransitionTime.Time
	failAt := since.Add(deadline)
	if !now.Before(failAt) {
		return refWait{failed: true, message: fmt.Sprintf("%s, for longer than %s (the manager's --reference-deadline)", ref.why, deadline)}
	}
	return refWait{
		message: fmt.Sprintf("%s; it fails at %s unless that changes", ref.why, failAt.UTC().Format(time.RFC3339)),
		retry:   max(failAt.Sub(now)+time.Second, time.Second),
	}
}

// markResolved records ResolvedRefs=True.
func markResolved(conds *[]metav1.Condition, generation int64, what string) {
	setCondition(conds, generation, sandboxv1.ConditionResolvedRefs, metav1.ConditionTrue, sandboxv1.ReasonResolved, what)
}

// failedOnRef reports whether an object in phase Failed failed for an
// unresolved reference: that is final, as the reference is immutable.
func failedOnRef(conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, sandboxv1.ConditionReady)
	r := meta.FindStatusCondition(conds, sandboxv1.ConditionResolvedRefs)
	return c != nil && r != nil && r.Status == metav1.ConditionFalse && c.Reason == r.Reason
}

func referenceDeadline(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return DefaultReferenceDeadline
}
