package controllers

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
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

// errorClass is how a reconcile error is reported and retried.
type errorClass struct {
	// reason is the CamelCase condition and event reason.
	reason string
	// terminal errors are not retried until the spec changes.
	terminal bool
	// retryAfter, when set, is the delay Vercel asked for (429).
	retryAfter time.Duration
}

// classify maps an error from a reconcile to its condition reason and retry
// behaviour. Errors that are not from Vercel are retried with backoff.
func classify(err error) errorClass {
	var se *secretError
	switch {
	case errors.As(err, &se):
		return errorClass{reason: sandboxv1.ReasonSecretNotFound}
	case vercel.IsRateLimited(err):
		d := vercel.RetryAfter(err)
		if d <= 0 {
			d = time.Second
		}
		return errorClass{reason: sandboxv1.ReasonRateLimited, retryAfter: d}
	case vercel.IsTransient(err):
		return errorClass{reason: sandboxv1.ReasonTransient}
	case vercel.IsUnauthorized(err):
		return errorClass{reason: sandboxv1.ReasonUnauthorized}
	case vercel.IsPaymentRequired(err):
		return errorClass{reason: sandboxv1.ReasonPaymentRequired}
	case vercel.IsInvalid(err):
		return errorClass{reason: sandboxv1.ReasonInvalid, terminal: true}
	}
	if r := vercel.Reason(err); r != "" && r != "Unknown" {
		return errorClass{reason: r}
	}
	return errorClass{reason: "ReconcileError"}
}

// secretError reports a missing Secret or key. Its message names the Secret
// and key, never a value.
type secretError struct {
	name, key string
	missing   string // "secret" or "key"
}

func (e *secretError) Error() string {
	if e.missing == "key" {
		return fmt.Sprintf("key %q not found in Secret %q", e.key, e.name)
	}
	return fmt.Sprintf("Secret %q not found", e.name)
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
