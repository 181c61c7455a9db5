package controllers

// How a reconcile error is reported and retried. This is the one place that
// turns errors (internal/vercel's typed errors, a missing Secret, anything
// else) into the condition reasons of api/v1alpha1.

import (
	"errors"
	"fmt"
	"time"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// errorClass is how a reconcile error is reported and retried.
type errorClass struct {
	// reason is the Synced=False condition reason, also the Warning event's
	// and lastError's.
	reason string
	// terminal errors are not retried until the spec changes.
	terminal bool
	// retryAfter, when set, is the delay Vercel asked for (429).
	retryAfter time.Duration
}

// classify maps an error from a reconcile to its condition reason and retry
// behaviour. The most specific classification wins (a 410
// snapshot_not_found is SnapshotNotFound, not Gone). Errors that are not
// Vercel's are retried with backoff.
func classify(err error) errorClass {
	var se *secretError
	switch {
	case errors.As(err, &se) && se.missing == "":
		return errorClass{reason: sandboxv1.ReasonSecretRefused}
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
	case vercel.IsSnapshotNotFound(err):
		return errorClass{reason: sandboxv1.ReasonSnapshotNotFound}
	case vercel.IsGone(err), vercel.IsSessionStopped(err), isStreamCode(err, vercel.CodeSandboxStreamClosed):
		return errorClass{reason: sandboxv1.ReasonGone}
	case vercel.IsStopping(err), vercel.IsSnapshotting(err):
		// Both end in a stopped session; the reconcile after it resumes.
		return errorClass{reason: sandboxv1.ReasonStopping}
	case vercel.IsNotFound(err):
		return errorClass{reason: sandboxv1.ReasonNotFound}
	case vercel.IsConflict(err):
		return errorClass{reason: sandboxv1.ReasonConflict}
	}
	return errorClass{reason: sandboxv1.ReasonReconcileError}
}

// isStreamCode reports an error carried inside a command's output stream.
func isStreamCode(err error, code string) bool {
	var se *vercel.StreamError
	return errors.As(err, &se) && se.Code == code
}

// secretError reports a missing Secret or key, or a Secret that is refused.
// Its message names the Secret and key, never a value.
type secretError struct {
	name, key string
	missing   string // "secret" or "key"; empty when refused
	refused   string // why the Secret is refused
}

func (e *secretError) Error() string {
	if e.refused != "" {
		return fmt.Sprintf("Secret %q is refused: %s", e.name, e.refused)
	}
	if e.missing == "key" {
		return fmt.Sprintf("key %q not found in Secret %q", e.key, e.name)
	}
	return fmt.Sprintf("Secret %q not found", e.name)
}
