package vercel

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/getsentry/sandbox-controller/internal/httplimit"
)

// DefaultBaseURL is the public API host (docs/dev/vercel-sandbox-api.md §2.1).
// The SDK's https://vercel.com/api works too; BaseURL may carry such a path
// prefix.
const DefaultBaseURL = "https://api.vercel.com"

// Defaults applied by New to zero Config fields.
const (
	// DefaultRequestsPerMinute is the Pro plan's control-plane limit
	// (docs/dev/vercel-sandbox-api.md §8).
	DefaultRequestsPerMinute = 10000
	DefaultMaxRetryAfter     = 20 * time.Second
	DefaultMaxRetries        = 2
	// DefaultCallTimeout bounds a call: above the slowest answer seen from
	// the API (a create with a large snapshot, a few seconds) with room for
	// a retry, and far below the minutes that would wedge a reconciler.
	DefaultCallTimeout = 30 * time.Second
	// DefaultStreamIdleTimeout ends a stream that delivers no byte for this
	// long.
	DefaultStreamIdleTimeout = time.Minute
)

// Config configures a Client. Exactly one of Token, TokenFile and OIDCToken
// is required.
//
// Config's String, GoString and Format never print the tokens, so a Config
// can be logged with %v or %+v.
type Config struct {
	// BaseURL defaults to DefaultBaseURL.
	BaseURL string
	// Token is a Vercel access token; it needs TeamID and ProjectID.
	Token string
	// TokenFile is a file holding a Vercel access token (a mounted Secret),
	// read by New and again every TokenReloadInterval and at once after a
	// 401 or 403, so that a rotated token is used without a restart. A
	// request rejected with the old token is sent again once with the new
	// one. It needs TeamID and ProjectID like Token.
	TokenFile string
	// TokenReloadInterval is how often TokenFile is read again; 0 means
	// DefaultTokenReloadInterval.
	TokenReloadInterval time.Duration
	// TeamID is sent as the teamId query parameter on every request
	// (docs/dev/vercel-sandbox-api.md §2.3).
	TeamID string
	// ProjectID scopes creates (body) and name-addressed and list calls (query).
	ProjectID string
	// OIDCToken is a Vercel OIDC JWT used as the bearer token. Its unverified
	// payload supplies TeamID (owner_id) and ProjectID (project_id) when those
	// are empty (docs/dev/vercel-sandbox-api.md §2.2). The client does not
	// refresh it: build a new Client with a fresh token before it expires.
	OIDCToken string
	// HTTPClient defaults to a client on http.DefaultTransport. Its Timeout
	// must be 0: streaming calls may last hours, so every call is bounded by
	// its context and CallTimeout/StreamIdleTimeout instead. The manager's is
	// an internal/httplimit client, whose reserved slots the client uses for
	// deletes, stops and session extensions.
	HTTPClient *http.Client
	// CallTimeout bounds every call that is not a stream — all its attempts,
	// retry waits and queueing included — and, for a stream, the wait for
	// its response headers. A call that runs out fails with a
	// *TransientError wrapping ErrCallTimeout. 0 means DefaultCallTimeout;
	// negative means none (only the caller's context bounds calls).
	CallTimeout time.Duration
	// StreamIdleTimeout ends a stream (command output, a file read) when a
	// read has waited this long without a byte, with a *TransientError
	// wrapping ErrStreamIdle. A stream's total length is not bounded: a
	// command may run for hours. 0 means DefaultStreamIdleTimeout; negative
	// means none.
	StreamIdleTimeout time.Duration
	// RequestsPerMinute paces requests through a token bucket shared by every
	// Client with the same BaseURL, token and team. 0 means
	// DefaultRequestsPerMinute; negative disables pacing.
	RequestsPerMinute int
	// MaxRetryAfter is the longest 429 Retry-After the client sleeps through
	// before retrying; longer ones are returned at once. 0 means
	// DefaultMaxRetryAfter; negative never sleeps on a 429.
	MaxRetryAfter time.Duration
	// MaxRetries bounds re-sends of retryable calls. 0 means
	// DefaultMaxRetries; negative disables retries.
	MaxRetries int
	// UserAgent defaults to "sandbox-controller (<go version>)".
	UserAgent string
	// OnRequest, when set, is called after every HTTP attempt with the
	// endpoint name, the status (0 when no answer arrived) and the time to
	// response headers. It must be fast and safe for concurrent use.
	OnRequest func(endpoint string, status int, d time.Duration)
	// OnLimiterWait, when set, is called whenever the rate limiter delayed a
	// request, with the delay.
	OnLimiterWait func(d time.Duration)
}

const redacted = "[redacted]"

func redact(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// String describes the configuration with both tokens redacted.
func (c Config) String() string {
	return fmt.Sprintf("vercel.Config{BaseURL:%q, TeamID:%q, ProjectID:%q, Token:%q, TokenFile:%q, OIDCToken:%q, RequestsPerMinute:%d, MaxRetryAfter:%s, MaxRetries:%d, CallTimeout:%s, StreamIdleTimeout:%s, UserAgent:%q}",
		c.BaseURL, c.TeamID, c.ProjectID, redact(c.Token), c.TokenFile, redact(c.OIDCToken),
		c.RequestsPerMinute, c.MaxRetryAfter, c.MaxRetries, c.CallTimeout, c.StreamIdleTimeout, c.UserAgent)
}

// GoString is String: %#v must not print the tokens either.
func (c Config) GoString() string { return c.String() }

// Format makes every verb (%v, %+v, %#v, %s, %q, …) print the redacted form;
// without it fmt would walk the struct fields and print the token.
func (c Config) Format(f fmt.State, verb rune) { formatRedacted(f, verb, c.String()) }

func formatRedacted(f fmt.State, verb rune, s string) {
	if verb == 'q' {
		s = fmt.Sprintf("%q", s)
	}
	io.WriteString(f, s)
}

// Client calls the Vercel Sandbox API. It is safe for concurrent use.
type Client struct {
	baseURL   string
	tokens    *tokenSource
	teamID    string
	projectID string
	userAgent string
	hc        *http.Client
	// projectOK is set once a list of the project succeeded: from then on a
	// 404 on a delete means the sandbox is gone, not that the project is
	// wrong (VerifyProject).
	projectOK atomic.Bool

	maxRetries    int
	maxRetryAfter time.Duration
	limiter       *rate.Limiter // shared per credential; nil: unpaced
	cred          *credential   // shared per credential: the 429 gates
	callTimeout   time.Duration // 0: none
	streamIdle    time.Duration // 0: none
	// The causes a timed-out call or stream carries, built once.
	callTimeoutErr, headerTimeoutErr, streamIdleErr error

	onRequest     func(string, int, time.Duration)
	onLimiterWait func(time.Duration)
	limiterWaits  atomic.Int64
	retries       *retryBudget

	// backoffBase, gateBackoff, maxGateWait, sleep and now are fields so
	// unit tests can observe and shorten the waits without changing the
	// policy.
	backoffBase time.Duration
	gateBackoff throttleBackoff
	// maxGateWait is the longest a request waits for a closed 429 gate;
	// beyond it the call fails at once with CodeClientThrottled, so that a
	// reconciler requeues instead of blocking a worker.
	maxGateWait time.Duration
	sleep       func(context.Context, time.Duration) error
	now         func() time.Time
}

// New validates cfg and returns a Client. Its errors never contain a token.
func New(cfg Config) (*Client, error) {
	c := &Client{
		teamID:        cfg.TeamID,
		projectID:     cfg.ProjectID,
		userAgent:     cfg.UserAgent,
		hc:            cfg.HTTPClient,
		maxRetries:    cfg.MaxRetries,
		maxRetryAfter: cfg.MaxRetryAfter,
		onRequest:     cfg.OnRequest,
		onLimiterWait: cfg.OnLimiterWait,
		// The SDK's minTimeout (docs/dev/vercel-sandbox-api.md §7.5).
		backoffBase: 400 * time.Millisecond,
		gateBackoff: throttleBackoff{base: time.Second, cap: 30 * time.Second},
		maxGateWait: time.Second,
		retries:     newRetryBudget(),
		sleep:       sleepCtx,
		now:         time.Now,
	}

	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("vercel: invalid BaseURL %q: want http(s)://host[/prefix]", base)
	}
	c.baseURL = strings.TrimRight(u.String(), "/")

	// Secrets mounted from files often end in a newline; the header would be
	// rejected, so trim instead of failing later on every call.
	token, oidc := strings.TrimSpace(cfg.Token), strings.TrimSpace(cfg.OIDCToken)
	given := 0
	for _, set := range []bool{token != "", cfg.TokenFile != "", oidc != ""} {
		if set {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, errors.New("vercel: set one of Token, TokenFile and OIDCToken")
	case given == 0:
		return nil, errors.New("vercel: Token, TokenFile or OIDCToken is required")
	case cfg.TokenFile != "":
		c.tokens = &tokenSource{file: cfg.TokenFile, interval: durationOr(cfg.TokenReloadInterval, DefaultTokenReloadInterval)}
		if token, err = readTokenFile(cfg.TokenFile); err != nil {
			return nil, err
		}
		c.tokens.token, c.tokens.readAt = token, time.Now()
	case oidc != "":
		team, project, err := oidcClaims(oidc)
		if err != nil {
			return nil, err
		}
		if c.teamID == "" {
			c.teamID = team
		} else if c.teamID != team {
			return nil, fmt.Errorf("vercel: TeamID %q conflicts with the OIDC token's owner_id %q", c.teamID, team)
		}
		if c.projectID == "" {
			c.projectID = project
		} else if c.projectID != project {
			return nil, fmt.Errorf("vercel: ProjectID %q conflicts with the OIDC token's project_id %q", c.projectID, project)
		}
		token = oidc
	}
	if err := checkTokenChars(token); err != nil {
		return nil, err
	}
	if c.tokens == nil {
		c.tokens = &tokenSource{token: token}
	}

	if c.hc == nil {
		c.hc = &http.Client{}
	} else if c.hc.Timeout != 0 {
		return nil, errors.New("vercel: HTTPClient.Timeout must be 0 (streaming calls last as long as a command); bound calls with a context")
	}
	if c.userAgent == "" {
		c.userAgent = "sandbox-controller (" + runtime.Version() + ")"
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = DefaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	switch {
	case c.maxRetryAfter == 0:
		c.maxRetryAfter = DefaultMaxRetryAfter
	case c.maxRetryAfter < 0:
		c.maxRetryAfter = 0
	}
	c.callTimeout = durationOr(cfg.CallTimeout, DefaultCallTimeout)
	c.streamIdle = durationOr(cfg.StreamIdleTimeout, DefaultStreamIdleTimeout)
	c.callTimeoutErr = fmt.Errorf("%w after %s: %w", ErrCallTimeout, c.callTimeout, context.DeadlineExceeded)
	c.headerTimeoutErr = fmt.Errorf("%w after %s waiting for the stream to start: %w", ErrCallTimeout, c.callTimeout, context.DeadlineExceeded)
	c.streamIdleErr = fmt.Errorf("%w: no data for %s", ErrStreamIdle, c.streamIdle)
	// The 429 gates and the request budget belong to the credential; a
	// token file keeps its slot across rotations.
	keyToken := token
	if cfg.TokenFile != "" {
		keyToken = "file:" + cfg.TokenFile
	}
	key := limiterKey(c.baseURL, keyToken, c.teamID)
	c.cred = sharedCredential(key)
	rpm := cfg.RequestsPerMinute
	if rpm == 0 {
		rpm = DefaultRequestsPerMinute
	}
	if rpm > 0 {
		c.limiter = sharedLimiter(key, rpm)
	}
	return c, nil
}

// durationOr applies the convention of Config's durations: 0 means def,
// negative means none (0).
func durationOr(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// oidcClaims reads owner_id and project_id from a JWT payload without verifying
// it, as the SDK does (docs/dev/vercel-sandbox-api.md §2.2): the server
// verifies; the client only needs the scope.
func oidcClaims(tok string) (team, project string, err error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", "", errors.New("vercel: OIDCToken is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", "", errors.New("vercel: OIDCToken payload is not base64url")
	}
	var claims struct {
		OwnerID   string `json:"owner_id"`
		ProjectID string `json:"project_id"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", "", errors.New("vercel: OIDCToken payload is not JSON")
	}
	if claims.OwnerID == "" || claims.ProjectID == "" {
		return "", "", errors.New("vercel: OIDCToken lacks owner_id or project_id")
	}
	return claims.OwnerID, claims.ProjectID, nil
}

// TeamID is the team every request is scoped to ("" = personal account).
func (c *Client) TeamID() string { return c.teamID }

// ProjectID is the project creates and lists are scoped to.
func (c *Client) ProjectID() string { return c.projectID }

// LimiterWaits counts the requests this Client delayed in the rate limiter.
func (c *Client) LimiterWaits() int64 { return c.limiterWaits.Load() }

// String describes the client without its token.
func (c *Client) String() string {
	return fmt.Sprintf("vercel.Client{BaseURL:%q, TeamID:%q, ProjectID:%q, Token:%q}",
		c.baseURL, c.teamID, c.projectID, redacted)
}

// GoString is String.
func (c *Client) GoString() string { return c.String() }

// Format keeps %+v and %#v of a *Client from printing the token field.
func (c *Client) Format(f fmt.State, verb rune) { formatRedacted(f, verb, c.String()) }

// retryPolicy says whether an endpoint may be re-sent after a failure.
type retryPolicy int

const (
	// sendOnce: re-sending could repeat a side effect (an unnamed create, a
	// command run, a snapshot, a fork, a file write, a timeout extension).
	sendOnce retryPolicy = iota
	// retryable: reads and calls whose repetition is harmless
	// (docs/dev/vercel-sandbox-api.md §9b).
	retryable
)

// request is one API call before it is turned into HTTP attempts.
type request struct {
	endpoint    string
	method      string
	path        string // already escaped
	query       url.Values
	body        []byte
	contentType string
	header      http.Header
	retry       retryPolicy
	// lane says which 429 gates hold the request back and whether it may
	// use the reserved in-flight slots (throttle.go).
	lane lane
	// releases: a success ends a session, so a start may be tried at once.
	releases bool
	// alreadyDone, when set, recognises an error answer that means an
	// earlier attempt, which may have committed before failing (5xx or no
	// answer), did the work: e.g. a duplicate name after a retried create.
	alreadyDone func(*APIError) bool
}

// alreadyDoneError tells the endpoint method that a retried call had in fact
// succeeded earlier; the method then reads the result back.
type alreadyDoneError struct{ err *APIError }

func (e *alreadyDoneError) Error() string { return e.err.Error() }
func (e *alreadyDoneError) Unwrap() error { return e.err }

// jsonRequest builds a request with a JSON body (nil body: none at all).
func (c *Client) jsonRequest(endpoint, method, path string, query url.Values, body any, retry retryPolicy) (*request, error) {
	r := &request{endpoint: endpoint, method: method, path: path, query: query, retry: retry}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("vercel %s: encode request: %w", endpoint, err)
		}
		r.body, r.contentType = b, "application/json"
	}
	return r, nil
}

// send performs r with the 429 gates, limiter pacing and the retry policy,
// and returns the first 2xx response (body unread) or a typed error.
func (c *Client) send(ctx context.Context, r *request) (*http.Response, error) {
	mayHaveCommitted, reauthed := false, false
	for attempt := 0; ; attempt++ {
		tk, err := c.admit(ctx, r)
		if err != nil {
			return nil, err
		}
		token := c.tokens.get(c.now())
		req, err := c.newHTTPRequest(ctx, r, token)
		if err != nil {
			c.settle(tk, r, 0, 0)
			return nil, err
		}
		start := time.Now()
		resp, err := c.hc.Do(req)
		elapsed := time.Since(start)
		if err != nil {
			c.settle(tk, r, 0, 0)
			c.observe(r.endpoint, 0, elapsed)
			if ctx.Err() != nil {
				return nil, c.ctxError(r.endpoint, context.Cause(ctx))
			}
			c.retries.record(true)
			// The request may have reached the server before the connection
			// broke: a retry might find the work already done.
			mayHaveCommitted = true
			terr := &TransientError{Endpoint: r.endpoint, Err: err}
			if r.retry != retryable || attempt >= c.maxRetries || !c.retries.allow() {
				return nil, terr
			}
			if err := c.sleep(ctx, c.backoff(attempt)); err != nil {
				return nil, c.ctxError(r.endpoint, err)
			}
			continue
		}
		c.observe(r.endpoint, resp.StatusCode, elapsed)
		c.retries.record(resp.StatusCode >= 500)
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			c.settle(tk, r, resp.StatusCode, 0)
			return resp, nil
		}

		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		apiErr := newAPIError(r.endpoint, resp, body, token)
		gateWait := c.settle(tk, r, resp.StatusCode, apiErr.RetryAfter)
		if (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && !reauthed && c.tokens.reload(c.now()) {
			// The token file changed since it was last read (a rotated
			// Secret): a rejected request did nothing, so send it once more
			// with the new token, whatever its retry policy.
			reauthed = true
			attempt--
			continue
		}
		if resp.StatusCode == http.StatusTooManyRequests && apiErr.RetryAfter == 0 {
			if r.lane == laneFree {
				apiErr.Backoff = c.backoff(attempt) // not gated: its own backoff
			} else {
				apiErr.Backoff = jitter(gateWait)
			}
		}

		if attempt > 0 && mayHaveCommitted && r.alreadyDone != nil && r.alreadyDone(apiErr) {
			return nil, &alreadyDoneError{apiErr}
		}
		if r.retry != retryable || attempt >= c.maxRetries || (resp.StatusCode >= 500 && !c.retries.allow()) {
			return nil, apiErr
		}
		var wait time.Duration
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			// A 429 without Retry-After on a start is the concurrency
			// limit: it clears when a session ends, not in a second, so the
			// caller requeues after the credential's backoff rather than
			// retry now (docs/dev/vercel-sandbox-api.md §7.2).
			if apiErr.RetryAfter == 0 && r.lane == laneStart {
				return nil, apiErr
			}
			wait = apiErr.RetryAfter
			if wait == 0 {
				wait = apiErr.Backoff
			}
			// A long wait is the caller's to honour (requeue), not ours to
			// block on; nor is one that would outlive the call's deadline.
			if wait > c.maxRetryAfter || !fitsDeadline(ctx, wait) {
				return nil, apiErr
			}
		case resp.StatusCode >= 500:
			mayHaveCommitted = true
			wait = c.backoff(attempt)
		default:
			return nil, apiErr
		}
		if err := c.sleep(ctx, wait); err != nil {
			return nil, c.ctxError(r.endpoint, err)
		}
	}
}

// admit waits for the credential's 429 gates (throttle.go) and the rate
// limiter. A gate closed for longer than maxGateWait, or past ctx's deadline,
// fails the call at once with a 429 CodeClientThrottled whose Backoff says
// when to come back; the request is not sent.
func (c *Client) admit(ctx context.Context, r *request) (ticket, error) {
	var tk ticket
	for i := 0; ; i++ {
		var wait time.Duration
		tk, wait = c.cred.throttle.admit(r.lane, c.now(), c.gateBackoff)
		if wait <= 0 {
			break
		}
		if wait > c.maxGateWait || i >= 3 || !fitsDeadline(ctx, wait) {
			return ticket{}, &APIError{
				Status:   http.StatusTooManyRequests,
				Code:     CodeClientThrottled,
				Endpoint: r.endpoint,
				Message:  "not sent: Vercel answered 429 to this credential, and the client holds its requests back until the backoff ends",
				Backoff:  jitter(wait),
			}
		}
		if err := c.sleep(ctx, wait); err != nil {
			return ticket{}, c.ctxError(r.endpoint, err)
		}
	}
	if err := c.pace(ctx); err != nil {
		c.settle(tk, r, 0, 0)
		return ticket{}, c.ctxError(r.endpoint, err)
	}
	return tk, nil
}

func (c *Client) settle(tk ticket, r *request, status int, retryAfter time.Duration) time.Duration {
	return c.cred.throttle.settle(tk, status, retryAfter, r.releases, c.now(), c.gateBackoff)
}

// fitsDeadline reports whether d ends before ctx's deadline.
func fitsDeadline(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > d
}

func (c *Client) newHTTPRequest(ctx context.Context, r *request, token string) (*http.Request, error) {
	q := url.Values{}
	for k, v := range r.query {
		q[k] = v
	}
	if c.teamID != "" {
		q.Set("teamId", c.teamID)
	}
	u := c.baseURL + r.path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	if r.lane == laneFree {
		// Deletes, stops and extensions free capacity or keep a session
		// alive: they may use the reserved in-flight slots, so they do not
		// queue behind the creates waiting for that capacity.
		ctx = httplimit.WithPriority(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("vercel %s: build request: %w", r.endpoint, err)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("User-Agent", c.userAgent)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	return req, nil
}

// pace waits for the shared rate limiter.
func (c *Client) pace(ctx context.Context) error {
	if c.limiter == nil {
		return ctx.Err()
	}
	d, err := waitLimiter(ctx, c.limiter)
	if err != nil {
		return err
	}
	if d > 0 {
		c.limiterWaits.Add(1)
		if c.onLimiterWait != nil {
			c.onLimiterWait(d)
		}
	}
	return nil
}

func (c *Client) observe(endpoint string, status int, d time.Duration) {
	if c.onRequest != nil {
		c.onRequest(endpoint, status, d)
	}
}

// backoff is exponential from backoffBase (400 ms, 800 ms, …) with ±50 %
// jitter so that many reconcilers failing together do not retry in step.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.backoffBase << min(attempt, 10)
	return d/2 + rand.N(d)
}

// ctxError reports a call ended by its context: by the client's own call or
// idle deadline (a *TransientError: worth retrying), or by the caller.
func (c *Client) ctxError(endpoint string, err error) error {
	if errors.Is(err, ErrCallTimeout) || errors.Is(err, ErrStreamIdle) {
		return &TransientError{Endpoint: endpoint, Err: err}
	}
	return fmt.Errorf("vercel %s: %w", endpoint, err)
}

// withCallTimeout bounds a call that is not a stream by CallTimeout.
func (c *Client) withCallTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.callTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, c.callTimeout, c.callTimeoutErr)
}

// openBody sends a streaming request: CallTimeout bounds the wait for its
// response headers, then StreamIdleTimeout each read of its body. The
// returned context is the stream's (its cause says which limit ended it);
// closing the body releases it.
func (c *Client) openBody(ctx context.Context, r *request) (*http.Response, context.Context, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	var headers *time.Timer
	if c.callTimeout > 0 {
		headers = time.AfterFunc(c.callTimeout, func() { cancel(c.headerTimeoutErr) })
	}
	resp, err := c.send(sctx, r)
	if headers != nil {
		headers.Stop()
	}
	if err != nil {
		cancel(nil)
		return nil, nil, err
	}
	resp.Body = newIdleBody(resp.Body, c.streamIdle, c.streamIdleErr, cancel)
	return resp, sctx, nil
}

// idleBody cancels its stream when a Read waits longer than d without a
// byte. The clock runs only while a Read is blocked, so a consumer that is
// slow to call Read is not mistaken for a silent server.
type idleBody struct {
	rc     io.ReadCloser
	d      time.Duration
	timer  *time.Timer // nil: no limit
	cancel context.CancelCauseFunc
}

func newIdleBody(rc io.ReadCloser, d time.Duration, cause error, cancel context.CancelCauseFunc) *idleBody {
	b := &idleBody{rc: rc, d: d, cancel: cancel}
	if d > 0 {
		b.timer = time.AfterFunc(time.Hour, func() { cancel(cause) })
		b.timer.Stop()
	}
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.timer != nil {
		b.timer.Reset(b.d)
		defer b.timer.Stop()
	}
	return b.rc.Read(p)
}

func (b *idleBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// maxJSONBody bounds a JSON answer; the largest (a page of 50 sandboxes) is
// far below it.
const maxJSONBody = 32 << 20

// do sends r and decodes a JSON answer into out (nil: discard the body),
// within CallTimeout.
func (c *Client) do(ctx context.Context, r *request, out any) error {
	ctx, cancel := c.withCallTimeout(ctx)
	defer cancel()
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		return c.bodyError(ctx, r.endpoint, "decode JSON", err)
	}
	return nil
}

// bodyError classifies a failure while reading a 2xx body: a broken
// connection is transient, anything else is the server speaking nonsense.
func (c *Client) bodyError(ctx context.Context, endpoint, what string, err error) error {
	if ctx.Err() != nil {
		return c.ctxError(endpoint, context.Cause(ctx))
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) || errors.Is(err, io.EOF) {
		return &ProtocolError{Endpoint: endpoint, Message: what, Err: err}
	}
	return &TransientError{Endpoint: endpoint, Err: err}
}

// closeBody drains a little before closing so the connection can be reused.
func closeBody(b io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(b, 4096))
	b.Close()
}

// checkMediaType compares Content-Type by media type, ignoring parameters such
// as charset (docs/dev/vercel-sandbox-api.md §9b), instead of the SDK's exact
// string match.
func checkMediaType(endpoint string, resp *http.Response, want string) error {
	ct := resp.Header.Get("Content-Type")
	if mediaType(ct) != want {
		return &ProtocolError{Endpoint: endpoint, Message: fmt.Sprintf("content-type %q, want %s", ct, want)}
	}
	return nil
}

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return mt
}
