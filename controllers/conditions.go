package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func hasCondition(conds []metav1.Condition, typ, reason string) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Reason == reason
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// msTimeOf is a Vercel ms timestamp second-truncated like status; zero for 0.
func msTimeOf(ms int64) time.Time {
	if t := msTime(ms); t != nil {
		return t.Time
	}
	return time.Time{}
}

// readyMessage is an object's Ready condition as a message quotes it (why a
// source or a base is not ready).
func readyMessage(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, sandboxv1.ConditionReady); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "not observed yet"
}
