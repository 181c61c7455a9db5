package vercel

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestRequestEncoding checks, for every endpoint, what goes on the wire:
// method, escaped path, query (teamId always; projectId vs project per
// docs/dev/vercel-sandbox-api.md §2.3), body and content type.
func TestRequestEncoding(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		call      func(c *Client) error
		method    string
		path      string
		query     url.Values
		body      string // "" = no body expected
		respondCT string // content type of the canned 200 answer
		respond   string
	}{
		{
			name: "create v3 fills projectId",
			call: func(c *Client) error {
				_, err := c.CreateSandbox(ctx, CreateSandboxRequest{Name: "sb-1", Timeout: 60000, Resources: &Resources{VCPUs: 2}, Ports: []int64{3000}})
				return err
			},
			method: "POST", path: "/v3/sandboxes",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"name":"sb-1","projectId":"prj_1","resources":{"vcpus":2},"ports":[3000],"timeout":60000}`,
		},
		{
			name: "create with runtime uses v2 and keeps explicit projectId",
			call: func(c *Client) error {
				_, err := c.CreateSandbox(ctx, CreateSandboxRequest{ProjectID: "other", Runtime: "node24", Source: &Source{Type: SourceSnapshot, SnapshotID: "snap_x"}})
				return err
			},
			method: "POST", path: "/v2/sandboxes",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"projectId":"other","runtime":"node24","source":{"type":"snapshot","snapshotId":"snap_x"}}`,
		},
		{
			name:   "get escapes the name, resume=true",
			call:   func(c *Client) error { _, err := c.GetSandbox(ctx, "a b/c?d", true); return err },
			method: "GET", path: "/v2/sandboxes/a%20b%2Fc%3Fd",
			query: url.Values{"teamId": {"team_1"}, "projectId": {"prj_1"}, "resume": {"true"}},
		},
		{
			name:   "get without resume sends no resume",
			call:   func(c *Client) error { _, err := c.GetSandbox(ctx, "sb", false); return err },
			method: "GET", path: "/v2/sandboxes/sb",
			query: url.Values{"teamId": {"team_1"}, "projectId": {"prj_1"}},
		},
		{
			name: "patch sends empty env to clear it, nil tags not at all",
			call: func(c *Client) error {
				_, err := c.UpdateSandbox(ctx, "sb", UpdateSandboxRequest{Env: map[string]string{}, Timeout: 120000, Ports: []int64{}}, true)
				return err
			},
			method: "PATCH", path: "/v2/sandboxes/sb",
			query: url.Values{"teamId": {"team_1"}, "projectId": {"prj_1"}, "resume": {"true"}},
			body:  `{"timeout":120000,"env":{},"ports":[]}`,
		},
		{
			name:   "delete with orphan snapshots",
			call:   func(c *Client) error { _, err := c.DeleteSandbox(ctx, "sb", true); return err },
			method: "DELETE", path: "/v2/sandboxes/sb",
			query: url.Values{"teamId": {"team_1"}, "projectId": {"prj_1"}, "deleteOrphanSnapshots": {"true"}},
		},
		{
			name:   "delete without orphan snapshots",
			call:   func(c *Client) error { _, err := c.DeleteSandbox(ctx, "sb", false); return err },
			method: "DELETE", path: "/v2/sandboxes/sb",
			query: url.Values{"teamId": {"team_1"}, "projectId": {"prj_1"}},
		},
		{
			name: "fork",
			call: func(c *Client) error {
				_, err := c.ForkSandbox(ctx, "src", ForkSandboxRequest{Name: "dst", Persistent: ptr(false)})
				return err
			},
			method: "POST", path: "/v2/sandboxes/src/fork",
			query: url.Values{"teamId": {"team_1"}, "projectId": {"prj_1"}},
			body:  `{"name":"dst","persistent":false}`,
		},
		{
			name: "list sandboxes with every option",
			call: func(c *Client) error {
				_, err := c.ListSandboxes(ctx, ListSandboxesOptions{Limit: 5, Cursor: "cur", SortBy: "name", SortOrder: "asc", NamePrefix: "ns-", Status: "running", Tag: "owner:me"})
				return err
			},
			method: "GET", path: "/v2/sandboxes",
			query: url.Values{"teamId": {"team_1"}, "project": {"prj_1"}, "limit": {"5"}, "cursor": {"cur"}, "sortBy": {"name"},
				"sortOrder": {"asc"}, "namePrefix": {"ns-"}, "status": {"running"}, "tags": {"owner:me"}},
		},
		{
			name:   "list sandboxes defaults",
			call:   func(c *Client) error { _, err := c.ListSandboxes(ctx, ListSandboxesOptions{}); return err },
			method: "GET", path: "/v2/sandboxes",
			query: url.Values{"teamId": {"team_1"}, "project": {"prj_1"}},
		},
		{
			name: "list sessions",
			call: func(c *Client) error {
				_, err := c.ListSessions(ctx, ListSessionsOptions{Name: "sb", Limit: 2, SortOrder: "desc"})
				return err
			},
			method: "GET", path: "/v2/sandboxes/sessions",
			query: url.Values{"teamId": {"team_1"}, "project": {"prj_1"}, "name": {"sb"}, "limit": {"2"}, "sortOrder": {"desc"}},
		},
		{
			name:   "get session",
			call:   func(c *Client) error { _, err := c.GetSession(ctx, "sbx_1"); return err },
			method: "GET", path: "/v2/sandboxes/sessions/sbx_1",
			query: url.Values{"teamId": {"team_1"}},
		},
		{
			name:   "stop session has no body",
			call:   func(c *Client) error { _, err := c.StopSession(ctx, "sbx_1"); return err },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/stop",
			query: url.Values{"teamId": {"team_1"}},
		},
		{
			name:   "extend timeout in ms",
			call:   func(c *Client) error { _, err := c.ExtendTimeout(ctx, "sbx_1", 90*time.Second); return err },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/extend-timeout",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"duration":90000}`,
		},
		{
			name: "network policy",
			call: func(c *Client) error {
				_, err := c.UpdateNetworkPolicy(ctx, "sbx_1", NetworkPolicy{Mode: NetworkCustom, AllowedDomains: []string{"*.github.com"},
					InjectionRules: []InjectionRule{{Domain: "api.github.com", Headers: map[string]string{"Authorization": "Bearer gh"}}}})
				return err
			},
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/network-policy",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"mode":"custom","allowedDomains":["*.github.com"],"injectionRules":[{"domain":"api.github.com","headers":{"Authorization":"Bearer gh"}}]}`,
		},
		{
			name: "run command detached sends args and env, never wait",
			call: func(c *Client) error {
				_, err := c.RunCommand(ctx, "sbx_1", RunCommandRequest{Command: "ls", Wait: true, Logs: true, Sudo: true})
				return err
			},
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/cmd",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"command":"ls","args":[],"env":{},"sudo":true}`,
		},
		{
			name:   "get command with wait",
			call:   func(c *Client) error { _, err := c.GetCommand(ctx, "sbx_1", "cmd_1", true); return err },
			method: "GET", path: "/v2/sandboxes/sessions/sbx_1/cmd/cmd_1",
			query: url.Values{"teamId": {"team_1"}, "wait": {"true"}},
		},
		{
			name:   "get command without wait",
			call:   func(c *Client) error { _, err := c.GetCommand(ctx, "sbx_1", "cmd_1", false); return err },
			method: "GET", path: "/v2/sandboxes/sessions/sbx_1/cmd/cmd_1",
			query: url.Values{"teamId": {"team_1"}},
		},
		{
			name:   "list commands",
			call:   func(c *Client) error { _, err := c.ListCommands(ctx, "sbx_1"); return err },
			method: "GET", path: "/v2/sandboxes/sessions/sbx_1/cmd",
			query: url.Values{"teamId": {"team_1"}},
		},
		{
			name:   "kill",
			call:   func(c *Client) error { _, err := c.KillCommand(ctx, "sbx_1", "cmd_1", 9); return err },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/cmd/cmd_1/kill",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"signal":9}`,
		},
		{
			name: "command logs",
			call: func(c *Client) error {
				ls, err := c.CommandLogs(ctx, "sbx_1", "cmd_1")
				if err == nil {
					ls.Close()
				}
				return err
			},
			method: "GET", path: "/v2/sandboxes/sessions/sbx_1/cmd/cmd_1/logs",
			query:     url.Values{"teamId": {"team_1"}},
			respondCT: "application/x-ndjson", respond: "",
		},
		{
			name:   "read file",
			call:   func(c *Client) error { _, err := c.ReadFile(ctx, "sbx_1", "a.txt", "/tmp"); return err },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/fs/read",
			query:     url.Values{"teamId": {"team_1"}},
			body:      `{"path":"a.txt","cwd":"/tmp"}`,
			respondCT: "application/octet-stream", respond: "data",
		},
		{
			name:   "mkdir sends recursive false explicitly",
			call:   func(c *Client) error { return c.Mkdir(ctx, "sbx_1", "d", "", false) },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/fs/mkdir",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"path":"d","recursive":false}`,
		},
		{
			name:   "snapshot without expiration sends no body",
			call:   func(c *Client) error { _, err := c.CreateSnapshot(ctx, "sbx_1", nil); return err },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/snapshot",
			query: url.Values{"teamId": {"team_1"}},
		},
		{
			name:   "snapshot that never expires",
			call:   func(c *Client) error { _, err := c.CreateSnapshot(ctx, "sbx_1", ptr(time.Duration(0))); return err },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/snapshot",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"expiration":0}`,
		},
		{
			name:   "snapshot expiring in a day",
			call:   func(c *Client) error { _, err := c.CreateSnapshot(ctx, "sbx_1", ptr(24*time.Hour)); return err },
			method: "POST", path: "/v2/sandboxes/sessions/sbx_1/snapshot",
			query: url.Values{"teamId": {"team_1"}},
			body:  `{"expiration":86400000}`,
		},
		{
			name:   "get snapshot",
			call:   func(c *Client) error { _, err := c.GetSnapshot(ctx, "snap_1"); return err },
			method: "GET", path: "/v2/sandboxes/snapshots/snap_1",
			query: url.Values{"teamId": {"team_1"}},
		},
		{
			name: "list snapshots",
			call: func(c *Client) error {
				_, err := c.ListSnapshots(ctx, ListSnapshotsOptions{Name: "sb", Cursor: "c2"})
				return err
			},
			method: "GET", path: "/v2/sandboxes/snapshots",
			query: url.Values{"teamId": {"team_1"}, "project": {"prj_1"}, "name": {"sb"}, "cursor": {"c2"}},
		},
		{
			name:   "delete snapshot",
			call:   func(c *Client) error { _, err := c.DeleteSnapshot(ctx, "snap_1"); return err },
			method: "DELETE", path: "/v2/sandboxes/snapshots/snap_1",
			query: url.Values{"teamId": {"team_1"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
				ct, resp := "application/json", "{}"
				if tc.respondCT != "" {
					ct, resp = tc.respondCT, tc.respond
				}
				w.Header().Set("Content-Type", ct)
				w.Write([]byte(resp))
			})
			c, _ := newTestClient(t, f, nil)
			if err := tc.call(c); err != nil {
				t.Fatalf("call: %v", err)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != tc.method || r.Path != tc.path {
				t.Errorf("request = %s %s, want %s %s", r.Method, r.Path, tc.method, tc.path)
			}
			if got, want := r.Query.Encode(), tc.query.Encode(); got != want {
				t.Errorf("query = %s, want %s", got, want)
			}
			if got, want := r.Header.Get("Authorization"), "Bearer "+testToken(t); got != want {
				t.Errorf("Authorization = %q, want %q", got, want)
			}
			if got := r.Header.Get("User-Agent"); got != "vercel-test" {
				t.Errorf("User-Agent = %q", got)
			}
			if tc.body == "" {
				if len(r.Body) != 0 {
					t.Errorf("body = %q, want none", r.Body)
				}
				if ct := r.Header.Get("Content-Type"); ct != "" {
					t.Errorf("Content-Type = %q on a request without body", ct)
				}
				return
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			jsonEqual(t, r.Body, tc.body)
		})
	}
}

// TestBaseURLPrefix: the SDK's https://vercel.com/api form keeps its prefix.
func TestBaseURLPrefix(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { writeJSON(w, 200, map[string]any{}) })
	c, _ := newTestClient(t, f, func(cfg *Config) { cfg.BaseURL = f.srv.URL + "/api/"; cfg.TeamID = "" })
	if _, err := c.GetSession(context.Background(), "sbx_1"); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	if r.Path != "/api/v2/sandboxes/sessions/sbx_1" {
		t.Errorf("path = %s", r.Path)
	}
	if _, ok := r.Query["teamId"]; ok {
		t.Errorf("teamId sent without a team: %v", r.Query)
	}
}

// TestResponseDecoding: answers decode into the typed structs and unknown
// fields are ignored (docs/dev/vercel-sandbox-api.md §2.5).
func TestResponseDecoding(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Write([]byte(`{"sandbox":{"name":"sb","persistent":true,"currentSessionId":"sbx_1","status":"running","statusUpdatedAt":1,"createdAt":1,"updatedAt":2,"brandNew":{"x":1}},
			"session":{"id":"sbx_1","memory":4096,"vcpus":2,"region":"iad1","timeout":300000,"status":"running","requestedAt":1,"createdAt":1,"updatedAt":1,"cwd":"/vercel/sandbox","projectId":"prj_1","sourceSandboxName":"sb","futureField":true},
			"routes":[{"url":"https://x.vercel.run","subdomain":"x","port":3000}],"resumed":true,"extra":[1,2]}`))
	})
	c, _ := newTestClient(t, f, nil)
	got, err := c.GetSandbox(context.Background(), "sb", true)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sandbox.Name != "sb" || got.Session == nil || got.Session.ID != "sbx_1" || got.Session.Memory != 4096 ||
		!got.Resumed || len(got.Routes) != 1 || got.Routes[0].Port != 3000 || got.Session.Status != SessionRunning {
		t.Errorf("decoded %+v", got)
	}
}

func TestEmptyIDsAreRefusedWithoutARequest(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) { writeJSON(w, 200, map[string]any{}) })
	c, _ := newTestClient(t, f, nil)
	ctx := context.Background()
	calls := map[string]func() error{
		"delete empty":  func() error { _, err := c.DeleteSandbox(ctx, "", false); return err },
		"get dotdot":    func() error { _, err := c.GetSandbox(ctx, "..", false); return err },
		"stop empty":    func() error { _, err := c.StopSession(ctx, ""); return err },
		"kill empty":    func() error { _, err := c.KillCommand(ctx, "sbx_1", "", 15); return err },
		"snapshot del":  func() error { _, err := c.DeleteSnapshot(ctx, ""); return err },
		"write no path": func() error { return c.WriteFiles(ctx, "sbx_1", []File{{Path: ""}}) },
		"write root":    func() error { return c.WriteFiles(ctx, "sbx_1", []File{{Path: "/"}}) },
	}
	for name, call := range calls {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := f.count(); n != 0 {
		t.Errorf("%d requests sent for invalid input", n)
	}
}

func TestListAllSandboxesWalksPages(t *testing.T) {
	names := []string{"a", "b", "c"}
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		i := 0
		if cur := r.URL.Query().Get("cursor"); cur != "" {
			i = int(cur[0] - '0')
		}
		var next *string
		if i+1 < len(names) {
			next = ptr(string(rune('0' + i + 1)))
		}
		writeJSON(w, 200, ListSandboxesResponse{Sandboxes: []Sandbox{{Name: names[i]}}, Pagination: Pagination{Count: 1, Next: next}})
	})
	c, _ := newTestClient(t, f, nil)
	all, err := c.ListAllSandboxes(context.Background(), ListSandboxesOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range all {
		got = append(got, s.Name)
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Errorf("walked %v", got)
	}
	for i, r := range f.requests() {
		if r.Query.Get("limit") != "1" {
			t.Errorf("request %d lost the limit: %v", i, r.Query)
		}
	}
}

func TestListAllStopsOnRepeatedCursor(t *testing.T) {
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		writeJSON(w, 200, ListSnapshotsResponse{Snapshots: []Snapshot{{ID: "snap_1"}}, Pagination: Pagination{Next: ptr("same")}})
	})
	c, _ := newTestClient(t, f, nil)
	_, err := c.ListAllSnapshots(context.Background(), ListSnapshotsOptions{})
	var pe *ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want ProtocolError", err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}
