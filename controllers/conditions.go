package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// setCondition sets a condition stamped with the object's generation. The
// transition time changes only when the status does, so an unchanged
// condition never causes a status write.
func setCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            truncate(message, 32*1024),
		ObservedGeneration: generation,
	})
}

// reportOutcome records how a reconcile ended on the object's status: the
// Synced condition, and lastErr with a Warning event when the error is new. It
// turns the error into the retry that fits it: the wait Vercel asked for after
// a 429, none for a spec Vercel refuses until the spec changes, backoff
// otherwise.
func reportOutcome(rec events.EventRecorder, obj runtime.Object, generation int64, conds *[]metav1.Condition, lastErr **sandboxv1.ErrorStatus, res ctrl.Result, err error) (ctrl.Result, error) {
	if err == nil {
		setCondition(conds, generation, sandboxv1.ConditionSynced, metav1.ConditionTrue, sandboxv1.ReasonReconciled, "")
		*lastErr = nil
		return res, nil
	}
	class := classify(err)
	msg := err.Error()
	setCondition(conds, generation, sandboxv1.ConditionSynced, metav1.ConditionFalse, class.reason, msg)
	if prev := *lastErr; prev == nil || prev.Reason != class.reason || prev.Message != truncate(msg, maxErrorMessage) {
		*lastErr = &sandboxv1.ErrorStatus{Time: metav1.Now(), Reason: class.reason, Message: truncate(msg, maxErrorMessage)}
		rec.Eventf(obj, nil, corev1.EventTypeWarning, class.reason, "Reconcile", "%s", truncate(msg, maxEventNote))
	}
	switch {
	case class.retryAfter > 0:
		return ctrl.Result{RequeueAfter: class.retryAfter}, nil
	case class.terminal:
		return res, reconcile.TerminalError(err)
	}
	return res, err
}

// Bounds on error text copied into status and events: a Vercel message or
// command output can be long, and an event note over 1 KiB is refused.
const (
	maxErrorMessage = 4096
	maxEventNote    = 1024
)

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// msTime converts a Vercel millisecond timestamp to the second precision that
// status round-trips with, so an unchanged remote time never looks changed.
func msTime(ms int64) *metav1.Time {
	if ms <= 0 {
		return nil
	}
	t := metav1.NewTime(time.UnixMilli(ms).Truncate(time.Second).UTC())
	return &t
}
