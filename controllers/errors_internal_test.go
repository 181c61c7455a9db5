package controllers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Every error a reconcile can meet maps to one api/v1alpha1 reason and one
// retry behaviour, wrapped or not.
func TestClassify(t *testing.T) {
	api := func(status int, code, msg string) error {
		return &vercel.APIError{Status: status, Code: code, Message: msg, Endpoint: "getSandbox"}
	}
	for _, tc := range []struct {
		name       string
		err        error
		reason     string
		terminal   bool
		retryAfter time.Duration
	}{
		{"missing Secret", &secretError{name: "creds", missing: "secret"}, sandboxv1.ReasonSecretNotFound, false, 0},
		{"missing key", &secretError{name: "creds", key: "token", missing: "key"}, sandboxv1.ReasonSecretKeyNotFound, false, 0},
		{"refused Secret", &secretError{name: "sa-token", refused: "a ServiceAccount token"}, sandboxv1.ReasonSecretRefused, false, 0},
		{"429 with Retry-After", &vercel.APIError{Status: http.StatusTooManyRequests, RetryAfter: 7 * time.Second}, sandboxv1.ReasonRateLimited, false, 7 * time.Second},
		// Without any delay the error is returned: per-object exponential
		// backoff, not a requeue after a second that resets it.
		{"429 without any delay", api(http.StatusTooManyRequests, "rate_limited", ""), sandboxv1.ReasonRateLimited, false, 0},
		{"429 with the client's backoff", &vercel.APIError{Status: http.StatusTooManyRequests, Code: "concurrency_limit_exceeded", Backoff: 3 * time.Second}, sandboxv1.ReasonRateLimited, false, 3 * time.Second},
		{"client_throttled", &vercel.APIError{Status: http.StatusTooManyRequests, Code: vercel.CodeClientThrottled, Backoff: 3 * time.Second}, sandboxv1.ReasonRateLimited, false, 3 * time.Second},
		{"project not found", &vercel.ProjectNotFoundError{TeamID: "team_1", ProjectID: "prj_typo", Message: "Project not found."}, sandboxv1.ReasonProjectNotFound, false, 0},
		{"500", api(http.StatusInternalServerError, "", "boom"), sandboxv1.ReasonTransient, false, 0},
		{"no answer", &vercel.TransientError{Endpoint: "getSandbox", Err: errors.New("connection refused")}, sandboxv1.ReasonTransient, false, 0},
		{"stream ended early", &vercel.StreamError{Code: vercel.CodeStreamEndedEarly}, sandboxv1.ReasonTransient, false, 0},
		{"401", api(http.StatusUnauthorized, "", ""), sandboxv1.ReasonUnauthorized, false, 0},
		{"403", api(http.StatusForbidden, vercel.CodeForbidden, ""), sandboxv1.ReasonUnauthorized, false, 0},
		{"402", api(http.StatusPaymentRequired, "", ""), sandboxv1.ReasonPaymentRequired, false, 0},
		{"400", api(http.StatusBadRequest, vercel.CodeBadRequest, "vcpus too high"), sandboxv1.ReasonInvalid, true, 0},
		{"422", api(http.StatusUnprocessableEntity, vercel.CodeSandboxTimeoutInvalid, ""), sandboxv1.ReasonInvalid, true, 0},
		{"410 snapshot_not_found", api(http.StatusGone, vercel.CodeSnapshotNotFound, ""), sandboxv1.ReasonSnapshotNotFound, false, 0},
		{"410 sandbox_stopped", api(http.StatusGone, vercel.CodeSandboxStopped, ""), sandboxv1.ReasonGone, false, 0},
		{"410 bare", api(http.StatusGone, "gone", ""), sandboxv1.ReasonGone, false, 0},
		{"stream: session stopped", &vercel.StreamError{Code: vercel.CodeSandboxStopped}, sandboxv1.ReasonGone, false, 0},
		{"stream closed", &vercel.StreamError{Code: vercel.CodeSandboxStreamClosed}, sandboxv1.ReasonGone, false, 0},
		{"422 stopping", api(http.StatusUnprocessableEntity, vercel.CodeSandboxStopping, ""), sandboxv1.ReasonStopping, false, 0},
		{"422 snapshotting", api(http.StatusUnprocessableEntity, vercel.CodeSandboxSnapshotting, ""), sandboxv1.ReasonStopping, false, 0},
		{"404", api(http.StatusNotFound, vercel.CodeNotFound, ""), sandboxv1.ReasonNotFound, false, 0},
		{"409", api(http.StatusConflict, "", ""), sandboxv1.ReasonConflict, false, 0},
		{"400 name taken", api(http.StatusBadRequest, vercel.CodeBadRequest, "A sandbox with this name already exists"), sandboxv1.ReasonConflict, false, 0},
		{"other stream error", &vercel.StreamError{Code: "weird"}, sandboxv1.ReasonReconcileError, false, 0},
		{"protocol error", &vercel.ProtocolError{Endpoint: "getSandbox", Message: "not JSON"}, sandboxv1.ReasonReconcileError, false, 0},
		{"Kubernetes API refusal", apierrors.NewForbidden(schema.GroupResource{Resource: "sandboxes"}, "x", errors.New("exceeded quota")), sandboxv1.ReasonReconcileError, false, 0},
		{"plain error", errors.New("boom"), sandboxv1.ReasonReconcileError, false, 0},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("get sandbox x: %w", tc.err), redact(fmt.Errorf("create sandbox x: %w", tc.err), []string{"secret-value"})} {
			got := classify(err)
			if got.reason != tc.reason || got.terminal != tc.terminal || got.retryAfter != tc.retryAfter {
				t.Errorf("%s: classify(%v) = %+v, want reason %s, terminal %v, retryAfter %s", tc.name, err, got, tc.reason, tc.terminal, tc.retryAfter)
			}
		}
	}
}

// Whatever the endpoint or the server's words, a rejected credential reads
// "Vercel rejected the credentials" with the HTTP reason, and never the
// token; a 429 from Vercel and the client's own client_throttled read alike.
func TestClassifyMessages(t *testing.T) {
	for status, phrase := range map[int]string{http.StatusUnauthorized: "(401 Unauthorized)", http.StatusForbidden: "(403 Forbidden)"} {
		err := fmt.Errorf("delete sandbox x: %w", &vercel.APIError{Status: status, Code: "forbidden", Message: "Not authorized", Endpoint: "deleteSandbox"})
		c := classify(err)
		msg := c.text(err)
		if !strings.HasPrefix(msg, "Vercel rejected the credentials "+phrase) || !strings.Contains(msg, "Not authorized") || !c.notReady {
			t.Errorf("%d: %+v, message %q", status, c, msg)
		}
	}
	server := &vercel.APIError{Status: http.StatusTooManyRequests, Code: "concurrency_limit_exceeded", Message: "Concurrency limit exceeded", Endpoint: "createSandbox", Backoff: time.Second}
	client := &vercel.APIError{Status: http.StatusTooManyRequests, Code: vercel.CodeClientThrottled, Message: "not sent", Endpoint: "getSandbox", Backoff: 2 * time.Second}
	if a, b := classify(server).text(server), classify(client).text(client); a != b {
		t.Errorf("rate-limit messages differ: %q, %q", a, b)
	}
}
