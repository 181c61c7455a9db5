package controllers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
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

// A missing Secret or key sets Ready=False, naming the Secret, the key and
// what needs it, while the object waits to start; a Sandbox already Ready
// stays Ready (its session keeps the values it was given).
func TestReportOutcomeMissingSecretBlocksStart(t *testing.T) {
	missing := neededBy(&secretError{name: "db", key: "password", missing: "key"}, "the environment variable DB_PASSWORD (spec.env)")
	waiting := &sandboxv1.Sandbox{}
	setReady(waiting, readiness{sandboxv1.SandboxCreating, "False", sandboxv1.ReasonCreating, "Creating the Vercel sandbox"})
	if _, err := reportOutcome(events.NewFakeRecorder(10), waiting, ctrl.Result{}, missing); err == nil {
		t.Fatal("the error was swallowed")
	}
	ready := meta.FindStatusCondition(waiting.Status.Conditions, sandboxv1.ConditionReady)
	want := `key "password" not found in Secret "db"; the environment variable DB_PASSWORD (spec.env) needs it`
	if ready == nil || ready.Status != "False" || ready.Reason != sandboxv1.ReasonSecretKeyNotFound || ready.Message != want {
		t.Errorf("Ready of a Sandbox waiting for a Secret key: %+v, want False %s %q", ready, sandboxv1.ReasonSecretKeyNotFound, want)
	}

	running := &sandboxv1.Sandbox{}
	setReady(running, readiness{sandboxv1.SandboxRunning, "True", sandboxv1.ReasonRunning, "running"})
	if _, err := reportOutcome(events.NewFakeRecorder(10), running, ctrl.Result{}, &secretError{name: "db", missing: "secret"}); err == nil {
		t.Fatal("the error was swallowed")
	}
	if !meta.IsStatusConditionTrue(running.Status.Conditions, sandboxv1.ConditionReady) {
		t.Errorf("a running Sandbox whose Secret went lost Ready: %+v", meta.FindStatusCondition(running.Status.Conditions, sandboxv1.ConditionReady))
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

// While a credential is throttled, a reconcile meets Vercel's 429 or the
// client's own client_throttled in turn: lastError and the event are written
// once. Each is retried after the delay it carries; a 429 without any is
// returned as an error, so the workqueue backs the object off.
func TestReportOutcomeRateLimitedDoesNotChurn(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	sbx := &sandboxv1.Sandbox{}
	sbx.Generation = 1
	server := &vercel.APIError{Status: http.StatusTooManyRequests, Code: "concurrency_limit_exceeded", Message: "Concurrency limit exceeded", Endpoint: "createSandbox", Backoff: time.Second}
	client := &vercel.APIError{Status: http.StatusTooManyRequests, Code: vercel.CodeClientThrottled, Message: "not sent", Endpoint: "createSandbox", Backoff: 2 * time.Second}
	bare := &vercel.APIError{Status: http.StatusTooManyRequests, Code: "rate_limited", Endpoint: "getSandbox"}
	var first *sandboxv1.ErrorStatus
	for i, err := range []*vercel.APIError{server, client, server, client, bare} {
		res, rerr := reportOutcome(rec, sbx, ctrl.Result{}, fmt.Errorf("create sandbox x: %w", err))
		if err == bare {
			if rerr == nil || res.RequeueAfter != 0 {
				t.Errorf("429 without a delay: result %+v, error %v; want the error returned for per-object backoff", res, rerr)
			}
		} else if rerr != nil || res.RequeueAfter != err.Backoff {
			t.Errorf("attempt %d: result %+v, error %v; want a requeue after %s", i, res, rerr, err.Backoff)
		}
		if first == nil {
			first = sbx.Status.LastError
		} else if sbx.Status.LastError != first {
			t.Errorf("attempt %d rewrote lastError: %+v", i, sbx.Status.LastError)
		}
	}
	if n := len(rec.Events); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
}

// A rejected credential turns Ready False too, with the same words.
func TestReportOutcomeCredentialsRejected(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	sbx := &sandboxv1.Sandbox{}
	if _, err := reportOutcome(rec, sbx, ctrl.Result{}, &vercel.APIError{Status: http.StatusUnauthorized, Endpoint: "getSandbox"}); err == nil {
		t.Fatal("the error was swallowed")
	}
	for _, typ := range []string{sandboxv1.ConditionReady, sandboxv1.ConditionSynced} {
		c := meta.FindStatusCondition(sbx.Status.Conditions, typ)
		if c == nil || c.Status != "False" || c.Reason != sandboxv1.ReasonUnauthorized || !strings.HasPrefix(c.Message, "Vercel rejected the credentials (401 Unauthorized)") {
			t.Errorf("%s: %+v", typ, c)
		}
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning Unauthorized Vercel rejected the credentials (401 Unauthorized)") {
		t.Errorf("event %q", ev)
	}
}
