package vercel

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// namedStore is a tiny server-side model of create-by-name, enough to show
// what a retried create does: the first POST commits and then fails.
type namedStore struct {
	mu     sync.Mutex
	names  map[string]bool
	failN  int // answer the next failN commits with 500 after committing
	status int // duplicate-name status (400 like the live API, or 409)
}

func (s *namedStore) handle(w http.ResponseWriter, r *http.Request, n int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/sandboxes"):
		name := "generated-" + string(rune('a'+n))
		if i := strings.Index(string(body), `"name":"`); i >= 0 {
			rest := string(body)[i+8:]
			name = rest[:strings.IndexByte(rest, '"')]
		}
		if s.names[name] {
			if s.status == http.StatusConflict {
				writeError(w, 409, "conflict", "sandbox name taken")
			} else {
				writeError(w, 400, "bad_request", "A sandbox named "+name+" already exists; use GET /sandboxes/:name.")
			}
			return
		}
		s.names[name] = true
		if s.failN > 0 {
			s.failN--
			writeError(w, 500, "internal_server_error", "committed, then lost")
			return
		}
		writeJSON(w, 200, SandboxResponse{Sandbox: Sandbox{Name: name}, Session: &Session{ID: "sbx_" + name}})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v2/sandboxes/"):
		name := strings.TrimPrefix(r.URL.Path, "/v2/sandboxes/")
		if !s.names[name] {
			writeError(w, 404, "not_found", "no")
			return
		}
		writeJSON(w, 200, SandboxResponse{Sandbox: Sandbox{Name: name}, Session: &Session{ID: "sbx_" + name}})
	default:
		writeError(w, 404, "not_found", "route")
	}
}

func TestNamedCreateCommittedThenFailedIsAdopted(t *testing.T) {
	for _, dupStatus := range []int{400, 409} {
		t.Run(http.StatusText(dupStatus), func(t *testing.T) {
			store := &namedStore{names: map[string]bool{}, failN: 1, status: dupStatus}
			f := newFakeAPI(t, store.handle)
			c, sl := newTestClient(t, f, nil)
			got, err := c.CreateSandbox(context.Background(), CreateSandboxRequest{Name: "sb-x"})
			if err != nil {
				t.Fatalf("CreateSandbox: %v", err)
			}
			if got.Sandbox.Name != "sb-x" || got.Session == nil || got.Session.ID != "sbx_sb-x" {
				t.Errorf("adopted %+v", got)
			}
			var seq []string
			for _, r := range f.requests() {
				seq = append(seq, r.Method+" "+r.Path)
			}
			want := "POST /v3/sandboxes,POST /v3/sandboxes,GET /v2/sandboxes/sb-x"
			if strings.Join(seq, ",") != want {
				t.Errorf("requests = %v, want %s", seq, want)
			}
			if len(store.names) != 1 {
				t.Errorf("server holds %d sandboxes, want 1", len(store.names))
			}
			if w := sl.waits(); len(w) != 1 || w[0] < 200*time.Millisecond || w[0] >= 600*time.Millisecond {
				t.Errorf("backoff waits = %v, want one in [200ms, 600ms)", w)
			}
		})
	}
}

// A name that exists before the first attempt is not ours to adopt blindly:
// it is returned as a conflict, and the caller checks ownership.
func TestNamedCreateDuplicateOnFirstAttemptIsConflict(t *testing.T) {
	store := &namedStore{names: map[string]bool{"sb-x": true}}
	f := newFakeAPI(t, store.handle)
	c, _ := newTestClient(t, f, nil)
	_, err := c.CreateSandbox(context.Background(), CreateSandboxRequest{Name: "sb-x"})
	if !IsConflict(err) || IsInvalid(err) || Reason(err) != ReasonConflict {
		t.Fatalf("err = %v, want a conflict", err)
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// Calls whose repetition could duplicate work are sent exactly once, even on
// 5xx and even on a short 429.
func TestNonIdempotentCallsAreNeverResent(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(c *Client) error{
		"unnamed create": func(c *Client) error { _, err := c.CreateSandbox(ctx, CreateSandboxRequest{}); return err },
		"run command": func(c *Client) error {
			_, err := c.RunCommand(ctx, "sbx_1", RunCommandRequest{Command: "true"})
			return err
		},
		"run command stream": func(c *Client) error {
			_, err := c.RunCommandStream(ctx, "sbx_1", RunCommandRequest{Command: "true"})
			return err
		},
		"snapshot":    func(c *Client) error { _, err := c.CreateSnapshot(ctx, "sbx_1", nil); return err },
		"fork":        func(c *Client) error { _, err := c.ForkSandbox(ctx, "sb", ForkSandboxRequest{Name: "f"}); return err },
		"write files": func(c *Client) error { return c.WriteFiles(ctx, "sbx_1", []File{{Path: "a", Content: []byte("x")}}) },
		"extend":      func(c *Client) error { _, err := c.ExtendTimeout(ctx, "sbx_1", time.Minute); return err },
		"patch": func(c *Client) error {
			_, err := c.UpdateSandbox(ctx, "sb", UpdateSandboxRequest{Timeout: 5000}, false)
			return err
		},
		"mkdir": func(c *Client) error { return c.Mkdir(ctx, "sbx_1", "d", "", true) },
		"network policy": func(c *Client) error {
			_, err := c.UpdateNetworkPolicy(ctx, "sbx_1", NetworkPolicy{Mode: NetworkDenyAll})
			return err
		},
	}
	answers := map[string]func(w http.ResponseWriter){
		"500": func(w http.ResponseWriter) { writeError(w, 500, "internal_server_error", "x") },
		"429 short": func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			writeError(w, 429, "rate_limited", "x")
		},
	}
	for aname, answer := range answers {
		for name, call := range calls {
			t.Run(aname+"/"+name, func(t *testing.T) {
				f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { answer(w) })
				c, sl := newTestClient(t, f, nil)
				err := call(c)
				if err == nil {
					t.Fatal("no error")
				}
				if n := f.count(); n != 1 {
					t.Errorf("%d requests, want exactly 1", n)
				}
				if len(sl.waits()) != 0 {
					t.Errorf("slept %v", sl.waits())
				}
				if aname == "429 short" && RetryAfter(err) != time.Second {
					t.Errorf("RetryAfter = %v, want 1s for the caller to requeue", RetryAfter(err))
				}
			})
		}
	}
}

func TestIdempotentCallsRetryWithBackoff(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(c *Client) error{
		"get sandbox":     func(c *Client) error { _, err := c.GetSandbox(ctx, "sb", false); return err },
		"get session":     func(c *Client) error { _, err := c.GetSession(ctx, "sbx_1"); return err },
		"stop":            func(c *Client) error { _, err := c.StopSession(ctx, "sbx_1"); return err },
		"kill":            func(c *Client) error { _, err := c.KillCommand(ctx, "sbx_1", "cmd_1", 15); return err },
		"delete sandbox":  func(c *Client) error { _, err := c.DeleteSandbox(ctx, "sb", false); return err },
		"delete snapshot": func(c *Client) error { _, err := c.DeleteSnapshot(ctx, "snap_1"); return err },
		"list snapshots":  func(c *Client) error { _, err := c.ListSnapshots(ctx, ListSnapshotsOptions{}); return err },
		"read file": func(c *Client) error {
			_, err := c.ReadFile(ctx, "sbx_1", "a", "")
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
				if n < 2 {
					writeError(w, 502+n, "", "flaky")
					return
				}
				if strings.HasSuffix(r.URL.Path, "/fs/read") {
					w.Header().Set("Content-Type", "application/octet-stream")
					w.Write([]byte("x"))
					return
				}
				writeJSON(w, 200, map[string]any{})
			})
			c, sl := newTestClient(t, f, nil)
			if err := call(c); err != nil {
				t.Fatalf("err = %v, want success on the third attempt", err)
			}
			if n := f.count(); n != 3 {
				t.Errorf("%d requests, want 3", n)
			}
			w := sl.waits()
			if len(w) != 2 || w[0] < 200*time.Millisecond || w[0] >= 600*time.Millisecond ||
				w[1] < 400*time.Millisecond || w[1] >= 1200*time.Millisecond {
				t.Errorf("waits = %v, want ~400ms then ~800ms (±50%%)", w)
			}
		})
	}
}

func TestRetriesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		maxRetries, wantRequests int
	}{{0, 3}, {-1, 1}, {4, 5}} {
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
			writeError(w, 503, "", "down")
		})
		c, _ := newTestClient(t, f, func(cfg *Config) { cfg.MaxRetries = tc.maxRetries })
		_, err := c.GetSession(context.Background(), "sbx_1")
		if !IsTransient(err) {
			t.Errorf("MaxRetries=%d: err = %v", tc.maxRetries, err)
		}
		if n := f.count(); n != tc.wantRequests {
			t.Errorf("MaxRetries=%d: %d requests, want %d", tc.maxRetries, n, tc.wantRequests)
		}
	}
}

// A dropped connection on a GET is retried like a 5xx.
func TestDroppedConnectionIsRetried(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		if n == 0 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		writeJSON(w, 200, SessionResponse{Session: Session{ID: "sbx_1"}})
	})
	c, _ := newTestClient(t, f, nil)
	s, err := c.GetSession(context.Background(), "sbx_1")
	if err != nil || s.Session.ID != "sbx_1" {
		t.Fatalf("got %v, %v", s, err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// A stop whose answer was lost finds the session stopped on retry: that is
// success, and the session is read back.
func TestStopAfterLostAnswerReadsSessionBack(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		switch {
		case n == 0:
			writeError(w, 500, "", "stopped, then lost")
		case r.Method == http.MethodPost:
			writeError(w, 410, CodeSandboxStopped, "no longer available")
		default:
			writeJSON(w, 200, SessionResponse{Session: Session{ID: "sbx_1", Status: SessionStopped}})
		}
	})
	c, _ := newTestClient(t, f, nil)
	got, err := c.StopSession(context.Background(), "sbx_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Session.Status != SessionStopped {
		t.Errorf("status = %s", got.Session.Status)
	}
	if n := f.count(); n != 3 {
		t.Errorf("%d requests, want POST, POST, GET", n)
	}
	// Without an earlier failure, 410 on stop is an error.
	f2 := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		writeError(w, 410, CodeSandboxStopped, "no longer available")
	})
	c2, _ := newTestClient(t, f2, nil)
	if _, err := c2.StopSession(context.Background(), "sbx_1"); !IsSessionStopped(err) {
		t.Errorf("err = %v, want sandbox_stopped", err)
	}
}

func TestRateLimitShortRetryAfterIsWaitedOut(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			writeError(w, 429, "rate_limited", "slow down")
			return
		}
		writeJSON(w, 200, SessionResponse{Session: Session{ID: "sbx_1"}})
	})
	c, sl := newTestClient(t, f, nil)
	if _, err := c.GetSession(context.Background(), "sbx_1"); err != nil {
		t.Fatal(err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
	if w := sl.waits(); len(w) != 1 || w[0] != time.Second {
		t.Errorf("waits = %v, want exactly [1s]", w)
	}
}

// The same with the real sleep, so that the context-aware timer is exercised.
func TestRateLimitRealSleep(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			writeError(w, 429, "rate_limited", "slow down")
			return
		}
		writeJSON(w, 200, map[string]any{})
	})
	c, _ := newTestClient(t, f, nil)
	c.sleep = sleepCtx
	start := time.Now()
	if _, err := c.GetSandbox(context.Background(), "sb", false); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("returned after %v, before Retry-After elapsed", el)
	}
	// A cancelled context interrupts the wait at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(50*time.Millisecond, cancel)
	f2 := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		w.Header().Set("Retry-After", "10")
		writeError(w, 429, "rate_limited", "slow down")
	})
	c2, _ := newTestClient(t, f2, nil)
	c2.sleep = sleepCtx
	start = time.Now()
	_, err := c2.GetSandbox(ctx, "sb", false)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Errorf("err = %v after %v", err, time.Since(start))
	}
	// A Retry-After that would outlive the call's deadline is not slept
	// through: the 429 is returned at once, for the caller to requeue.
	f3 := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		w.Header().Set("Retry-After", "10")
		writeError(w, 429, "rate_limited", "slow down")
	})
	c3, _ := newTestClient(t, f3, nil)
	c3.sleep = sleepCtx
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	start = time.Now()
	_, err = c3.GetSandbox(dctx, "sb", false)
	if !IsRateLimited(err) || RetryAfter(err) != 10*time.Second || time.Since(start) > time.Second || f3.count() != 1 {
		t.Errorf("err = %v after %v and %d requests, want the 429 at once", err, time.Since(start), f3.count())
	}
}

func TestRateLimitLongRetryAfterIsReturnedAtOnce(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		w.Header().Set("Retry-After", "30")
		writeError(w, 429, "rate_limited", "slow down")
	})
	c, sl := newTestClient(t, f, nil)
	_, err := c.GetSession(context.Background(), "sbx_1")
	if !IsRateLimited(err) || RetryAfter(err) != 30*time.Second || Reason(err) != ReasonRateLimited {
		t.Fatalf("err = %v (RetryAfter %v)", err, RetryAfter(err))
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if len(sl.waits()) != 0 {
		t.Errorf("slept %v", sl.waits())
	}
}

func TestRateLimitPersistentReturnsRetryAfter(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		w.Header().Set("Retry-After", "2")
		writeError(w, 429, "rate_limited", "slow down")
	})
	c, sl := newTestClient(t, f, nil)
	_, err := c.GetSession(context.Background(), "sbx_1")
	if !IsRateLimited(err) || RetryAfter(err) != 2*time.Second {
		t.Fatalf("err = %v", err)
	}
	if n := f.count(); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	if w := sl.waits(); len(w) != 2 || w[0] != 2*time.Second || w[1] != 2*time.Second {
		t.Errorf("waits = %v", w)
	}
}

func TestRateLimitWithoutRetryAfterBacksOff(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		if n == 0 {
			writeError(w, 429, "rate_limited", "slow down")
			return
		}
		writeJSON(w, 200, map[string]any{})
	})
	c, sl := newTestClient(t, f, nil)
	if _, err := c.GetSession(context.Background(), "sbx_1"); err != nil {
		t.Fatal(err)
	}
	// The credential's first backoff step (1 s) plus up to half of it.
	if w := sl.waits(); len(w) != 1 || w[0] < time.Second || w[0] > 1500*time.Millisecond {
		t.Errorf("waits = %v", w)
	}
}

// OnRequest sees every attempt with its endpoint and status.
func TestOnRequestHook(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		if n == 0 {
			writeError(w, 503, "", "")
			return
		}
		writeJSON(w, 200, map[string]any{})
	})
	var mu sync.Mutex
	var seen []string
	c, _ := newTestClient(t, f, func(cfg *Config) {
		cfg.OnRequest = func(ep string, status int, d time.Duration) {
			mu.Lock()
			seen = append(seen, ep+":"+http.StatusText(status))
			mu.Unlock()
		}
	})
	if _, err := c.ListSnapshots(context.Background(), ListSnapshotsOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, ","); got != "listSnapshots:Service Unavailable,listSnapshots:OK" {
		t.Errorf("hook saw %s", got)
	}
}
