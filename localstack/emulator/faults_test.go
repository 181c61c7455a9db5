package emulator

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFaultRateLimit(t *testing.T) {
	te := newEnv(t, Options{})
	for _, tc := range []struct {
		retryAfter time.Duration
		header     string
	}{
		{3 * time.Second, "3"},
		{1500 * time.Millisecond, "2"}, // rounded up
		{30 * time.Second, "30"},       // > 20: the SDK gives up at once
	} {
		te.e.Faults().RateLimit("createSandbox", 2, tc.retryAfter)
		for i := 0; i < 2; i++ {
			r := te.req("POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator"})
			if r.status != 429 || r.errCode() != "rate_limited" || r.header.Get("Retry-After") != tc.header {
				t.Fatalf("retryAfter %s, request %d: %d %q %s", tc.retryAfter, i, r.status, r.header.Get("Retry-After"), r.body)
			}
			if !strings.Contains(string(r.body), `"limit":{`) {
				t.Fatalf("no limit object: %s", r.body)
			}
		}
		te.create(nil) // the third goes through
		// Other operations are not affected.
		te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)
	}
	if n := len(te.e.LiveSandboxes()); n != 3 {
		t.Fatalf("rate-limited creates committed: %d sandboxes", n)
	}
	// Wildcard.
	te.e.Faults().RateLimit("*", 1, time.Second)
	if r := te.req("GET", "/v2/sandboxes?project=prj_emulator", nil); r.status != 429 {
		t.Fatalf("wildcard: %d", r.status)
	}
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)
}

func TestFaultFailNext(t *testing.T) {
	te := newEnv(t, Options{})
	te.e.Faults().FailNext("createSandbox", 2, 503)
	for i := 0; i < 2; i++ {
		r := te.req("POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator", "name": "x"})
		if r.status != 503 || r.errCode() != "internal_server_error" {
			t.Fatalf("attempt %d: %d %s", i, r.status, r.body)
		}
	}
	if n := len(te.e.LiveSandboxes()); n != 0 {
		t.Fatalf("FailNext committed %d sandboxes", n)
	}
	te.create(map[string]any{"name": "x"})
	te.e.Faults().FailNext("", 1, 500) // "" = every endpoint
	if r := te.req("GET", "/v2/sandboxes/x"+prj, nil); r.status != 500 {
		t.Fatalf("wildcard fail: %d", r.status)
	}
	if got := te.e.RequestCount("createSandbox"); got != 3 {
		t.Fatalf("failed requests are counted: %d", got)
	}
}

func TestFaultCommitThenFail(t *testing.T) {
	for _, mode := range []FailMode{FailWith500, FailDropConnection} {
		t.Run(mode.String(), func(t *testing.T) {
			te := newEnv(t, Options{})
			te.e.Faults().CommitThenFail("createSandbox", 1, mode)
			body := `{"projectId":"prj_emulator","name":"dup"}`
			req, _ := http.NewRequest("POST", te.srv.URL+"/v3/sandboxes", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			res, err := te.hc.Do(req)
			switch mode {
			case FailWith500:
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != 500 {
					t.Fatalf("status %d", res.StatusCode)
				}
			case FailDropConnection:
				if err == nil {
					res.Body.Close()
					t.Fatalf("got an answer (%d), want a dropped connection", res.StatusCode)
				}
			}
			// The change was committed: the SDK-style retry hits the duplicate name.
			if _, ok := te.e.Sandbox("dup"); !ok {
				t.Fatal("sandbox not created")
			}
			r := te.req("POST", "/v3/sandboxes", body)
			if r.status != 400 || r.errCode() != "bad_request" {
				t.Fatalf("retry: %d %s", r.status, r.body)
			}
			// An unnamed create retried after a lost answer makes two sandboxes.
			te.e.Faults().CommitThenFail("createSandbox", 1, mode)
			_ = te.reqNoFail("POST", "/v3/sandboxes", `{"projectId":"prj_emulator"}`)
			te.create(nil)
			if n := len(te.e.LiveSandboxes()); n != 3 {
				t.Fatalf("%d sandboxes, want 3", n)
			}
		})
	}
}

// reqNoFail sends a request and ignores transport errors.
func (te *tenv) reqNoFail(method, path, body string) int {
	req, _ := http.NewRequest(method, te.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+te.tok)
	res, err := te.hc.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

func TestFaultLatency(t *testing.T) {
	te := newEnv(t, Options{})
	te.e.Faults().SetLatency("listSandboxes", 150*time.Millisecond)
	start := time.Now()
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("latency %s", d)
	}
	start = time.Now()
	te.create(nil)
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("other op delayed %s", d)
	}
	te.e.Faults().Reset()
	start = time.Now()
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("after reset %s", d)
	}
}

func TestFaultsConcurrent(t *testing.T) {
	te := newEnv(t, Options{})
	te.e.Faults().FailNext("listSandboxes", 50, 502)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if te.reqNoFail("GET", "/v2/sandboxes?project=prj_emulator", "") == 502 {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed != 50 {
		t.Fatalf("%d failed, want exactly 50", failed)
	}
}

// createWithin sends a named create with a client that gives up after
// timeout, and returns its status (0 when no answer came).
func (te *tenv) createWithin(name string, timeout time.Duration) int {
	te.t.Helper()
	hc := &http.Client{Timeout: timeout}
	body := `{"projectId":"prj_emulator","name":"` + name + `"}`
	req, _ := http.NewRequest("POST", te.srv.URL+"/v3/sandboxes", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+te.tok)
	res, err := hc.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

func TestFaultBlackHole(t *testing.T) {
	te := newEnv(t, Options{})
	f := te.e.Faults()
	f.BlackHole("createSandbox")

	// The client gives up: no answer, and the request is not applied, even
	// once the hole is lifted.
	start := time.Now()
	if st := te.createWithin("given-up", 300*time.Millisecond); st != 0 {
		t.Fatalf("a black-holed create answered %d", st)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("the create returned after %s, before the client gave up", d)
	}
	// Other operations answer.
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)

	// A request held when the hole is lifted goes on and is applied.
	held := make(chan int, 1)
	before := te.e.RequestCount("createSandbox")
	go func() { held <- te.createWithin("late", time.Minute) }()
	for te.e.RequestCount("createSandbox") == before {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case st := <-held:
		t.Fatalf("a black-holed create answered %d before the lift", st)
	case <-time.After(200 * time.Millisecond):
	}
	f.LiftBlackHole("createSandbox")
	select {
	case st := <-held:
		if st != 200 {
			t.Fatalf("the held create answered %d after the lift, want 200", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held create did not answer after the lift")
	}
	if _, ok := te.e.Sandbox("late"); !ok {
		t.Fatal("the held create was not applied after the lift")
	}
	if _, ok := te.e.Sandbox("given-up"); ok {
		t.Fatal("a create whose client gave up was applied after the lift")
	}
	// After the lift nothing is held.
	if st := te.createWithin("after", 5*time.Second); st != 200 {
		t.Fatalf("create after the lift: %d", st)
	}

	// Wildcard, lifted by Reset; lifting twice is harmless.
	f.BlackHole("*")
	f.BlackHole("*")
	if st := te.createWithin("wild", 200*time.Millisecond); st != 0 {
		t.Fatalf("wildcard black hole answered %d", st)
	}
	f.Reset()
	f.LiftBlackHole("*")
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)
}

func TestFaultDropResponses(t *testing.T) {
	te := newEnv(t, Options{})
	te.e.Faults().DropResponses("createSandbox", 1)
	if st := te.createWithin("dropped", 5*time.Second); st != 0 {
		t.Fatalf("a dropped response answered %d", st)
	}
	if _, ok := te.e.Sandbox("dropped"); !ok {
		t.Fatal("the request whose answer was dropped was not applied")
	}
	if st := te.createWithin("next", 5*time.Second); st != 200 {
		t.Fatalf("the next create answered %d", st)
	}
}
