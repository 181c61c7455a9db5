package emulator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func TestAuth(t *testing.T) {
	te := newEnv(t, Options{OIDCJWKS: testJWKS})
	for _, tc := range []struct {
		name, tok string
		status    int
		code      string
	}{
		{"missing", "", 401, "unauthorized"},
		{"wrong", "nope", 403, "forbidden"},
		{"jwt without claims", jwt(map[string]any{"sub": "x"}), 403, "forbidden"},
		{"expired jwt", jwt(map[string]any{"owner_id": "team_a", "project_id": "prj_a", "exp": time.Now().Add(-time.Hour).Unix()}), 403, "forbidden"},
		{"good", testToken, 200, ""},
		{"oidc", jwt(map[string]any{"owner_id": "team_a", "project_id": "prj_a", "exp": time.Now().Add(time.Hour).Unix()}), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v2/sandboxes?project=prj_emulator"
			if strings.Count(tc.tok, ".") == 2 {
				path = "/v2/sandboxes"
			}
			r := te.reqTok(tc.tok, "GET", path, nil)
			if r.status != tc.status || r.errCode() != tc.code {
				t.Fatalf("status %d code %q, want %d %q: %s", r.status, r.errCode(), tc.status, tc.code, r.body)
			}
			if r.status != 200 && r.errMessage() == "" {
				t.Fatalf("error without message: %s", r.body)
			}
		})
	}
}

func TestRoutingPrefixesAndVersions(t *testing.T) {
	te := newEnv(t, Options{})
	for _, path := range []string{"/v2/sandboxes", "/v3/sandboxes", "/v4/sandboxes", "/api/v3/sandboxes", "/api/v2/sandboxes"} {
		body := map[string]any{"projectId": "prj_emulator"}
		var out vercel.SandboxResponse
		te.must(200, "POST", path, body, &out)
		if out.Session == nil || out.Session.Status != vercel.SessionRunning {
			t.Fatalf("%s: session %+v", path, out.Session)
		}
		if strings.Contains(path, "v2") && out.Sandbox.Runtime != "node24" {
			t.Errorf("%s: runtime %q, want node24 default", path, out.Sandbox.Runtime)
		}
		if !strings.Contains(path, "v2") && !strings.HasPrefix(out.Sandbox.Image, "vercel/sandbox/universal@sha256:") {
			t.Errorf("%s: image %q, want the pinned universal image", path, out.Sandbox.Image)
		}
		getPath := strings.NewReplacer("v3", "v2", "v4", "v2").Replace(path)
		te.must(200, "GET", getPath+"/"+out.Sandbox.Name+prj, nil, nil)
		te.must(200, "GET", "/api/v2/sandboxes/sessions/"+out.Session.ID, nil, nil)
	}
	if r := te.req("GET", "/v2/nothing", nil); r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("unknown route: %d %s", r.status, r.body)
	}
	if r := te.req("PUT", "/v2/sandboxes", nil); r.status != 405 {
		t.Fatalf("wrong method: %d %s", r.status, r.body)
	}
	if r := te.req("GET", "/v1/sandboxes", nil); r.status != 404 {
		t.Fatalf("v1: %d %s", r.status, r.body)
	}
	// /v4 has only create; /v3 also snapshot and fork.
	if r := te.req("GET", "/v4/sandboxes/x"+prj, nil); r.status != 404 {
		t.Fatalf("v4 get: %d", r.status)
	}
	if got := te.e.RequestCount("createSandbox"); got != 5 {
		t.Fatalf("createSandbox count %d, want 5", got)
	}
}

func TestResponseShapes(t *testing.T) {
	te := newEnv(t, Options{})
	r := te.must(200, "POST", "/v3/sandboxes", map[string]any{
		"projectId": "prj_emulator", "name": "shape", "ports": []int{3000, 8080},
		"tags": map[string]string{"owner": "sandbox-controller", "ns": "default"},
	}, nil)
	var raw struct {
		Sandbox map[string]any   `json:"sandbox"`
		Session map[string]any   `json:"session"`
		Routes  []map[string]any `json:"routes"`
	}
	r.json(t, &raw)
	routes := raw
	requireKeys(t, "sandbox", raw.Sandbox, "name", "persistent", "currentSessionId", "status", "statusUpdatedAt", "createdAt", "updatedAt", "expiresAt", "tags", "region", "vcpus", "memory", "timeout", "cwd", "networkPolicy")
	requireKeys(t, "session", raw.Session, "id", "memory", "vcpus", "region", "timeout", "status", "requestedAt", "startedAt", "createdAt", "updatedAt", "cwd", "projectId", "sourceSandboxName")
	if len(routes.Routes) != 2 {
		t.Fatalf("routes: %v", routes.Routes)
	}
	for _, rt := range routes.Routes {
		requireKeys(t, "route", rt, "url", "subdomain", "port")
		if rt["url"] != "https://"+rt["subdomain"].(string)+".vercel.run" {
			t.Errorf("route url %v", rt)
		}
	}
	var out vercel.SandboxResponse
	r.json(t, &out)
	if out.Sandbox.Tags["owner"] != "sandbox-controller" || len(out.Sandbox.Tags) != 2 {
		t.Errorf("tags: %v", out.Sandbox.Tags)
	}
	if !strings.HasPrefix(out.Session.ID, "sbx_") || len(out.Session.ID) != 32 {
		t.Errorf("session id %q", out.Session.ID)
	}
	if out.Session.Memory != 4096 || out.Session.VCPUs != 2 || out.Session.Timeout != 300000 || out.Session.Cwd != "/vercel/sandbox" {
		t.Errorf("defaults: %+v", out.Session)
	}
	if out.Sandbox.ExpiresAt != t0.UnixMilli()+300000 {
		t.Errorf("expiresAt %d", out.Sandbox.ExpiresAt)
	}
	// GET always carries resumed, even when false.
	gr := te.must(200, "GET", "/v2/sandboxes/shape"+prj, nil, nil)
	var g map[string]json.RawMessage
	gr.json(t, &g)
	if string(g["resumed"]) != "false" {
		t.Errorf("GET resumed = %s", g["resumed"])
	}
	if gr.header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("content-type %q", gr.header.Get("Content-Type"))
	}
	// Commands: args and exitCode present even when empty / null.
	cr := te.must(200, "POST", "/v2/sandboxes/sessions/"+out.Session.ID+"/cmd", map[string]any{"command": "true"}, nil)
	var cmd map[string]map[string]any
	cr.json(t, &cmd)
	requireKeys(t, "command", cmd["command"], "id", "name", "args", "cwd", "sessionId", "exitCode", "startedAt")
	if cmd["command"]["exitCode"] != nil {
		t.Errorf("detached command exitCode %v, want null", cmd["command"]["exitCode"])
	}
	// A sandbox created without __interactive serves no terminal (the
	// emulator's safe default; TestInteractiveOnlyWhenCreatedSo).
	te.must(400, "POST", "/v2/sandboxes/sessions/"+out.Session.ID+"/interactive", map[string]any{}, nil)
}

func TestOIDCScoping(t *testing.T) {
	te := newEnv(t, Options{OIDCJWKS: testJWKS})
	own := te.create(map[string]any{"name": "mine"})
	oidc := jwt(map[string]any{"owner_id": "team_other", "project_id": "prj_other", "exp": time.Now().Add(time.Hour).Unix()})

	// The OIDC token needs no projectId and sees only its own project.
	r := te.reqTok(oidc, "POST", "/v3/sandboxes", map[string]any{"name": "theirs"})
	if r.status != 200 {
		t.Fatalf("oidc create: %d %s", r.status, r.body)
	}
	var theirs vercel.SandboxResponse
	r.json(t, &theirs)
	if theirs.Session.ProjectID != "prj_other" {
		t.Errorf("projectId %q", theirs.Session.ProjectID)
	}
	var list vercel.ListSandboxesResponse
	r = te.reqTok(oidc, "GET", "/v2/sandboxes", nil)
	r.json(t, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Name != "theirs" {
		t.Fatalf("oidc list: %+v", list.Sandboxes)
	}
	for _, tc := range []struct{ tok, path string }{
		{oidc, "/v2/sandboxes/mine"},
		{oidc, "/v2/sandboxes/sessions/" + own.Session.ID},
		{testToken, "/v2/sandboxes/theirs" + prj[:0] + "?projectId=prj_emulator"},
		{testToken, "/v2/sandboxes/sessions/" + theirs.Session.ID},
	} {
		if r := te.reqTok(tc.tok, "GET", tc.path, nil); r.status != 404 {
			t.Errorf("GET %s: %d, want 404", tc.path, r.status)
		}
	}
	// Same name may exist in both scopes.
	if r := te.reqTok(oidc, "POST", "/v3/sandboxes", map[string]any{"name": "mine"}); r.status != 200 {
		t.Fatalf("same name other project: %d %s", r.status, r.body)
	}
	// An OIDC token cannot name another project, or another team.
	if r := te.reqTok(oidc, "GET", "/v2/sandboxes?project=prj_emulator", nil); r.status != 403 {
		t.Errorf("oidc other project: %d", r.status)
	}
	if r := te.reqTok(oidc, "GET", "/v2/sandboxes?teamId=team_emulator", nil); r.status != 403 {
		t.Errorf("oidc other team: %d", r.status)
	}
	// A plain token needs the project.
	if r := te.req("POST", "/v3/sandboxes", map[string]any{}); r.status != 400 || !strings.Contains(r.errMessage(), "`projectId`") {
		t.Errorf("no projectId: %d %s", r.status, r.body)
	}
	if r := te.req("GET", "/v2/sandboxes", nil); r.status != 400 || !strings.Contains(r.errMessage(), "`project`") {
		t.Errorf("list without project: %d %s", r.status, r.body)
	}
	// Another team with the plain token sees nothing.
	r = te.req("GET", "/v2/sandboxes?project=prj_emulator&teamId=team_x", nil)
	r.json(t, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("other team sees %d sandboxes", len(list.Sandboxes))
	}
}

func TestRateLimitPlan(t *testing.T) {
	plan := PlanHobby()
	plan.RequestsPerMinute = 3
	plan.DeletesPerSecond = 1
	te := newEnv(t, Options{Plan: plan})
	for i := 0; i < 3; i++ {
		te.must(200, "GET", "/v2/sandboxes?project=p", nil, nil)
	}
	r := te.req("GET", "/v2/sandboxes?project=p", nil)
	if r.status != 429 || r.errCode() != "rate_limited" || r.header.Get("Retry-After") != "20" {
		t.Fatalf("4th request: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	var env struct {
		Error struct {
			Limit *rateLimitInfo `json:"limit"`
		} `json:"error"`
	}
	r.json(t, &env)
	if env.Error.Limit == nil || env.Error.Limit.Total != 3 || env.Error.Limit.Remaining != 0 || env.Error.Limit.ResetMs <= t0.UnixMilli() {
		t.Fatalf("limit object: %+v", env.Error.Limit)
	}
	te.clk.Advance(20 * time.Second)
	te.must(200, "GET", "/v2/sandboxes?project=p", nil, nil)

	// Deletes have their own bucket (1/s here).
	te.clk.Advance(time.Minute)
	te.create(map[string]any{"name": "a"})
	te.create(map[string]any{"name": "b"})
	te.must(200, "DELETE", "/v2/sandboxes/a"+prj, nil, nil)
	r = te.req("DELETE", "/v2/sandboxes/b"+prj, nil)
	if r.status != 429 || r.header.Get("Retry-After") != "1" || !strings.Contains(r.errMessage(), "deletes") {
		t.Fatalf("second delete: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	te := newEnv(t, Options{})
	te.e.Faults().SetMaxRunning(1)
	a := te.create(map[string]any{"name": "a"})
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v3/sandboxes"},
		{"POST", "/v2/sandboxes/a/fork" + prj},
	} {
		r := te.req(tc.method, tc.path, map[string]any{"projectId": "prj_emulator"})
		if tc.path != "/v3/sandboxes" {
			r = te.req(tc.method, tc.path, map[string]any{})
		}
		if r.status != 429 || r.errMessage() == "" {
			t.Fatalf("%s %s: %d %s", tc.method, tc.path, r.status, r.body)
		}
	}
	// Resume counts too.
	te.stop(a.Session.ID)
	b := te.create(map[string]any{"name": "b"})
	if r, _ := te.getSandbox("a", true); r.status != 429 {
		t.Fatalf("resume over the limit: %d %s", r.status, r.body)
	}
	te.stop(b.Session.ID)
	if r, out := te.getSandbox("a", true); r.status != 200 || !out.Resumed {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	te.e.Faults().SetMaxRunning(0)
	if r := te.req("POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator"}); r.status != 429 {
		t.Fatalf("max running 0: %d", r.status)
	}
	te.e.Faults().SetMaxRunning(-1) // back to the plan's limit
	te.create(nil)
	te.e.Faults().Reset()
	te.create(nil)
}

func TestRealClockSweeper(t *testing.T) {
	te := newEnv(t, Options{Clock: realClock{}, StartPending: 100 * time.Millisecond})
	sb := te.create(map[string]any{"timeout": 1000})
	if sb.Session.Status != vercel.SessionPending {
		t.Fatalf("status %s", sb.Session.Status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, want := range []vercel.SessionStatus{vercel.SessionRunning, vercel.SessionStopped} {
		for {
			// Read through the accessor, which does not depend on requests
			// sweeping lazily.
			var got vercel.SessionStatus
			te.e.mu.Lock()
			got = te.e.st.sessions[sb.Session.ID].status
			te.e.mu.Unlock()
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session never became %s (is %s)", want, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	s := te.session(sb.Session.ID)
	if s.Duration != 1000 || s.StartedAt-s.RequestedAt != 100 {
		t.Fatalf("timings: %+v", s)
	}
}

func TestPendingStart(t *testing.T) {
	t.Run("queue", func(t *testing.T) {
		te := newEnv(t, Options{StartPending: 2 * time.Second})
		sb := te.create(nil)
		if sb.Session.Status != vercel.SessionPending || sb.Session.StartedAt != 0 || sb.Sandbox.ExpiresAt != 0 {
			t.Fatalf("create: %+v", sb.Session)
		}
		done := make(chan resp, 1)
		go func() {
			done <- te.req("POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/cmd", map[string]any{"command": "ls"})
		}()
		select {
		case r := <-done:
			t.Fatalf("command answered while pending: %d %s", r.status, r.body)
		case <-time.After(100 * time.Millisecond):
		}
		te.clk.Advance(2 * time.Second)
		select {
		case r := <-done:
			if r.status != 200 {
				t.Fatalf("queued command: %d %s", r.status, r.body)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("queued command never ran")
		}
		s := te.session(sb.Session.ID)
		if s.Status != vercel.SessionRunning || s.StartedAt != t0.Add(2*time.Second).UnixMilli() {
			t.Fatalf("after delay: %+v", s)
		}
	})
	t.Run("reject", func(t *testing.T) {
		te := newEnv(t, Options{StartPending: time.Second, PendingOps: "reject"})
		sb := te.create(nil)
		r := te.req("POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/cmd", map[string]any{"command": "ls"})
		if r.status != 422 || r.errCode() != "sandbox_pending" {
			t.Fatalf("pending op: %d %s", r.status, r.body)
		}
		te.clk.Advance(time.Second)
		te.must(200, "POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/cmd", map[string]any{"command": "ls"}, nil)
	})
}

func TestAdminEndpoints(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "adm"})
	var st AdminState
	te.must(200, "GET", "/_emulator/state", nil, &st)
	if len(st.Sandboxes) != 1 || len(st.Sessions) != 1 || st.ExecMode != "none" {
		t.Fatalf("state: %+v", st)
	}
	var counts map[string]int64
	te.must(200, "GET", "/_emulator/counters", nil, &counts)
	if counts["createSandbox"] != 1 || counts["total"] != 1 {
		t.Fatalf("counters: %v", counts)
	}
	te.must(200, "POST", "/_emulator/counters/reset", nil, nil)
	if te.e.RequestCount("") != 0 {
		t.Fatal("reset did not reset")
	}
	te.must(200, "POST", "/_emulator/faults", map[string]any{
		"failNext":  []map[string]any{{"op": "getSession", "n": 1, "status": 503}},
		"rateLimit": []map[string]any{{"op": "listSandboxes", "n": 1, "retryAfterSeconds": 2}},
	}, nil)
	if r := te.req("GET", "/v2/sandboxes/sessions/"+sb.Session.ID, nil); r.status != 503 || r.errCode() != "internal_server_error" {
		t.Fatalf("injected 503: %d %s", r.status, r.body)
	}
	te.must(200, "DELETE", "/_emulator/faults", nil, nil)
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)
	var now map[string]int64
	te.must(200, "POST", "/_emulator/clock/advance", map[string]any{"ms": 301000}, &now)
	if now["now"] != t0.UnixMilli()+301000 {
		t.Fatalf("advance: %v", now)
	}
	if s := te.session(sb.Session.ID); s.Status != vercel.SessionStopped {
		t.Fatalf("after advance past timeout: %s", s.Status)
	}
	if r := te.reqTok("nope", "GET", "/_emulator/state", nil); r.status != 403 {
		t.Fatalf("admin with bad token: %d", r.status)
	}
	if r := te.reqTok(jwt(map[string]any{"owner_id": "a", "project_id": "b"}), "GET", "/_emulator/state", nil); r.status != 403 {
		t.Fatalf("admin with oidc token: %d", r.status)
	}
}
