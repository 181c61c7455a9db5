package vercel

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTokenNeverPrinted(t *testing.T) {
	const secret = "tok-SECRET-do-not-print"
	cfg := Config{BaseURL: "https://api.vercel.com", Token: secret, TeamID: "team_1", ProjectID: "prj_1"}
	oidcCfg := Config{OIDCToken: jwt(t, `{"owner_id":"team_o","project_id":"prj_o","note":"`+secret+`"}`)}
	c, err := New(Config{Token: secret, TeamID: "team_1", RequestsPerMinute: -1})
	if err != nil {
		t.Fatal(err)
	}
	type wrapper struct {
		Cfg    Config
		Client *Client
	}
	values := map[string]any{
		"Config": cfg, "*Config": &cfg, "OIDC Config": oidcCfg, "Client": c, "wrapper": wrapper{cfg, c}, "slice": []Config{cfg},
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			out := fmt.Sprintf(verb, v)
			if strings.Contains(out, "SECRET") {
				t.Errorf("%s with %s prints the token: %s", name, verb, out)
			}
		}
	}
	if s := cfg.String(); !strings.Contains(s, "team_1") || !strings.Contains(s, redacted) {
		t.Errorf("String() = %s: should show the team and mark the token redacted", s)
	}
	if s := c.String(); !strings.Contains(s, "team_1") {
		t.Errorf("Client.String() = %s", s)
	}
}

func TestTokenNeverInErrors(t *testing.T) {
	tok := ""
	// A broken proxy echoing the request, Authorization header included.
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		writeError(w, 401, "forbidden", "bad credentials: "+r.Header.Get("Authorization")+" "+r.Header.Get("Authorization"))
	})
	c, _ := newTestClient(t, f, nil)
	tok = testToken(t)
	_, err := c.GetSession(context.Background(), "sbx_1")
	if err == nil || strings.Contains(err.Error(), tok) {
		t.Errorf("error leaks the token: %v", err)
	}
	var ae *APIError
	if errors.As(err, &ae) && (strings.Contains(ae.Message, tok) || !strings.Contains(ae.Message, redacted)) {
		t.Errorf("message = %q", ae.Message)
	}
	// New's errors never echo a token either.
	for _, cfg := range []Config{
		{Token: "tok-SECRET-1", OIDCToken: "tok-SECRET-2"},
		{Token: "tok-SECRET\x01bad"},
		{OIDCToken: "tok-SECRET.not.jwt"},
		{OIDCToken: "a.tok-SECRET.c"},
		{Token: "tok-SECRET", BaseURL: "ftp://x"},
	} {
		if _, err := New(cfg); err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("New(%v) = %v", cfg, err)
		}
	}
}

func jwt(t *testing.T, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc([]byte(payload)) + "." + enc([]byte("sig"))
}

func TestOIDCTokenSuppliesScope(t *testing.T) {
	tok := jwt(t, `{"owner_id":"team_oidc","project_id":"prj_oidc","exp":4102444800,"iat":1}`)
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { writeJSON(w, 200, map[string]any{}) })
	c, err := New(Config{BaseURL: f.srv.URL, OIDCToken: tok, RequestsPerMinute: -1})
	if err != nil {
		t.Fatal(err)
	}
	if c.TeamID() != "team_oidc" || c.ProjectID() != "prj_oidc" {
		t.Errorf("scope = %s/%s", c.TeamID(), c.ProjectID())
	}
	if _, err := c.CreateSandbox(context.Background(), CreateSandboxRequest{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	if r.Header.Get("Authorization") != "Bearer "+tok || r.Query.Get("teamId") != "team_oidc" {
		t.Errorf("auth %q, query %v", r.Header.Get("Authorization"), r.Query)
	}
	jsonEqual(t, r.Body, `{"name":"x","projectId":"prj_oidc"}`)

	bad := map[string]Config{
		"not a jwt":        {OIDCToken: "abc"},
		"payload not b64":  {OIDCToken: "a.!!!.c"},
		"payload not json": {OIDCToken: "a." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + ".c"},
		"no owner":         {OIDCToken: jwt(t, `{"project_id":"p"}`)},
		"team conflict":    {OIDCToken: tok, TeamID: "team_other"},
		"project conflict": {OIDCToken: tok, ProjectID: "prj_other"},
	}
	for name, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	// Padded base64 payloads are tolerated.
	parts := strings.Split(jwt(t, `{"owner_id":"t","project_id":"p"}`), ".")
	padded := parts[0] + "." + parts[1] + "==." + parts[2]
	if _, err := New(Config{OIDCToken: padded, RequestsPerMinute: -1}); err != nil {
		t.Errorf("padded payload: %v", err)
	}
}

func TestNewValidatesAndDefaults(t *testing.T) {
	bad := map[string]Config{
		"no token":         {},
		"both tokens":      {Token: "a", OIDCToken: "b"},
		"relative base":    {Token: "a", BaseURL: "/v2"},
		"base with query":  {Token: "a", BaseURL: "https://x?y=1"},
		"client timeout":   {Token: "a", HTTPClient: &http.Client{Timeout: time.Minute}},
		"space in a token": {Token: "a b"},
	}
	for name, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	c, err := New(Config{Token: " tok-trimmed\n"})
	if err != nil {
		t.Fatal(err)
	}
	if c.baseURL != DefaultBaseURL || c.maxRetries != 2 || c.maxRetryAfter != 20*time.Second || c.limiter == nil ||
		c.callTimeout != 30*time.Second || c.streamIdle != time.Minute || c.cred == nil ||
		c.tokens.current() != "tok-trimmed" || c.hc.Timeout != 0 || !strings.HasPrefix(c.userAgent, "sandbox-controller") {
		t.Errorf("defaults: %+v retries=%d maxRA=%v", c, c.maxRetries, c.maxRetryAfter)
	}
	c, err = New(Config{Token: "x", MaxRetries: -1, MaxRetryAfter: -1, RequestsPerMinute: -1, CallTimeout: -1, StreamIdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if c.maxRetries != 0 || c.maxRetryAfter != 0 || c.limiter != nil || c.callTimeout != 0 || c.streamIdle != 0 {
		t.Errorf("negative settings not honoured: retries=%d maxRA=%v limiter=%v call=%s idle=%s", c.maxRetries, c.maxRetryAfter, c.limiter, c.callTimeout, c.streamIdle)
	}
	// Pacing off or on, Clients of one credential share its 429 gates.
	if d, _ := New(Config{Token: "x"}); d.cred != c.cred {
		t.Error("two Clients of one credential do not share the 429 gates")
	}
}

// The limiter lets a second's worth of requests through at once, then one
// every 1/rate; later callers queue behind earlier ones.
func TestLimiterRate(t *testing.T) {
	lim := newLimiter(600) // 10/s, burst 10
	now := time.Now()
	delay := func() time.Duration { return lim.ReserveN(now, 1).DelayFrom(now) }
	for i := range 10 {
		if d := delay(); d != 0 {
			t.Fatalf("request %d within the burst waited %v", i, d)
		}
	}
	if d := delay(); d != 100*time.Millisecond {
		t.Errorf("11th waits %v, want 100ms", d)
	}
	if d := delay(); d != 200*time.Millisecond {
		t.Errorf("12th waits %v, want 200ms (queued behind the 11th)", d)
	}
	now = now.Add(time.Second) // 10 tokens refill, 2 owed
	for i := range 8 {
		if d := delay(); d != 0 {
			t.Fatalf("after refill, request %d waited %v", i, d)
		}
	}
	if d := delay(); d <= 0 {
		t.Error("bucket over-refilled")
	}
	if b := newLimiter(30).Burst(); b != 1 {
		t.Errorf("burst at 30/min = %d, want 1", b)
	}

	// A lower rate from a second client wins; a higher one does not raise
	// the shared limit.
	key := limiterKey("https://api.example", testToken(t), "team_1")
	shared := sharedLimiter(key, 6000)
	if sharedLimiter(key, 60) != shared || shared.Limit() != 1 || shared.Burst() != 1 {
		t.Errorf("rate %v burst %d after a client asked for 60/min", shared.Limit(), shared.Burst())
	}
	sharedLimiter(key, 6000)
	if shared.Limit() != 1 || shared.Burst() != 1 {
		t.Errorf("a higher rate raised the shared limit to %v, burst %d", shared.Limit(), shared.Burst())
	}
}

// Clients with the same credential share one limiter; the limiter really
// paces requests and reports its waits.
func TestLimiterSharedPerCredential(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { writeJSON(w, 200, map[string]any{}) })
	var hookWaits atomic.Int64
	mk := func(token, team string) *Client {
		c, err := New(Config{BaseURL: f.srv.URL, Token: token, TeamID: team, RequestsPerMinute: 600,
			OnLimiterWait: func(d time.Duration) { hookWaits.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tok := testToken(t)
	a, b := mk(tok, "team_1"), mk(tok, "team_1")
	if a.limiter != b.limiter {
		t.Fatal("same credential, different limiters")
	}
	if mk(tok, "team_2").limiter == a.limiter || mk(tok+"x", "team_1").limiter == a.limiter {
		t.Fatal("different credentials share a limiter")
	}
	registryMu.Lock()
	for k := range registry {
		if strings.Contains(k, "SECRET") {
			t.Errorf("registry key holds the token: %s", k)
		}
	}
	registryMu.Unlock()

	// 600/min = 10/s with a burst of 10: 40 requests from two clients need
	// at least 3 s, and 30 of them wait. The rate is low so that a test
	// process descheduled while it starts its goroutines (make test runs
	// this package under nice beside others) refills few tokens: at 100/s a
	// run counted 45 waits of 60.
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 40 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			if _, err := c.GetSession(context.Background(), "sbx_1"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if el := time.Since(start); el < 2750*time.Millisecond {
		t.Errorf("40 requests at 10/s took only %v", el)
	}
	if a.LimiterWaits()+b.LimiterWaits() < 25 || hookWaits.Load() != a.LimiterWaits()+b.LimiterWaits() {
		t.Errorf("waits: a=%d b=%d hook=%d", a.LimiterWaits(), b.LimiterWaits(), hookWaits.Load())
	}
}

func TestLimiterWaitHonoursContext(t *testing.T) {
	lim := newLimiter(60) // 1/s, burst 1
	if !lim.Allow() {
		t.Fatal("a new limiter has no token")
	}
	// start is taken before the deadline is set: taken after, a descheduled
	// goroutine under load measured less than the 20 ms that had passed.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := waitLimiter(ctx, lim); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if el := time.Since(start); el < 20*time.Millisecond || el > 500*time.Millisecond {
		t.Errorf("wait returned after %v, want when the context expired (20ms)", el)
	}
	// The abandoned reservation was returned: the next caller waits under
	// 1 s, not 2.
	if d := lim.Reserve().Delay(); d > time.Second || d < 500*time.Millisecond {
		t.Errorf("next reservation waits %v, want just under 1s", d)
	}
}
