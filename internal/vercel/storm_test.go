package vercel_test

// The client under Vercel's 429s and stalls, against the emulator over
// loopback: a concurrency storm stays cheap, a 429 without Retry-After backs
// off exponentially, a 429 slows every Client of the credential, a
// black-holed endpoint fails at the call deadline and frees its slot, and
// deletes keep a lane of their own.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/httplimit"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// arrival is one request as the emulator received it.
type arrival struct {
	at       time.Time
	method   string
	path     string
	team     string
	canceled bool // the client gave up before the answer
}

// timedEmulator is the emulator behind a handler that records when each
// request arrived.
type timedEmulator struct {
	*emulator.Emulator
	url string
	mu  sync.Mutex
	log []arrival
}

func newTimedEmulator(t *testing.T) *timedEmulator {
	t.Helper()
	e, err := emulator.New(emulator.Options{TeamID: contractTeam, ProjectID: contractProject})
	if err != nil {
		t.Fatal(err)
	}
	te := &timedEmulator{Emulator: e}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := arrival{at: time.Now(), method: r.Method, path: r.URL.Path, team: r.URL.Query().Get("teamId")}
		e.Handler().ServeHTTP(w, r)
		a.canceled = r.Context().Err() != nil
		te.mu.Lock()
		te.log = append(te.log, a)
		te.mu.Unlock()
	}))
	t.Cleanup(func() { srv.Close(); e.Close() })
	te.url = srv.URL
	return te
}

// arrivals returns the recorded requests whose "METHOD path" starts with prefix.
func (te *timedEmulator) arrivals(prefix string) []arrival {
	te.mu.Lock()
	defer te.mu.Unlock()
	var out []arrival
	for _, a := range te.log {
		if strings.HasPrefix(a.method+" "+a.path, prefix) {
			out = append(out, a)
		}
	}
	return out
}

func (te *timedEmulator) client(t *testing.T, team string, hc *http.Client, mod func(*vercel.Config)) *vercel.Client {
	t.Helper()
	if hc == nil {
		hc = httplimit.Client(4)
	}
	cfg := vercel.Config{BaseURL: te.url, Token: te.Token(), TeamID: team, ProjectID: contractProject, HTTPClient: hc}
	if mod != nil {
		mod(&cfg)
	}
	c, err := vercel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConcurrencyStormIsBounded: the plan allows one running sandbox and one
// runs; 50 callers each try to create their own for the storm's length,
// requeueing as the controllers do (after vercel.RetryAfter, or 1 s when it
// is 0). Before the 429 gates, each create cost three requests every ~2 s
// (4134 requests in 60 s, 69/s); now the callers' first round reaches Vercel
// and then one probe per backoff step. Deleting the blocker lets the next
// create start within seconds. STORM_SECONDS lengthens the storm (default
// 6) to measure it.
func TestConcurrencyStormIsBounded(t *testing.T) {
	const callers = 50
	storm := 6 * time.Second
	if s := os.Getenv("STORM_SECONDS"); s != "" {
		d, err := time.ParseDuration(s + "s")
		if err != nil {
			t.Fatal(err)
		}
		storm = d
	}
	te := newTimedEmulator(t)
	c := te.client(t, contractTeam, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), storm+time.Minute)
	defer cancel()
	te.Faults().SetMaxRunning(1)
	if _, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "blocker"}); err != nil {
		t.Fatal(err)
	}
	stormStart := time.Now()

	var deletedAt, firstStart atomic.Int64
	var early atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for {
				_, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: fmt.Sprintf("storm-%d", i)})
				if err == nil {
					if deletedAt.Load() == 0 {
						early.Add(1)
					} else {
						firstStart.CompareAndSwap(0, time.Now().UnixNano())
					}
					return
				}
				if !vercel.IsRateLimited(err) {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				wait := vercel.RetryAfter(err)
				if wait <= 0 {
					wait = time.Second // what controllers/errors.go classify does
				}
				select {
				case <-time.After(wait):
				case <-stop:
					return
				}
			}
		})
	}
	time.Sleep(storm)
	creates := len(te.arrivals("POST /v3/sandboxes")) - 1 // the blocker's
	deletedAt.Store(time.Now().UnixNano())
	if _, err := c.DeleteSandbox(ctx, "blocker", false); err != nil {
		t.Fatal(err)
	}
	for firstStart.Load() == 0 && time.Since(time.Unix(0, deletedAt.Load())) < time.Minute {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if early.Load() != 0 {
		t.Fatalf("%d creates succeeded beyond the concurrency limit", early.Load())
	}
	if firstStart.Load() == 0 {
		t.Fatal("no create started within a minute of the delete")
	}
	sinceDelete := time.Duration(firstStart.Load() - deletedAt.Load())
	t.Logf("%d callers, %s at the concurrency limit: %d createSandbox requests (%.1f/s); the first start came %s after the delete",
		callers, storm.Round(time.Second), creates, float64(creates)/time.Since(stormStart).Seconds(), sinceDelete.Round(time.Millisecond))

	// The bound: the first round (every caller at once, before any 429
	// came back), then one probe per backoff step (1+2+4+8+16 s, then
	// every 30 s), each answered in a few ms.
	probes := 1
	for step, elapsed := time.Second, time.Duration(0); elapsed < storm; step = min(2*step, 30*time.Second) {
		elapsed += step
		probes++
	}
	if limit := callers + probes; creates > limit {
		t.Errorf("%d createSandbox requests in %s, want at most %d", creates, storm, limit)
	}
	if sinceDelete > 5*time.Second {
		t.Errorf("the next create started %s after the delete, want within 5s", sinceDelete)
	}
}

// A 429 without Retry-After backs off exponentially: a caller that comes
// back when told sees its creates reach Vercel 100, 200, 400, 800 ms apart
// (with the schedule shortened to a 100 ms base), each with up to half again
// as jitter. Another credential is not held back.
func TestRateLimitWithoutRetryAfterBacksOffExponentially(t *testing.T) {
	te := newTimedEmulator(t)
	c := te.client(t, contractTeam, nil, nil)
	vercel.SetGateBackoff(c, 100*time.Millisecond, 10*time.Second)
	ctx := testCtx(t)
	te.Faults().SetMaxRunning(0) // every create is refused, without Retry-After

	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		_, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "backoff"})
		if !vercel.IsRateLimited(err) || vercel.RetryAfter(err) <= 0 {
			t.Fatalf("create at the concurrency limit: %v (RetryAfter %s)", err, vercel.RetryAfter(err))
		}
		time.Sleep(vercel.RetryAfter(err))
	}
	got := te.arrivals("POST /v3/sandboxes")
	if len(got) < 4 {
		t.Fatalf("%d creates reached Vercel in 2s, want at least 4", len(got))
	}
	step := 100 * time.Millisecond
	for i := 1; i < len(got); i++ {
		gap := got[i].at.Sub(got[i-1].at)
		if gap < step || gap > step*3/2+150*time.Millisecond {
			t.Errorf("gap %d = %s, want %s to %s", i, gap, step, step*3/2)
		}
		step *= 2
	}

	other := te.client(t, "team_other", nil, nil)
	start := time.Now()
	_, err := other.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "other"})
	if !vercel.IsRateLimited(err) || vercel.RetryAfter(err) < time.Second {
		t.Fatalf("other team's create: %v", err)
	}
	if n := len(te.arrivals("POST /v3/sandboxes")); n != len(got)+1 || time.Since(start) > time.Second {
		t.Errorf("another credential's create was held back (%d creates sent, %s)", n-len(got), time.Since(start))
	}
}

// A 429 on one Client delays the other Clients of the same credential: a
// call made during the Retry-After fails at once unsent, one made near its
// end waits for it; a Client of another credential goes on.
func TestRateLimitSlowsEveryClientOfTheCredential(t *testing.T) {
	te := newTimedEmulator(t)
	a := te.client(t, contractTeam, nil, nil)
	b := te.client(t, contractTeam, nil, nil)
	other := te.client(t, "team_other", nil, nil)
	ctx := testCtx(t)

	te.Faults().RateLimit("listSandboxes", 1, 2*time.Second)
	aDone := make(chan error, 1)
	go func() { _, err := a.ListSandboxes(ctx, vercel.ListSandboxesOptions{}); aDone <- err }()
	var limitedAt time.Time
	for limitedAt.IsZero() {
		if l := te.arrivals("GET /v2/sandboxes"); len(l) > 0 {
			limitedAt = l[0].at
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)

	_, err := b.GetSandbox(ctx, "anything", false)
	if !vercel.IsRateLimited(err) || vercel.RetryAfter(err) < time.Second || !strings.Contains(err.Error(), vercel.CodeClientThrottled) {
		t.Errorf("b during a's Retry-After: %v (RetryAfter %s)", err, vercel.RetryAfter(err))
	}
	if n := len(te.arrivals("GET /v2/sandboxes/")); n != 0 {
		t.Errorf("b's call reached Vercel during the Retry-After (%d requests)", n)
	}
	if _, err := other.ListSandboxes(ctx, vercel.ListSandboxesOptions{}); err != nil {
		t.Errorf("another credential during the Retry-After: %v", err)
	}
	if got := te.arrivals("GET /v2/sandboxes"); len(got) != 2 || got[1].team != "team_other" {
		t.Errorf("arrivals %+v, want a's and the other team's", got)
	}

	time.Sleep(time.Until(limitedAt.Add(1200 * time.Millisecond)))
	if _, err := b.GetSandbox(ctx, "missing", false); !vercel.IsNotFound(err) {
		t.Errorf("b near the end of the Retry-After: %v, want it to wait and reach Vercel (404)", err)
	}
	if got := te.arrivals("GET /v2/sandboxes/missing"); len(got) != 1 || got[0].at.Sub(limitedAt) < 2*time.Second {
		t.Errorf("b's request arrived %v after the 429, want after the 2s Retry-After", got)
	}
	if err := <-aDone; err != nil {
		t.Errorf("a after its Retry-After: %v", err)
	}
}

// A black-holed endpoint: its calls fail at the call deadline and give
// their in-flight slots back, so other calls still complete.
func TestBlackHoledEndpointFailsAtTheDeadline(t *testing.T) {
	te := newTimedEmulator(t)
	hc, slots := httplimit.NewClient(httplimit.Options{MaxInFlight: 2})
	c := te.client(t, contractTeam, hc, func(cfg *vercel.Config) { cfg.CallTimeout = 500 * time.Millisecond })
	ctx := testCtx(t)
	te.Faults().SetLatency("getSandbox", time.Hour)

	var wg sync.WaitGroup
	errs := make([]error, 4)
	took := make([]time.Duration, 4)
	start := time.Now()
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = c.GetSandbox(ctx, "anything", false)
			took[i] = time.Since(start)
		})
	}
	time.Sleep(100 * time.Millisecond)
	// Both slots are held by black-holed calls; a list waits for one.
	if _, err := c.ListSandboxes(ctx, vercel.ListSandboxesOptions{}); err != nil {
		t.Errorf("list while the slots were black-holed: %v", err)
	}
	listTook := time.Since(start)
	wg.Wait()
	for i, err := range errs {
		if !vercel.IsTimeout(err) || !vercel.IsTransient(err) || vercel.Reason(err) != vercel.ReasonTransient {
			t.Errorf("black-holed call %d: %v", i, err)
		}
		if took[i] < 500*time.Millisecond || took[i] > 2*time.Second {
			t.Errorf("black-holed call %d failed after %s, want at the 500ms deadline", i, took[i])
		}
	}
	if listTook > 2*time.Second {
		t.Errorf("the list completed after %s, want soon after the deadline freed a slot", listTook)
	}
	if err := slots.Stalled(time.Nanosecond); err != nil {
		t.Errorf("slots still held: %v", err)
	}
	for _, a := range te.arrivals("GET /v2/sandboxes/anything") {
		if !a.canceled {
			t.Error("a black-holed request was answered")
		}
	}
}

// With every regular slot held by slow creates, a delete, a stop and an
// extension still go at once on the reserved lane, while a read waits.
func TestDeletesKeepALaneUnderContention(t *testing.T) {
	te := newTimedEmulator(t)
	hc, _ := httplimit.NewClient(httplimit.Options{MaxInFlight: 2, Reserved: 1})
	c := te.client(t, contractTeam, hc, nil)
	ctx := testCtx(t)
	victim, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	te.Faults().SetLatency("createSandbox", 3*time.Second)
	for i := range 4 {
		go func() { _, _ = c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: fmt.Sprintf("slow-%d", i)}) }()
	}
	time.Sleep(200 * time.Millisecond)

	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := c.GetSandbox(rctx, "kept", false); err == nil {
		t.Error("a read got through with every regular slot held: the test shows nothing")
	}
	for _, tc := range []struct {
		name string
		call func(context.Context) error
	}{
		{"extend", func(ctx context.Context) error {
			_, err := c.ExtendTimeout(ctx, victim.Session.ID, time.Minute)
			return err
		}},
		{"stop", func(ctx context.Context) error { _, err := c.StopSession(ctx, victim.Session.ID); return err }},
		{"delete", func(ctx context.Context) error { _, err := c.DeleteSandbox(ctx, "victim", false); return err }},
	} {
		name, call := tc.name, tc.call
		start := time.Now()
		if err := call(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %s with the regular slots held by creates", name, d)
		}
	}
}
