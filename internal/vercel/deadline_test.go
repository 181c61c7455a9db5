package vercel

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// A call whose answer never comes fails at CallTimeout as a transient
// timeout, sent once: the deadline covers the whole call, retries included.
func TestCallTimeout(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { <-r.Context().Done() })
	c, _ := newTestClient(t, f, func(cfg *Config) { cfg.CallTimeout = 200 * time.Millisecond })
	start := time.Now()
	_, err := c.GetSession(context.Background(), "sbx_1")
	if !IsTimeout(err) || !IsTransient(err) || !errors.Is(err, context.DeadlineExceeded) || Reason(err) != ReasonTransient {
		t.Fatalf("err = %v, want a transient timeout", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("failed after %s, want at the 200ms call timeout", d)
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	// The caller's own deadline stays the caller's: not a timeout of ours.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.GetSession(ctx, "sbx_1"); IsTimeout(err) || IsTransient(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller's deadline: %v", err)
	}
	// A negative CallTimeout leaves only the caller's context.
	c2, _ := newTestClient(t, f, func(cfg *Config) { cfg.CallTimeout = -1 })
	ctx, cancel = context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := c2.GetSession(ctx, "sbx_1"); IsTimeout(err) || time.Since(start) < 400*time.Millisecond {
		t.Errorf("without a call timeout: %v after %s", err, time.Since(start))
	}
}

// A stream's start is bounded by CallTimeout; after it, only silence ends
// it: a read blocked for StreamIdleTimeout without a byte. A consumer slow
// to read is not taken for a silent server.
func TestStreamDeadlines(t *testing.T) {
	t.Run("no headers", func(t *testing.T) {
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { <-r.Context().Done() })
		c, _ := newTestClient(t, f, func(cfg *Config) { cfg.CallTimeout = 200 * time.Millisecond })
		start := time.Now()
		_, err := c.CommandLogs(context.Background(), "sbx_1", "cmd_1")
		if !IsTimeout(err) || !IsTransient(err) || time.Since(start) > 2*time.Second {
			t.Errorf("err = %v after %s, want a timeout at 200ms", err, time.Since(start))
		}
	})
	t.Run("silent after two records", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		f := ndjsonServer(t, "application/x-ndjson", []string{
			`{"stream":"stdout","data":"a"}`, `{"stream":"stdout","data":"b"}`, "<wait>", `{"stream":"stdout","data":"never"}`,
		}, release)
		c, _ := newTestClient(t, f, func(cfg *Config) {
			cfg.CallTimeout = 200 * time.Millisecond
			cfg.StreamIdleTimeout = 300 * time.Millisecond
		})
		s, err := c.CommandLogs(context.Background(), "sbx_1", "cmd_1")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Longer than both limits, but no read is waiting meanwhile.
		time.Sleep(500 * time.Millisecond)
		for _, want := range []string{"a", "b"} {
			rec, err := s.Next()
			if err != nil || rec.Data != want {
				t.Fatalf("Next = %+v, %v; want %q", rec, err, want)
			}
		}
		start := time.Now()
		_, err = s.Next()
		if !IsTimeout(err) || !IsTransient(err) || !errors.Is(err, ErrStreamIdle) {
			t.Fatalf("Next on a silent stream: %v", err)
		}
		if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
			t.Errorf("silent stream ended after %s, want at the 300ms idle limit", d)
		}
	})
	t.Run("read file", func(t *testing.T) {
		f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(200)
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		c, _ := newTestClient(t, f, func(cfg *Config) { cfg.StreamIdleTimeout = 200 * time.Millisecond })
		start := time.Now()
		if _, err := c.ReadFile(context.Background(), "sbx_1", "big", ""); !IsTimeout(err) || time.Since(start) > 2*time.Second {
			t.Errorf("ReadFile of a stalled body: %v after %s", err, time.Since(start))
		}
	})
}

// Deletes, stops and extensions are sent with the reserved-lane mark; other
// calls are not.
func TestPriorityMark(t *testing.T) {
	var marked []string
	c, _ := newTestClient(t, newFakeAPI(t, nil), func(cfg *Config) {
		cfg.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if isPriority(r) {
				marked = append(marked, r.Method+" "+r.URL.Path)
			}
			return nil, errors.New("not sent")
		})}
		cfg.MaxRetries = -1
	})
	ctx := context.Background()
	c.DeleteSandbox(ctx, "sb", false)
	c.StopSession(ctx, "sbx_1")
	c.ExtendTimeout(ctx, "sbx_1", time.Minute)
	c.CreateSandbox(ctx, CreateSandboxRequest{Name: "sb"})
	c.GetSandbox(ctx, "sb", true)
	c.DeleteSnapshot(ctx, "snap_1")
	c.ListSandboxes(ctx, ListSandboxesOptions{})
	want := []string{"DELETE /v2/sandboxes/sb", "POST /v2/sandboxes/sessions/sbx_1/stop", "POST /v2/sandboxes/sessions/sbx_1/extend-timeout"}
	if len(marked) != len(want) {
		t.Fatalf("marked %v, want %v", marked, want)
	}
	for i := range want {
		if marked[i] != want[i] {
			t.Errorf("marked %v, want %v", marked, want)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
