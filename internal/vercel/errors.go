package vercel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error codes the API sends in the {"error":{"code"}} envelope, and the
// client-side stream codes (docs/dev/vercel-sandbox-api.md §7.2, §7.4).
const (
	CodeBadRequest            = "bad_request"
	CodeNotFound              = "not_found"
	CodeForbidden             = "forbidden"
	CodeRateLimited           = "rate_limited"
	CodeSandboxStopped        = "sandbox_stopped"
	CodeSandboxStopping       = "sandbox_stopping"
	CodeSandboxSnapshotting   = "sandbox_snapshotting"
	CodeSnapshotNotFound      = "snapshot_not_found"
	CodeSandboxTimeoutInvalid = "sandbox_timeout_invalid"
	CodeSandboxStreamClosed   = "sandbox_stream_closed"

	// CodeStreamEndedEarly is never sent by the server: the client reports it
	// when an NDJSON stream closes before the command's final record.
	CodeStreamEndedEarly = "stream_ended_early"
	// CodeClientThrottled is never sent by the server: it is the 429 of a
	// request the client did not send because Vercel answered 429 to the
	// same credential shortly before (throttle.go). Backoff says when to
	// try again.
	CodeClientThrottled = "client_throttled"
)

// ErrCallTimeout is wrapped by the *TransientError of a call that did not
// complete within Config.CallTimeout (and by context.DeadlineExceeded).
var ErrCallTimeout = errors.New("call timed out")

// ErrStreamIdle is wrapped by the *TransientError of a stream that delivered
// no byte within Config.StreamIdleTimeout.
var ErrStreamIdle = errors.New("stream idle")

// Reasons returned by Reason, CamelCase for metav1.Condition.Reason.
const (
	ReasonNotFound         = "NotFound"
	ReasonGone             = "Gone"
	ReasonSnapshotNotFound = "SnapshotNotFound"
	ReasonStopping         = "Stopping"
	ReasonConflict         = "Conflict"
	ReasonRateLimited      = "RateLimited"
	ReasonInvalid          = "Invalid"
	ReasonUnauthorized     = "Unauthorized"
	ReasonPaymentRequired  = "PaymentRequired"
	ReasonTransient        = "Transient"
	ReasonUnknown          = "Unknown"
)

// APIError is any non-2xx answer from the API.
//
// Message is the server's human text, trimmed and with the bearer token
// scrubbed, so the error can go into events and status conditions as is.
// Request headers are never copied into it.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is error.code from the envelope
	// (docs/dev/vercel-sandbox-api.md §7.1), or, for non-envelope bodies such
	// as {"error":"gone"}, the string found there; "" if none.
	Code string
	// Message is error.message, or a bounded excerpt of a non-JSON body.
	Message string
	// RetryAfter is the parsed Retry-After header (0 when absent).
	RetryAfter time.Duration
	// Backoff is set on a 429 without Retry-After (Vercel's answer at the
	// concurrency limit) and on CodeClientThrottled: the delay the client
	// suggests before trying again, the credential's exponential backoff
	// with jitter. Error() leaves it out, so that the message of repeated
	// 429s stays the same.
	Backoff time.Duration
	// Endpoint is the stable operation name (createSandbox, getSession, …).
	Endpoint string
	// RequestID is Vercel's x-vercel-id response header, for support tickets.
	RequestID string
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("vercel ")
	b.WriteString(e.Endpoint)
	b.WriteString(": ")
	b.WriteString(strconv.Itoa(e.Status))
	if t := http.StatusText(e.Status); t != "" {
		b.WriteString(" ")
		b.WriteString(t)
	}
	if e.Code != "" {
		b.WriteString(" (")
		b.WriteString(e.Code)
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// TransientError is a request that never got an HTTP answer (connection
// refused or reset, DNS failure, truncated body): worth retrying later.
type TransientError struct {
	Endpoint string
	Err      error
}

func (e *TransientError) Error() string {
	return "vercel " + e.Endpoint + ": transient: " + e.Err.Error()
}

func (e *TransientError) Unwrap() error { return e.Err }

// StreamError is an error carried inside an NDJSON stream
// ({"stream":"error","data":{code,message}}), or CodeStreamEndedEarly when the
// stream closed before the command finished
// (docs/dev/vercel-sandbox-api.md §3.8, §7.4).
type StreamError struct {
	Code    string
	Message string
}

func (e *StreamError) Error() string {
	if e.Message == "" {
		return "vercel stream error: " + e.Code
	}
	return "vercel stream error (" + e.Code + "): " + e.Message
}

// ProtocolError is a 2xx answer the client could not understand (wrong
// content type, malformed JSON). It points at a server or client bug, not at
// anything the caller did.
type ProtocolError struct {
	Endpoint string
	Message  string
	Err      error
}

func (e *ProtocolError) Error() string {
	s := "vercel " + e.Endpoint + ": unexpected response: " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// maxErrorBody bounds how much of an error body is read and kept: error
// envelopes are tiny, and an HTML error page must not end up in a condition.
const (
	maxErrorBody    = 64 << 10
	maxErrorMessage = 512
)

// newAPIError builds an APIError from a non-2xx response whose body has been
// read. It tolerates the envelope of docs/dev/vercel-sandbox-api.md §7.1,
// {"error":"<code>"}, {"message":…}, any other text, and an empty body.
func newAPIError(endpoint string, resp *http.Response, body []byte, token string) *APIError {
	e := &APIError{
		Status:     resp.StatusCode,
		Endpoint:   endpoint,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		RequestID:  resp.Header.Get("X-Vercel-Id"),
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 {
		e.Code, e.Message = decodeErrorBody(body)
	}
	e.Code = scrub(e.Code, token, 128)
	e.Message = scrub(e.Message, token, maxErrorMessage)
	return e
}

func decodeErrorBody(body []byte) (code, message string) {
	var raw struct {
		Error   json.RawMessage `json:"error"`
		Code    string          `json:"code"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &raw) != nil {
		// Not JSON (a proxy's HTML page, plain text): keep an excerpt.
		return "", string(body)
	}
	code, message = raw.Code, raw.Message
	if len(raw.Error) > 0 {
		var env ErrorBody
		var s string
		switch {
		case json.Unmarshal(raw.Error, &env) == nil:
			if env.Code != "" {
				code = env.Code
			}
			if env.Message != "" {
				message = env.Message
			}
		case json.Unmarshal(raw.Error, &s) == nil:
			// {"error":"gone"}: a bare code (an SDK test uses this shape,
			// docs/dev/vercel-sandbox-api.md §7.1).
			code = s
		}
	}
	return code, message
}

// scrub removes the token from server-provided text and bounds its length:
// a misbehaving proxy that echoes the request must not leak the credential
// into Kubernetes status.
func scrub(s, token string, max int) string {
	if token != "" && strings.Contains(s, token) {
		s = strings.ReplaceAll(s, token, "[redacted]")
	}
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "�")
}

// parseRetryAfter reads delay-seconds or an HTTP date
// (https://www.rfc-editor.org/rfc/rfc9110#section-10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		const maxSeconds = int64(24 * time.Hour / time.Second)
		return time.Duration(min(n, maxSeconds)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func asAPIError(err error) (*APIError, bool) {
	var e *APIError
	ok := errors.As(err, &e)
	return e, ok
}

func hasStatus(err error, status int) bool {
	e, ok := asAPIError(err)
	return ok && e.Status == status
}

func hasStatusCode(err error, status int, code string) bool {
	e, ok := asAPIError(err)
	return ok && e.Status == status && e.Code == code
}

// IsNotFound reports a 404: the sandbox, session, command, snapshot or file
// does not exist (or no longer does, after a delete).
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsGone reports any 410: a stopped session or a missing snapshot.
func IsGone(err error) bool { return hasStatus(err, http.StatusGone) }

// IsSnapshotNotFound reports 410 snapshot_not_found: resuming with no usable
// snapshot, or creating from a deleted/expired one.
func IsSnapshotNotFound(err error) bool {
	return hasStatusCode(err, http.StatusGone, CodeSnapshotNotFound)
}

// IsSessionStopped reports that the session has stopped for good: 410
// sandbox_stopped, or the same code carried inside a stream. The sandbox can
// be resumed into a new session.
func IsSessionStopped(err error) bool {
	if hasStatusCode(err, http.StatusGone, CodeSandboxStopped) {
		return true
	}
	var se *StreamError
	return errors.As(err, &se) && se.Code == CodeSandboxStopped
}

// IsStopping reports 422 sandbox_stopping: try again once it has stopped.
func IsStopping(err error) bool {
	return hasStatusCode(err, http.StatusUnprocessableEntity, CodeSandboxStopping)
}

// IsSnapshotting reports 422 sandbox_snapshotting: the session is being
// captured and will stop when done.
func IsSnapshotting(err error) bool {
	return hasStatusCode(err, http.StatusUnprocessableEntity, CodeSandboxSnapshotting)
}

// IsConflict reports a 409, and also the 400 with which the live API answers a
// create whose name already exists (docs/dev/vercel-sandbox-api.md §5.1, source
// I2): both mean "the thing you are creating is already there", which a
// controller with deterministic names handles by adopting it.
func IsConflict(err error) bool {
	e, ok := asAPIError(err)
	return ok && (e.Status == http.StatusConflict || isDuplicateName(e))
}

// IsRateLimited reports a 429 (request rate or concurrency limit), including
// the client's own CodeClientThrottled. RetryAfter gives the delay to wait.
func IsRateLimited(err error) bool { return hasStatus(err, http.StatusTooManyRequests) }

// IsInvalid reports a request the server refused as malformed or not allowed
// in the current state (400, or 422 other than stopping/snapshotting).
// Sending it again unchanged will fail again.
func IsInvalid(err error) bool {
	e, ok := asAPIError(err)
	if !ok {
		return false
	}
	switch e.Status {
	case http.StatusBadRequest:
		return !isDuplicateName(e)
	case http.StatusUnprocessableEntity:
		return e.Code != CodeSandboxStopping && e.Code != CodeSandboxSnapshotting
	}
	return false
}

// IsUnauthorized reports 401 or 403: the credential is wrong, expired or lacks
// permission.
func IsUnauthorized(err error) bool {
	return hasStatus(err, http.StatusUnauthorized) || hasStatus(err, http.StatusForbidden)
}

// IsPaymentRequired reports 402: the account is blocked or over its quota.
func IsPaymentRequired(err error) bool { return hasStatus(err, http.StatusPaymentRequired) }

// IsTransient reports failures that may succeed if retried later unchanged: a
// 5xx answer, no answer at all (*TransientError), or a stream that ended
// before the command did.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if e, ok := asAPIError(err); ok {
		return e.Status >= 500
	}
	var te *TransientError
	if errors.As(err, &te) {
		return true
	}
	var se *StreamError
	return errors.As(err, &se) && se.Code == CodeStreamEndedEarly
}

// RetryAfter returns how long to wait before trying err's call again: the
// server's Retry-After, else the client's Backoff for a 429 without one;
// 0 when err carries neither.
func RetryAfter(err error) time.Duration {
	if e, ok := asAPIError(err); ok {
		if e.RetryAfter > 0 {
			return e.RetryAfter
		}
		return e.Backoff
	}
	return 0
}

// IsTimeout reports a call ended by Config.CallTimeout or a stream ended by
// Config.StreamIdleTimeout. Both are also IsTransient.
func IsTimeout(err error) bool {
	return errors.Is(err, ErrCallTimeout) || errors.Is(err, ErrStreamIdle)
}

// Reason classifies err for a Kubernetes condition reason. The order matters:
// the most specific classification wins (a 410 snapshot_not_found is
// SnapshotNotFound, not Gone). It returns "" for a nil error.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case IsSnapshotNotFound(err):
		return ReasonSnapshotNotFound
	case IsGone(err), isStreamCode(err, CodeSandboxStopped), isStreamCode(err, CodeSandboxStreamClosed):
		return ReasonGone
	case IsStopping(err), IsSnapshotting(err):
		// Both end in a stopped session; the caller waits and resumes.
		return ReasonStopping
	case IsNotFound(err):
		return ReasonNotFound
	case IsConflict(err):
		return ReasonConflict
	case IsRateLimited(err):
		return ReasonRateLimited
	case IsInvalid(err):
		return ReasonInvalid
	case IsUnauthorized(err):
		return ReasonUnauthorized
	case IsPaymentRequired(err):
		return ReasonPaymentRequired
	case IsTransient(err):
		return ReasonTransient
	}
	return ReasonUnknown
}

func isStreamCode(err error, code string) bool {
	var se *StreamError
	return errors.As(err, &se) && se.Code == code
}

// isDuplicateName recognises the answer to a create whose name is taken. The
// live API sends 400 bad_request with a message pointing at GET
// /sandboxes/:name; the OpenAPI document also lists 409
// (docs/dev/vercel-sandbox-api.md §5.1, source I2). The exact wording is not
// published, so match loosely on the message.
func isDuplicateName(e *APIError) bool {
	if e.Status == http.StatusConflict {
		return true
	}
	if e.Status != http.StatusBadRequest {
		return false
	}
	switch e.Code {
	case "conflict", "already_exists", "sandbox_already_exists", "name_taken":
		return true
	}
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "already exist") ||
		strings.Contains(m, "already in use") ||
		strings.Contains(m, "already taken") ||
		(strings.Contains(m, "name") && strings.Contains(m, "exists"))
}
