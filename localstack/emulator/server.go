package emulator

import (
	"bytes"
	"crypto/subtle"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// route is one API endpoint. Pattern segments starting with ':' are parameters.
type route struct {
	method   string
	versions string // e.g. "v2 v3 v4"
	pattern  []string
	op       string
	h        func(*reqCtx)
}

func (e *Emulator) routes() []route {
	const S = "sandboxes"
	seg := func(p string) []string { return strings.Split(p, "/") }
	return []route{
		{"POST", "v2 v3 v4", seg(S), "createSandbox", e.handleCreate},
		{"GET", "v2", seg(S), "listSandboxes", e.handleListSandboxes},

		{"GET", "v2", seg(S + "/sessions"), "listSessions", e.handleListSessions},
		{"GET", "v2", seg(S + "/sessions/:sid"), "getSession", e.handleGetSession},
		{"POST", "v2", seg(S + "/sessions/:sid/stop"), "stopSession", e.handleStopSession},
		{"POST", "v2", seg(S + "/sessions/:sid/extend-timeout"), "extendTimeout", e.handleExtendTimeout},
		{"POST", "v2", seg(S + "/sessions/:sid/network-policy"), "updateNetworkPolicy", e.handleNetworkPolicy},
		{"POST", "v2", seg(S + "/sessions/:sid/cmd"), "runCommand", e.handleRunCommand},
		{"GET", "v2", seg(S + "/sessions/:sid/cmd"), "listCommands", e.handleListCommands},
		{"GET", "v2", seg(S + "/sessions/:sid/cmd/:cid"), "getCommand", e.handleGetCommand},
		{"POST", "v2", seg(S + "/sessions/:sid/cmd/:cid/kill"), "killCommand", e.handleKillCommand},
		{"GET", "v2", seg(S + "/sessions/:sid/cmd/:cid/logs"), "commandLogs", e.handleCommandLogs},
		{"POST", "v2", seg(S + "/sessions/:sid/cmd/:cid/stdin"), "commandStdin", e.handleCommandStdin},
		{"POST", "v2", seg(S + "/sessions/:sid/fs/write"), "writeFiles", e.handleWriteFiles},
		{"POST", "v2", seg(S + "/sessions/:sid/fs/read"), "readFile", e.handleReadFile},
		{"POST", "v2", seg(S + "/sessions/:sid/fs/mkdir"), "mkdir", e.handleMkdir},
		{"POST", "v2 v3", seg(S + "/sessions/:sid/snapshot"), "createSnapshot", e.handleCreateSnapshot},
		{"POST", "v2", seg(S + "/sessions/:sid/interactive"), "interactive", e.handleInteractive},

		{"GET", "v2", seg(S + "/snapshots"), "listSnapshots", e.handleListSnapshots},
		{"GET", "v2", seg(S + "/snapshots/tree"), "snapshotTree", e.handleSnapshotTree},
		{"GET", "v2", seg(S + "/snapshots/:snap"), "getSnapshot", e.handleGetSnapshot},
		{"DELETE", "v2", seg(S + "/snapshots/:snap"), "deleteSnapshot", e.handleDeleteSnapshot},

		{"GET", "v2", seg(S + "/:name"), "getSandbox", e.handleGetSandbox},
		{"PATCH", "v2", seg(S + "/:name"), "updateSandbox", e.handleUpdateSandbox},
		{"DELETE", "v2", seg(S + "/:name"), "deleteSandbox", e.handleDeleteSandbox},
		{"POST", "v2 v3", seg(S + "/:name/fork"), "forkSandbox", e.handleFork},
	}
}

// match finds the route of a request. pathKnown reports whether some route
// has this path (for 405 answers).
func match(routes []route, method, version string, segs []string) (rt *route, params map[string]string, pathKnown bool) {
	for i := range routes {
		r := &routes[i]
		if len(r.pattern) != len(segs) {
			continue
		}
		var p map[string]string
		ok := true
		for j, pat := range r.pattern {
			if strings.HasPrefix(pat, ":") {
				if segs[j] == "" {
					ok = false
					break
				}
				if p == nil {
					p = map[string]string{}
				}
				p[pat[1:]] = segs[j]
				continue
			}
			if pat != segs[j] {
				ok = false
				break
			}
		}
		if !ok || !strings.Contains(r.versions, version) {
			continue
		}
		// A literal route (e.g. sandboxes/sessions) shadows the parameter
		// route (sandboxes/:name) for every method.
		if r.method != method {
			pathKnown = true
			continue
		}
		return r, p, true
	}
	return nil, nil, pathKnown
}

type router struct {
	e      *Emulator
	routes []route
}

func (e *Emulator) newRouter() http.Handler {
	return &router{e: e, routes: e.routes()}
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := rt.e
	path := r.URL.EscapedPath()
	if strings.HasPrefix(path, "/_emulator/") || path == "/_emulator" {
		e.serveAdmin(w, r)
		return
	}
	if strings.HasPrefix(path, routesPrefix) {
		e.serveRoute(w, r)
		return
	}
	if path == jwksPath {
		e.serveJWKS(w, r)
		return
	}
	if e.serveInteractive(w, r) {
		return
	}
	path = strings.TrimPrefix(path, "/api")
	path = strings.TrimSuffix(strings.TrimPrefix(path, "/"), "/")
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if u, err := url.PathUnescape(p); err == nil {
			parts[i] = u
		}
	}
	if len(parts) < 2 || parts[0] == "" {
		writeError(w, notFound("The requested API endpoint was not found."))
		return
	}
	version := parts[0]
	if version != "v2" && version != "v3" && version != "v4" {
		writeError(w, notFound("The requested API endpoint was not found."))
		return
	}
	rte, params, known := match(rt.routes, r.Method, version, parts[1:])
	if rte == nil {
		if known {
			writeError(w, &apiError{status: 405, code: "method_not_allowed", message: "Method " + r.Method + " is not allowed on this endpoint."})
			return
		}
		writeError(w, notFound("The requested API endpoint was not found."))
		return
	}
	e.total.Add(1)
	e.counters[rte.op].Add(1)
	start := time.Now()

	rc := &reqCtx{e: e, w: w, r: r, op: rte.op, version: version, params: params}
	if err := e.authenticate(rc); err != nil {
		writeError(w, err)
		return
	}
	if err := e.checkTeam(rc); err != nil {
		writeError(w, err)
		return
	}
	a := e.faults.draw(rte.op)
	if a.hole != nil && !holdRequest(r, a.hole) {
		return
	}
	if a.latency > 0 {
		t := time.NewTimer(a.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if a.rateLimit != nil {
		secs := int64(math.Ceil(a.rateLimit.retryAfter.Seconds()))
		now := e.clock.Now()
		writeError(w, &apiError{
			status: 429, code: "rate_limited",
			message: "Rate limit exceeded. Try again in " + strconv.FormatInt(secs, 10) + " seconds.",
			header:  map[string]string{"Retry-After": strconv.FormatInt(secs, 10)},
			limit: &rateLimitInfo{Remaining: 0, Reset: now.Unix() + secs, ResetMs: now.UnixMilli() + secs*1000,
				Total: int64(e.plan.RequestsPerMinute)},
		})
		return
	}
	if a.failStatus != 0 {
		msg := "An unexpected internal error occurred (injected fault)."
		if a.failStatus < 500 {
			msg = "Injected fault."
		}
		writeError(w, &apiError{status: a.failStatus, code: codeForStatus(a.failStatus), message: msg})
		return
	}
	if err := e.rateLimit(rc.team, rte.op == "deleteSandbox" || rte.op == "deleteSnapshot"); err != nil {
		writeError(w, err)
		return
	}
	if !e.profileDelay(rc) {
		return
	}
	e.sweep()
	if a.commit == nil {
		rte.h(rc)
		e.log.Debug("emulator request", "op", rte.op, "method", r.Method, "path", r.URL.Path, "took", time.Since(start))
		return
	}
	// Commit, then lose the answer.
	bw := &bufferedWriter{h: http.Header{}}
	rc.w = bw
	rte.h(rc)
	e.log.Debug("emulator request (commit-then-fail)", "op", rte.op, "mode", a.commit.mode.String(), "status", bw.status)
	if a.commit.mode == FailDropConnection {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		panic(http.ErrAbortHandler)
	}
	writeError(w, &apiError{status: 500, code: "internal_server_error", message: "An unexpected internal error occurred (injected fault after commit)."})
}

// bufferedWriter swallows a handler's answer (CommitThenFail).
type bufferedWriter struct {
	h      http.Header
	status int
	buf    bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.h }
func (b *bufferedWriter) WriteHeader(s int) {
	if b.status == 0 {
		b.status = s
	}
}
func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = 200
	}
	return b.buf.Write(p)
}
func (b *bufferedWriter) Flush() {}

// ---- auth ----

// tokenMatches compares a presented bearer token with the emulator's token in
// constant time, so response timing does not reveal how much of it matched.
func (e *Emulator) tokenMatches(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(e.currentToken())) == 1
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return ""
	}
	return strings.TrimSpace(h[7:])
}

// authenticate accepts the emulator's token and, only when a key set was
// configured (Options.OIDCJWKS), OIDC tokens whose signature verifies.
func (e *Emulator) authenticate(rc *reqCtx) *apiError {
	tok := bearer(rc.r)
	if tok == "" {
		return &apiError{status: 401, code: "unauthorized", message: "Missing authentication token: send `Authorization: Bearer <token>`."}
	}
	q := rc.r.URL.Query()
	if e.tokenMatches(tok) {
		rc.team = q.Get("teamId")
		if rc.team == "" {
			rc.team = q.Get("slug")
		}
		if rc.team == "" {
			rc.team = e.opts.TeamID
		}
		return nil
	}
	if c := e.credentialFor(tok); c != nil {
		rc.team, rc.cred = q.Get("teamId"), c
		if rc.team == "" {
			rc.team = q.Get("slug")
		}
		if rc.team == "" {
			rc.team = c.teams[0]
		}
		return nil
	}
	if e.oidc == nil || strings.Count(tok, ".") != 2 {
		return &apiError{status: 403, code: "forbidden", message: "Not authorized: the token is not valid."}
	}
	claims, err := e.oidc.verify(tok, time.Now())
	if err != nil {
		return &apiError{status: 403, code: "forbidden", message: "Not authorized: " + err.Error() + "."}
	}
	if t := q.Get("teamId"); t != "" && t != claims.OwnerID {
		return &apiError{status: 403, code: "forbidden", message: "Not authorized: the OIDC token is not valid for team " + strconv.Quote(t) + "."}
	}
	rc.team, rc.oidc, rc.oidcPrj = claims.OwnerID, true, claims.ProjectID
	return nil
}

// ---- plan rate limits ----

type bucket struct {
	tokens float64
	last   int64 // ms
}

type limiters struct {
	mu      sync.Mutex
	reqs    map[string]*bucket
	deletes map[string]*bucket
}

// take takes one token from b (capacity cap, refilled at perMs tokens/ms);
// it returns the wait in ms when empty.
func take(b *bucket, now int64, capacity float64, perMs float64) (ok bool, waitMs float64) {
	if elapsed := now - b.last; elapsed > 0 {
		b.tokens = math.Min(capacity, b.tokens+float64(elapsed)*perMs)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, (1 - b.tokens) / perMs
}

// rateLimit applies the plan's control-plane limit (per team, per minute)
// and, for deletes, the separate deletes-per-second bucket.
func (e *Emulator) rateLimit(team string, isDelete bool) *apiError {
	rpm, dps := e.plan.RequestsPerMinute, e.plan.DeletesPerSecond
	if rpm <= 0 && (!isDelete || dps <= 0) {
		return nil
	}
	now := e.nowMs()
	l := &e.lim
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reqs == nil {
		l.reqs, l.deletes = map[string]*bucket{}, map[string]*bucket{}
	}
	check := func(m map[string]*bucket, capacity float64, perMs float64, what string) *apiError {
		b := m[team]
		if b == nil {
			b = &bucket{tokens: capacity, last: now}
			m[team] = b
		}
		ok, wait := take(b, now, capacity, perMs)
		if ok {
			return nil
		}
		secs := int64(math.Ceil(wait / 1000))
		if secs < 1 {
			secs = 1
		}
		fullMs := now + int64(math.Ceil((capacity-b.tokens)/perMs))
		return &apiError{
			status: 429, code: "rate_limited",
			message: "Rate limit exceeded (" + what + "). Try again in " + strconv.FormatInt(secs, 10) + " seconds.",
			header: map[string]string{
				"Retry-After":           strconv.FormatInt(secs, 10),
				"X-RateLimit-Limit":     strconv.FormatInt(int64(capacity), 10),
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     strconv.FormatInt(fullMs/1000, 10),
			},
			limit: &rateLimitInfo{Remaining: 0, Reset: fullMs / 1000, ResetMs: fullMs, Total: int64(capacity)},
		}
	}
	if isDelete && dps > 0 {
		if err := check(l.deletes, float64(dps), float64(dps)/1000, strconv.Itoa(dps)+" deletes per second"); err != nil {
			return err
		}
	}
	if rpm > 0 {
		return check(l.reqs, float64(rpm), float64(rpm)/60000, strconv.Itoa(rpm)+" requests per minute")
	}
	return nil
}
