package vercel

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorded is one request as the fake server saw it.
type recorded struct {
	Method string
	Path   string // escaped, as sent on the wire
	Query  url.Values
	Header http.Header
	Body   []byte
}

// fakeAPI is an httptest server that records every request and answers with
// a per-test handler. It is deliberately dumb: the behaviour of the real API
// is exercised by the contract tests against the emulator.
type fakeAPI struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []recorded
	handler func(w http.ResponseWriter, r *http.Request, n int, body []byte)
}

func newFakeAPI(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int, body []byte)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{handler: h}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.reqs)
		f.reqs = append(f.reqs, recorded{
			Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(),
			Header: r.Header.Clone(), Body: body,
		})
		f.mu.Unlock()
		f.handler(w, r, n, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fakeAPI) count() int { return len(f.requests()) }

// testToken is unique per test so that the package-level limiter registry
// never shares a limiter between tests.
func testToken(t *testing.T) string {
	return "tok-SECRET-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

// sleepLog replaces Client.sleep and Client.now: it records the requested
// waits and returns at once, moving the client's clock forward instead, so
// retry tests are fast and can assert the exact delays.
type sleepLog struct {
	mu      sync.Mutex
	ds      []time.Duration
	skipped time.Duration
}

func (s *sleepLog) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.ds = append(s.ds, d)
	s.skipped += d
	s.mu.Unlock()
	return ctx.Err()
}

// now is the wall clock plus every wait skipped so far.
func (s *sleepLog) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Add(s.skipped)
}

func (s *sleepLog) waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.ds...)
}

// newTestClient builds a client for f with pacing off and recorded sleeps.
func newTestClient(t *testing.T, f *fakeAPI, mod func(*Config)) (*Client, *sleepLog) {
	t.Helper()
	cfg := Config{
		BaseURL:           f.srv.URL,
		Token:             testToken(t),
		TeamID:            "team_1",
		ProjectID:         "prj_1",
		RequestsPerMinute: -1,
		UserAgent:         "vercel-test",
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	sl := &sleepLog{}
	c.sleep, c.now = sl.sleep, sl.now
	return c, sl
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, ErrorEnvelope{Error: ErrorBody{Code: code, Message: message}})
}

// jsonEqual compares two JSON documents structurally.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("body = %s, want %s", gb, wb)
	}
}

func ptr[T any](v T) *T { return &v }
