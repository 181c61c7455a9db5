package vercel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestErrorDecoding sends each error shape docs/dev/vercel-sandbox-api.md §7
// lists through the real client and checks the decoded fields and every
// classifier.
func TestErrorDecoding(t *testing.T) {
	type preds map[string]bool
	cases := []struct {
		name       string
		status     int
		body       string
		header     map[string]string
		wantCode   string
		wantMsg    string
		wantRetry  time.Duration
		wantReason string
		is         preds // classifiers expected true; all others must be false
	}{
		{name: "not found", status: 404, body: `{"error":{"code":"not_found","message":"Sandbox not found"}}`,
			wantCode: "not_found", wantMsg: "Sandbox not found", wantReason: "NotFound", is: preds{"NotFound": true}},
		{name: "snapshot not found", status: 410, body: `{"error":{"code":"snapshot_not_found","message":"Cannot resume sandbox: no snapshot available."}}`,
			wantCode: "snapshot_not_found", wantMsg: "Cannot resume sandbox: no snapshot available.", wantReason: "SnapshotNotFound",
			is: preds{"Gone": true, "SnapshotNotFound": true}},
		{name: "session stopped", status: 410, body: `{"error":{"code":"sandbox_stopped","message":"Sandbox is no longer available"}}`,
			wantCode: "sandbox_stopped", wantMsg: "Sandbox is no longer available", wantReason: "Gone", is: preds{"Gone": true, "SessionStopped": true}},
		{name: "bare string error", status: 410, body: `{"error":"gone"}`,
			wantCode: "gone", wantReason: "Gone", is: preds{"Gone": true}},
		{name: "stopping", status: 422, body: `{"error":{"code":"sandbox_stopping","message":"stopping"}}`,
			wantCode: "sandbox_stopping", wantMsg: "stopping", wantReason: "Stopping", is: preds{"Stopping": true}},
		{name: "snapshotting", status: 422, body: `{"error":{"code":"sandbox_snapshotting","message":"snap"}}`,
			wantCode: "sandbox_snapshotting", wantMsg: "snap", wantReason: "Stopping", is: preds{"Snapshotting": true}},
		{name: "other 422", status: 422, body: `{"error":{"code":"unprocessable","message":"no"}}`,
			wantCode: "unprocessable", wantMsg: "no", wantReason: "Invalid", is: preds{"Invalid": true}},
		{name: "validation", status: 400, body: `{"error":{"code":"bad_request","message":"Invalid request: ` + "`ports`" + ` should NOT have more than 15 items."}}`,
			wantCode: "bad_request", wantMsg: "Invalid request: `ports` should NOT have more than 15 items.", wantReason: "Invalid", is: preds{"Invalid": true}},
		{name: "timeout invalid", status: 400, body: `{"error":{"code":"sandbox_timeout_invalid","message":"too long"}}`,
			wantCode: "sandbox_timeout_invalid", wantMsg: "too long", wantReason: "Invalid", is: preds{"Invalid": true}},
		{name: "duplicate name as 400", status: 400, body: `{"error":{"code":"bad_request","message":"A sandbox with name \"x\" already exists. Use GET /sandboxes/:name to resume it."}}`,
			wantCode: "bad_request", wantMsg: `A sandbox with name "x" already exists. Use GET /sandboxes/:name to resume it.`, wantReason: "Conflict", is: preds{"Conflict": true}},
		{name: "conflict", status: 409, body: `{"error":{"code":"conflict","message":"exists"}}`,
			wantCode: "conflict", wantMsg: "exists", wantReason: "Conflict", is: preds{"Conflict": true}},
		{name: "rate limited with seconds", status: 429, body: `{"error":{"code":"rate_limited","message":"slow down","limit":{"remaining":0,"reset":1,"resetMs":1000,"total":10}}}`,
			header: map[string]string{"Retry-After": "7"}, wantCode: "rate_limited", wantMsg: "slow down", wantRetry: 7 * time.Second,
			wantReason: "RateLimited", is: preds{"RateLimited": true}},
		{name: "unauthorized empty body", status: 401, body: ``, wantReason: "Unauthorized", is: preds{"Unauthorized": true}},
		{name: "forbidden", status: 403, body: `{"error":{"code":"forbidden","message":"nope"}}`,
			wantCode: "forbidden", wantMsg: "nope", wantReason: "Unauthorized", is: preds{"Unauthorized": true}},
		{name: "payment", status: 402, body: `{"error":{"code":"payment_required","message":"pay"}}`,
			wantCode: "payment_required", wantMsg: "pay", wantReason: "PaymentRequired", is: preds{"PaymentRequired": true}},
		{name: "html 502", status: 502, body: `<html>Bad gateway</html>`,
			wantMsg: "<html>Bad gateway</html>", wantReason: "Transient", is: preds{"Transient": true}},
		{name: "500 envelope", status: 500, body: `{"error":{"code":"internal_server_error","message":"oops"}}`,
			wantCode: "internal_server_error", wantMsg: "oops", wantReason: "Transient", is: preds{"Transient": true}},
		{name: "top-level code and message", status: 400, body: `{"code":"weird","message":"flat"}`,
			wantCode: "weird", wantMsg: "flat", wantReason: "Invalid", is: preds{"Invalid": true}},
		{name: "teapot", status: 418, body: `short and stout`, wantMsg: "short and stout", wantReason: "Unknown", is: preds{}},
	}
	classifiers := map[string]func(error) bool{
		"NotFound": IsNotFound, "Gone": IsGone, "SnapshotNotFound": IsSnapshotNotFound, "SessionStopped": IsSessionStopped,
		"Stopping": IsStopping, "Snapshotting": IsSnapshotting, "Conflict": IsConflict, "RateLimited": IsRateLimited,
		"Invalid": IsInvalid, "Unauthorized": IsUnauthorized, "PaymentRequired": IsPaymentRequired, "Transient": IsTransient,
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("X-Vercel-Id", "iad1::abc")
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			})
			c, _ := newTestClient(t, f, func(cfg *Config) { cfg.MaxRetries = -1 })
			_, err := c.GetSession(context.Background(), "sbx_1")
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %T %v, want *APIError", err, err)
			}
			if ae.Status != tc.status || ae.Code != tc.wantCode || ae.Message != tc.wantMsg || ae.RetryAfter != tc.wantRetry ||
				ae.Endpoint != "getSession" || ae.RequestID != "iad1::abc" {
				t.Errorf("got %#v", ae)
			}
			if got := Reason(err); got != tc.wantReason {
				t.Errorf("Reason = %q, want %q", got, tc.wantReason)
			}
			if got := RetryAfter(err); got != tc.wantRetry {
				t.Errorf("RetryAfter = %v", got)
			}
			// Classifiers must also see through wrapping, as callers wrap.
			wrapped := fmt.Errorf("reconcile: %w", err)
			for name, fn := range classifiers {
				if got := fn(wrapped); got != tc.is[name] {
					t.Errorf("Is%s = %v, want %v", name, got, tc.is[name])
				}
			}
			if !strings.Contains(err.Error(), "getSession") || !strings.Contains(err.Error(), fmt.Sprint(tc.status)) {
				t.Errorf("Error() = %q lacks endpoint or status", err)
			}
		})
	}
}

func TestErrorMessageIsBounded(t *testing.T) {
	long := strings.Repeat("é", 2000)
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		writeError(w, 400, "bad_request", long)
	})
	c, _ := newTestClient(t, f, nil)
	_, err := c.GetSession(context.Background(), "sbx_1")
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatal(err)
	}
	if len(ae.Message) > maxErrorMessage+len("…") || !strings.HasSuffix(ae.Message, "…") {
		t.Errorf("message of %d bytes not bounded", len(ae.Message))
	}
	if !strings.HasPrefix(ae.Message, "éé") || strings.ContainsRune(ae.Message, '\uFFFD') {
		t.Errorf("message cut inside a rune: %q", ae.Message[len(ae.Message)-8:])
	}
}

func TestConnectionErrorsAreTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connection refused
	c, err := New(Config{BaseURL: "http://" + addr, Token: testToken(t), RequestsPerMinute: -1, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSession(context.Background(), "sbx_1")
	var te *TransientError
	if !errors.As(err, &te) || te.Endpoint != "getSession" {
		t.Fatalf("err = %T %v, want *TransientError", err, err)
	}
	if !IsTransient(err) || Reason(err) != ReasonTransient {
		t.Errorf("IsTransient=%v Reason=%q", IsTransient(err), Reason(err))
	}
	if IsNotFound(err) || IsRateLimited(err) || RetryAfter(err) != 0 {
		t.Error("a connection error classified as an API answer")
	}
}

func TestReasonOfOtherErrors(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("boom"), ReasonUnknown},
		{context.Canceled, ReasonUnknown},
		{&StreamError{Code: CodeStreamEndedEarly}, ReasonTransient},
		{&StreamError{Code: CodeSandboxStreamClosed, Message: "Sandbox stream was closed and is not accepting commands."}, ReasonGone},
		{fmt.Errorf("wrapped: %w", &StreamError{Code: CodeSandboxStopped}), ReasonGone},
		{&ProtocolError{Endpoint: "getSession", Message: "x"}, ReasonUnknown},
	}
	for _, tc := range cases {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if !IsSessionStopped(&StreamError{Code: CodeSandboxStopped}) {
		t.Error("in-band sandbox_stopped not recognised as a stopped session")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":                              0,
		"0":                             0,
		"-3":                            0,
		"1":                             time.Second,
		" 20 ":                          20 * time.Second,
		"junk":                          0,
		"Thu, 01 Oct 2026 12:00:30 GMT": 30 * time.Second,
		"Thu, 01 Oct 2026 11:00:00 GMT": 0,
		"99999999999999":                24 * time.Hour,
	}
	for in, want := range cases {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}
