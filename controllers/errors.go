package controllers

// How a reconcile error is reported and retried. This is the one place that
// turns errors (internal/vercel's typed errors, a missing Secret, anything
// else) into the condition reasons of api/v1alpha1.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	// retryAfter, when set, is the delay Vercel asked for (429 with
	// Retry-After).
	retryAfter time.Duration
	// message, when set, replaces the error's text in Synced, lastError and
	// the event: one stable sentence for errors whose text varies from
	// attempt to attempt but mean the same, so that retries do not rewrite
	// lastError and emit an event each time.
	message string
	// notReady errors also set Ready=False: nothing about the object can be
	// known or done until an operator fixes the manager's configuration.
	notReady bool
	// blocksStart errors set Ready=False while Ready is not True: an object
	// waiting for them says so in Ready, one that runs stays Ready (a
	// running session keeps what it was given).
	blocksStart bool
}

// text is what the outcome of err reports.
func (c errorClass) text(err error) string {
	if c.message != "" {
		return c.message
	}
	return err.Error()
}

// classify maps an error from a reconcile to its condition reason and retry
// behaviour. The most specific classification wins (a 410
// snapshot_not_found is SnapshotNotFound, not Gone). Errors that are not
// Vercel's are retried with backoff.
func classify(err error) errorClass {
	if c, ok := classifyLocal(err); ok {
		return c
	}
	return classifyVercel(err)
}

// classifyLocal classifies the errors the manager raises itself, before
// Vercel is asked: a SandboxClass that refuses the object (or cannot be
// used), a Secret it may not or cannot read.
func classifyLocal(err error) (errorClass, bool) {
	var se *secretError
	var ce *classError
	var pe *policyError
	switch {
	case errors.As(err, &ce):
		return errorClass{reason: ce.reason, message: ce.message, notReady: true}, true
	case errors.As(err, &pe):
		return errorClass{reason: sandboxv1.ReasonNetworkPolicyInvalid, terminal: true, blocksStart: true}, true
	case errors.As(err, &se) && se.missing == "":
		return errorClass{reason: sandboxv1.ReasonSecretRefused}, true
	case errors.As(err, &se) && se.missing == "key":
		return errorClass{reason: sandboxv1.ReasonSecretKeyNotFound, blocksStart: true}, true
	case errors.As(err, &se):
		return errorClass{reason: sandboxv1.ReasonSecretNotFound, blocksStart: true}, true
	}
	return errorClass{}, false
}

// classifyVercel classifies Vercel's answers, the most specific first.
func classifyVercel(err error) errorClass {
	switch {
	case vercel.IsRateLimited(err):
		// A server 429 and the client's own client_throttled alternate
		// while a credential is throttled: one message for both.
		c := errorClass{reason: sandboxv1.ReasonRateLimited,
			message: "Vercel is rate limiting the manager's credential (429 Too Many Requests); retrying with backoff"}
		// Requeue after Vercel's Retry-After, else after the client's
		// credential backoff (exponential, jittered, shared by every caller
		// of the credential, and cut short when a delete frees capacity).
		// With neither, the error is returned, so the object gets the
		// workqueue's per-object exponential backoff: a requeue with a nil
		// error would reset it to its first step every time.
		c.retryAfter = vercel.RetryAfter(err)
		return c
	case vercel.IsTransient(err):
		return errorClass{reason: sandboxv1.ReasonTransient}
	case vercel.IsUnauthorized(err):
		return errorClass{reason: sandboxv1.ReasonUnauthorized, message: credentialsRejected(err), notReady: true}
	case vercel.IsProjectNotFound(err):
		return errorClass{reason: sandboxv1.ReasonProjectNotFound, message: err.Error(), notReady: true}
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

// credentialsRejected says that Vercel refused the credentials, with the
// HTTP status (Unauthorized, Forbidden) and Vercel's own words, which
// internal/vercel has scrubbed of the token.
func credentialsRejected(err error) string {
	var ce *classCredentialsError
	if errors.As(err, &ce) {
		return credentialsRejectedBy(err) + fmt.Sprintf("; check the token and the team id in the Secret of SandboxClass %q", ce.class)
	}
	return credentialsRejectedBy(err) + "; check the token (--vercel-token-file) and the team id (--vercel-team-id)"
}

// credentialsRejectedBy says that Vercel refused the credentials, with the
// HTTP status and Vercel's own words.
func credentialsRejectedBy(err error) string {
	var ae *vercel.APIError
	if !errors.As(err, &ae) {
		return "Vercel rejected the credentials"
	}
	msg := fmt.Sprintf("Vercel rejected the credentials (%d %s)", ae.Status, http.StatusText(ae.Status))
	if ae.Message != "" {
		msg += ": " + ae.Message
	}
	return msg
}

// classCredentialsError is an error of a reconcile that used a
// SandboxClass's client, so its Unauthorized message names the class.
type classCredentialsError struct {
	class string
	err   error
}

func (e *classCredentialsError) Error() string { return e.err.Error() }
func (e *classCredentialsError) Unwrap() error { return e.err }

// inClass marks err as an error of a reconcile of class name ("" for none).
func inClass(ctx context.Context, err error) error {
	if name := classNameIn(ctx); err != nil && name != "" && vercel.IsUnauthorized(err) {
		return &classCredentialsError{class: name, err: err}
	}
	return err
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
	field     string // what needs it ("the environment variable X (spec.env)"), when known
}

func (e *secretError) Error() string {
	if e.refused != "" {
		return fmt.Sprintf("Secret %q is refused: %s", e.name, e.refused)
	}
	msg := fmt.Sprintf("Secret %q not found", e.name)
	if e.missing == "key" {
		msg = fmt.Sprintf("key %q not found in Secret %q", e.key, e.name)
	}
	if e.field != "" {
		msg += "; " + e.field + " needs it"
	}
	return msg
}
