package vercel_test

// Contract tests: every endpoint through the real client against the emulator
// over loopback; those built with newPortableContractEnv run against real
// Vercel instead when VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID are
// set (`make conformance`, docs/dev/conformance.md). They assert what docs/dev/vercel-sandbox-api.md promises. The
// emulator's known deviations from the real API are listed in
// docs/dev/emulator-gaps.md; a test that fails because the emulator deviates is
// fixed in the emulator or recorded there, never weakened.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

const (
	contractTeam    = "team_contract"
	contractProject = "prj_contract"
)

// bodyRecorder keeps every response body the client received, so tests can
// assert on the raw wire (e.g. that a secret header value never comes back).
type bodyRecorder struct {
	mu     sync.Mutex
	bodies map[string][]string // by path
	next   http.RoundTripper
}

func (b *bodyRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(r)
	if err != nil || strings.Contains(resp.Header.Get("Content-Type"), "ndjson") {
		return resp, err // streams are left alone: they must not be buffered
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.bodies[r.URL.Path] = append(b.bodies[r.URL.Path], string(body))
	b.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

func (b *bodyRecorder) all() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s strings.Builder
	for _, bs := range b.bodies {
		for _, x := range bs {
			s.WriteString(x)
			s.WriteString("\n")
		}
	}
	return s.String()
}

type contractEnv struct {
	emu    *emulator.Emulator // nil against real Vercel
	c      *vercel.Client
	clock  *emulator.FakeClock // nil with the real clock
	bodies *bodyRecorder
	// team and project the client acts in; prefix starts every sandbox name
	// (empty on the emulator, unique per run on real Vercel).
	team, project, prefix string
}

// n is the sandbox name for name in this run.
func (env *contractEnv) n(name string) string { return env.prefix + name }

// remoteTarget reports the real Vercel credentials when the contract tests
// are to run against Vercel: VERCEL_TOKEN, VERCEL_TEAM_ID and
// VERCEL_PROJECT_ID all set, and no VERCEL_API_URL (which `make dev` sets
// for its emulator). See docs/dev/conformance.md.
func remoteTarget() (token, team, project string, ok bool) {
	token, team, project = os.Getenv("VERCEL_TOKEN"), os.Getenv("VERCEL_TEAM_ID"), os.Getenv("VERCEL_PROJECT_ID")
	return token, team, project, token != "" && team != "" && project != "" && os.Getenv("VERCEL_API_URL") == ""
}

// newPortableContractEnv is the target of a contract test that holds for
// Vercel and the emulator alike: real Vercel when remoteTarget says so,
// else an emulator with default options. Against Vercel every sandbox name
// gets a run-unique prefix, creates are tagged, and everything the run
// created is deleted when the test ends, also after a failure.
func newPortableContractEnv(t *testing.T) *contractEnv {
	t.Helper()
	token, team, project, ok := remoteTarget()
	if !ok {
		return newEmulatorContractEnv(t, emulator.Options{})
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	env := &contractEnv{team: team, project: project, prefix: "conf-" + hex.EncodeToString(b) + "-"}
	c, err := vercel.New(vercel.Config{Token: token, TeamID: team, ProjectID: project, UserAgent: "vercel-contract-test"})
	if err != nil {
		t.Fatalf("vercel.New: %v", err)
	}
	env.c = c
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		left, err := c.ListAllSandboxes(ctx, vercel.ListSandboxesOptions{SortBy: "name", NamePrefix: env.prefix})
		if err != nil {
			t.Errorf("cleanup: list %s*: %v", env.prefix, err)
		}
		for _, sb := range left {
			if _, err := c.DeleteSandbox(ctx, sb.Name, true); err != nil && !vercel.IsNotFound(err) {
				t.Errorf("cleanup: delete %s: %v", sb.Name, err)
			}
		}
	})
	return env
}

// newContractEnv is an emulator with opts: for contract tests that need the
// emulator's faults, counters, clock or plan. Against real Vercel
// (remoteTarget) they are skipped: they test the client's handling of what
// only the emulator can stage.
func newContractEnv(t *testing.T, opts emulator.Options) *contractEnv {
	t.Helper()
	if _, _, _, ok := remoteTarget(); ok {
		t.Skip("needs the emulator (fault injection, counters, clock or plan); the target is real Vercel")
	}
	return newEmulatorContractEnv(t, opts)
}

func newEmulatorContractEnv(t *testing.T, opts emulator.Options) *contractEnv {
	t.Helper()
	opts.TeamID, opts.ProjectID = contractTeam, contractProject
	e, err := emulator.New(opts)
	if err != nil {
		t.Fatalf("emulator.New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	base, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("emulator Start: %v", err)
	}
	rec := &bodyRecorder{bodies: map[string][]string{}, next: http.DefaultTransport}
	c, err := vercel.New(vercel.Config{
		BaseURL:    base,
		Token:      e.Token(),
		TeamID:     contractTeam,
		ProjectID:  contractProject,
		HTTPClient: &http.Client{Transport: rec},
		UserAgent:  "vercel-contract-test",
	})
	if err != nil {
		t.Fatalf("vercel.New: %v", err)
	}
	env := &contractEnv{emu: e, c: c, bodies: rec, team: contractTeam, project: contractProject}
	if fc, ok := opts.Clock.(*emulator.FakeClock); ok {
		env.clock = fc
	}
	return env
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, env *contractEnv, req vercel.CreateSandboxRequest) *vercel.SandboxResponse {
	t.Helper()
	if env.prefix != "" { // real Vercel: tag what the run creates
		tags := map[string]string{"sandbox-controller-conformance": strings.TrimSuffix(env.prefix, "-")}
		maps.Copy(tags, req.Tags)
		req.Tags = tags
	}
	resp, err := env.c.CreateSandbox(testCtx(t), req)
	if err != nil {
		t.Fatalf("CreateSandbox(%s): %v", req.Name, err)
	}
	if resp.Session == nil || resp.Session.ID == "" {
		t.Fatalf("CreateSandbox(%s): no session in %+v", req.Name, resp)
	}
	return resp
}

// The checkers below assert the fields docs/dev/vercel-sandbox-api.md §3 marks
// required: the SDKs validate responses strictly, so a missing one breaks a
// real client (docs/dev/vercel-sandbox-api.md §9, item 19).

func checkSession(t *testing.T, s *vercel.Session) {
	t.Helper()
	if s == nil {
		t.Error("missing session")
		return
	}
	if s.ID == "" || s.VCPUs == 0 || s.Memory != s.VCPUs*2048 || s.Region == "" || s.Timeout == 0 || s.Status == "" ||
		s.RequestedAt == 0 || s.CreatedAt == 0 || s.UpdatedAt == 0 || s.Cwd == "" || s.ProjectID == "" || s.SourceSandboxName == "" {
		t.Errorf("session lacks required fields: %+v", s)
	}
	if s.Status == vercel.SessionRunning && s.StartedAt == 0 {
		t.Errorf("running session without startedAt: %+v", s)
	}
}

func checkSandbox(t *testing.T, s *vercel.Sandbox) {
	t.Helper()
	if s.Name == "" || s.CurrentSessionID == "" || s.Status == "" || s.StatusUpdatedAt == 0 || s.CreatedAt == 0 || s.UpdatedAt == 0 {
		t.Errorf("sandbox lacks required fields: %+v", s)
	}
	if (s.Status == vercel.SessionRunning) != (s.ExpiresAt != 0) {
		t.Errorf("sandbox expiresAt must be set exactly while running: %+v", s)
	}
}

func checkSnapshot(t *testing.T, s *vercel.Snapshot) {
	t.Helper()
	if s.ID == "" || s.SourceSessionID == "" || s.Region == "" || s.Status == "" || s.CreatedAt == 0 || s.UpdatedAt == 0 || s.LastUsedAt == 0 {
		t.Errorf("snapshot lacks required fields: %+v", s)
	}
}

func checkCommand(t *testing.T, c *vercel.Command) {
	t.Helper()
	if c.ID == "" || c.Name == "" || c.Args == nil || c.Cwd == "" || c.SessionID == "" || c.StartedAt == 0 {
		t.Errorf("command lacks required fields: %+v", c)
	}
}

func TestContractSandboxLifecycle(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)

	created := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("life"), Tags: map[string]string{"owner": "contract"}, Ports: []int64{3000}})
	s := created.Session
	if created.Sandbox.Name != env.n("life") || !created.Sandbox.Persistent || created.Sandbox.CurrentSessionID != s.ID {
		t.Errorf("created sandbox %+v", created.Sandbox)
	}
	if s.Status != vercel.SessionRunning || s.ProjectID != env.project || s.SourceSandboxName != env.n("life") ||
		!strings.HasPrefix(s.ID, "sbx_") || s.Cwd != vercel.DefaultCwd {
		t.Errorf("created session %+v", s)
	}
	if len(created.Routes) != 1 || created.Routes[0].Port != 3000 || !strings.HasPrefix(created.Routes[0].URL, "https://") {
		t.Errorf("routes %+v", created.Routes)
	}
	checkSession(t, s)
	checkSandbox(t, &created.Sandbox)
	if created.Sandbox.ExpiresAt != s.StartedAt+s.Timeout {
		t.Errorf("expiresAt %d, want startedAt+timeout %d", created.Sandbox.ExpiresAt, s.StartedAt+s.Timeout)
	}

	// /v2 with a runtime: /v3 would refuse the runtime field.
	v2 := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("life-v2"), Runtime: "node24"})
	if v2.Sandbox.Runtime != "node24" && v2.Session.Runtime != "node24" {
		t.Errorf("runtime not applied: sandbox %q session %q", v2.Sandbox.Runtime, v2.Session.Runtime)
	}

	got, err := env.c.GetSandbox(ctx, env.n("life"), false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Session == nil || got.Session.ID != s.ID || got.Resumed || got.Sandbox.Tags["owner"] != "contract" {
		t.Errorf("get %+v", got)
	}

	patched, err := env.c.UpdateSandbox(ctx, env.n("life"), vercel.UpdateSandboxRequest{Timeout: 600000, Tags: map[string]string{"owner": "contract", "tier": "gold"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if patched.Sandbox.Timeout != 600000 || patched.Sandbox.Tags["tier"] != "gold" {
		t.Errorf("patched %+v", patched.Sandbox)
	}

	// Stop, then resume into a new session.
	if _, err := env.c.StopSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	stopped, err := env.c.GetSandbox(ctx, env.n("life"), false)
	if err != nil {
		t.Fatal(err)
	}
	if stopped.Resumed || stopped.Session == nil || stopped.Session.Status != vercel.SessionStopped {
		t.Errorf("without resume, a stopped sandbox must stay stopped: %+v", stopped.Session)
	}
	checkSandbox(t, &stopped.Sandbox)
	checkSession(t, stopped.Session)
	resumed, err := env.c.GetSandbox(ctx, env.n("life"), true)
	if err != nil {
		t.Fatal(err)
	}
	if !resumed.Resumed || resumed.Session == nil || resumed.Session.ID == s.ID || resumed.Session.Status != vercel.SessionRunning {
		t.Errorf("resume %+v / %+v", resumed, resumed.Session)
	}

	deleted, err := env.c.DeleteSandbox(ctx, env.n("life"), false)
	if err != nil {
		t.Fatal(err)
	}
	if deleted.Name != env.n("life") {
		t.Errorf("deleted %+v", deleted)
	}
	if _, err := env.c.GetSandbox(ctx, env.n("life"), false); !vercel.IsNotFound(err) {
		t.Errorf("get after delete: %v, want 404", err)
	}
	if _, err := env.c.DeleteSandbox(ctx, env.n("life"), false); !vercel.IsNotFound(err) {
		t.Errorf("second delete: %v, want 404", err)
	}
	if _, err := env.c.GetSession(ctx, s.ID); !vercel.IsNotFound(err) {
		t.Errorf("session of a deleted sandbox: %v, want 404", err)
	}

	// A taken name on a first attempt is a conflict for the caller to judge.
	if _, err := env.c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: env.n("life-v2")}); !vercel.IsConflict(err) || vercel.IsInvalid(err) {
		t.Errorf("duplicate name: %v, want IsConflict", err)
	}
}

// TestContractPlacementAndRetention: what the operator sends for
// spec.region, spec.failoverRegions and spec.snapshotRetention comes back
// as sent, on create and on update (issue 34 items 1 and 3).
func TestContractPlacementAndRetention(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)
	day := int64(86_400_000)
	created := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("placed"), Region: "iad1", FailoverRegions: []string{"sfo1"},
		SnapshotExpiration: &day, KeepLastSnapshots: &vercel.KeepLastSnapshots{Count: 3, Expiration: &day, DeleteEvicted: ptr.To(true)}})
	sb := created.Sandbox
	if sb.Region != "iad1" || !slices.Equal(sb.FailoverRegions, []string{"sfo1"}) || created.Session.Region != "iad1" {
		t.Errorf("created: region %q failover %v session region %q", sb.Region, sb.FailoverRegions, created.Session.Region)
	}
	if sb.SnapshotExpiration == nil || *sb.SnapshotExpiration != day || sb.KeepLastSnapshots == nil || sb.KeepLastSnapshots.Count != 3 {
		t.Errorf("created: snapshotExpiration %v keepLastSnapshots %+v", sb.SnapshotExpiration, sb.KeepLastSnapshots)
	}
	week := 7 * day
	patched, err := env.c.UpdateSandbox(ctx, env.n("placed"), vercel.UpdateSandboxRequest{Region: "sfo1", FailoverRegions: []string{},
		SnapshotExpiration: &week, KeepLastSnapshots: &vercel.KeepLastSnapshots{Count: 1, Expiration: &week, DeleteEvicted: ptr.To(true)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	sb = patched.Sandbox
	if sb.Region != "sfo1" || len(sb.FailoverRegions) != 0 || sb.SnapshotExpiration == nil || *sb.SnapshotExpiration != week ||
		sb.KeepLastSnapshots == nil || sb.KeepLastSnapshots.Count != 1 {
		t.Errorf("patched: region %q failover %v snapshotExpiration %v keepLastSnapshots %+v", sb.Region, sb.FailoverRegions, sb.SnapshotExpiration, sb.KeepLastSnapshots)
	}
	if _, err := env.c.UpdateSandbox(ctx, env.n("placed"), vercel.UpdateSandboxRequest{Region: "sfo1", FailoverRegions: []string{"sfo1"}}, false); !vercel.IsInvalid(err) {
		t.Errorf("failover naming the region: %v, want a 400", err)
	}
}

// TestContractRewind: setting a persistent sandbox's currentSnapshotId to an
// earlier snapshot of its own makes the next session resume from it, the
// request Sandbox.spec.rewind sends after stopping the session (issue 34
// item 4; docs/decisions/0006-rewind.md).
func TestContractRewind(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)
	name := env.n("rewound")
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: name}).Session.ID
	pause := func(id, content string) string {
		t.Helper()
		if err := env.c.WriteFiles(ctx, id, []vercel.File{{Path: "state.txt", Content: []byte(content)}}); err != nil {
			t.Fatal(err)
		}
		stop, err := env.c.StopSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if stop.Sandbox == nil || stop.Sandbox.CurrentSnapshotID == "" {
			t.Fatalf("a persistent stop names no current snapshot: %+v", stop.Sandbox)
		}
		return stop.Sandbox.CurrentSnapshotID
	}
	resume := func() string {
		t.Helper()
		got, err := env.c.GetSandbox(ctx, name, true)
		if err != nil || got.Session == nil {
			t.Fatalf("resume: %+v %v", got, err)
		}
		return got.Session.ID
	}
	a := pause(id, "A")
	b := pause(resume(), "B")
	if a == b {
		t.Fatalf("two pauses made one snapshot %s", a)
	}
	patched, err := env.c.UpdateSandbox(ctx, name, vercel.UpdateSandboxRequest{CurrentSnapshotID: a}, false)
	if err != nil {
		t.Fatal(err)
	}
	if patched.Sandbox.CurrentSnapshotID != a {
		t.Errorf("PATCH currentSnapshotId %s answered %s", a, patched.Sandbox.CurrentSnapshotID)
	}
	got, err := env.c.ReadFile(ctx, resume(), "state.txt", "")
	if err != nil || string(got) != "A" {
		t.Errorf("after the rewind to %s the file reads %q, %v; want the first pause's A", a, got, err)
	}
}

// TestContractImage: a create from a managed image (what spec.source.image
// sends) comes back with the image pinned to a digest and no runtime
// (issue 34 item 2).
func TestContractImage(t *testing.T) {
	env := newPortableContractEnv(t)
	created := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("imaged"), Image: "vercel/sandbox/node:24"})
	sb := created.Sandbox
	if !strings.HasPrefix(sb.Image, "vercel/sandbox/node@sha256:") || strings.Count(sb.Image, "@sha256:") != 1 {
		t.Errorf("image %q, want vercel/sandbox/node pinned to one digest", sb.Image)
	}
}

func TestContractListPagination(t *testing.T) {
	env := newContractEnv(t, emulator.Options{})
	ctx := testCtx(t)
	for _, n := range []string{"page-a", "page-b", "page-c"} {
		mustCreate(t, env, vercel.CreateSandboxRequest{Name: n})
	}
	first, err := env.c.ListSandboxes(ctx, vercel.ListSandboxesOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Sandboxes) != 1 || first.Pagination.Next == nil {
		t.Fatalf("first page %+v", first)
	}
	second, err := env.c.ListSandboxes(ctx, vercel.ListSandboxesOptions{Limit: 1, Cursor: *first.Pagination.Next})
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Sandboxes) != 1 || second.Sandboxes[0].Name == first.Sandboxes[0].Name {
		t.Fatalf("second page %+v", second)
	}
	// Default order is createdAt desc.
	if first.Sandboxes[0].Name != "page-c" || second.Sandboxes[0].Name != "page-b" {
		t.Errorf("order: %s, %s", first.Sandboxes[0].Name, second.Sandboxes[0].Name)
	}

	before := env.emu.RequestCount("listSandboxes")
	all, err := env.c.ListAllSandboxes(ctx, vercel.ListSandboxesOptions{Limit: 1, SortBy: "name", SortOrder: "asc"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "page-a,page-b,page-c" {
		t.Errorf("walked %v", names)
	}
	if n := env.emu.RequestCount("listSandboxes") - before; n < 3 {
		t.Errorf("walk took %d requests, want ≥3 pages", n)
	}

	pref, err := env.c.ListAllSandboxes(ctx, vercel.ListSandboxesOptions{SortBy: "name", NamePrefix: "page-b"})
	if err != nil || len(pref) != 1 || pref[0].Name != "page-b" {
		t.Errorf("namePrefix: %v %v", pref, err)
	}

	sessions, err := env.c.ListAllSessions(ctx, vercel.ListSessionsOptions{Name: "page-a", Limit: 1})
	if err != nil || len(sessions) != 1 || sessions[0].SourceSandboxName != "page-a" {
		t.Errorf("sessions of page-a: %+v %v", sessions, err)
	}
}

func TestContractSessions(t *testing.T) {
	env := newContractEnv(t, emulator.Options{Plan: emulator.PlanHobby()})
	ctx := testCtx(t)
	created := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "sess", Timeout: 60000, Ports: []int64{3000, 4000}})
	id := created.Session.ID

	got, err := env.c.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Session.ID != id || got.Session.Timeout != 60000 || len(got.Routes) != 2 {
		t.Errorf("get session %+v", got)
	}

	ext, err := env.c.ExtendTimeout(ctx, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ext.Timeout != 120000 {
		t.Errorf("timeout after extend = %d, want 120000", ext.Timeout)
	}
	// Hobby's maximum session is 45 min.
	_, err = env.c.ExtendTimeout(ctx, id, time.Hour)
	var ae *vercel.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != vercel.CodeSandboxTimeoutInvalid || !vercel.IsInvalid(err) {
		t.Errorf("extend beyond plan max: %v", err)
	}

	const secret = "ghp_contractSecretValue"
	sess, err := env.c.UpdateNetworkPolicy(ctx, id, vercel.NetworkPolicy{
		Mode:           vercel.NetworkCustom,
		AllowedDomains: []string{"api.github.com", "*.npmjs.org"},
		InjectionRules: []vercel.InjectionRule{{Domain: "api.github.com", Headers: map[string]string{"Authorization": "Bearer " + secret}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	np := sess.NetworkPolicy
	if np == nil || np.Mode != vercel.NetworkCustom || len(np.InjectionRules) != 1 ||
		!slices.Equal(np.InjectionRules[0].HeaderNames, []string{"Authorization"}) || np.InjectionRules[0].Headers != nil {
		t.Errorf("policy answer %+v", np)
	}
	if again, err := env.c.GetSession(ctx, id); err != nil || again.Session.NetworkPolicy == nil || again.Session.NetworkPolicy.Mode != vercel.NetworkCustom {
		t.Errorf("policy not kept on the session: %+v %v", again, err)
	}
	if strings.Contains(env.bodies.all(), secret) {
		t.Error("a response carried the injected header value")
	}

	stop, err := env.c.StopSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if stop.Session.Status != vercel.SessionStopped || stop.Session.StoppedAt == 0 || stop.Session.Duration == 0 && stop.Session.StartedAt != stop.Session.StoppedAt {
		t.Errorf("stop %+v", stop.Session)
	}
	checkSession(t, &stop.Session)
	// Persistent by default: the stop took an automatic snapshot.
	if stop.Snapshot == nil || stop.Sandbox == nil || stop.Snapshot.CreationMethod != "automatic" || stop.Sandbox.CurrentSnapshotID != stop.Snapshot.ID {
		t.Errorf("persistent stop: sandbox %+v snapshot %+v", stop.Sandbox, stop.Snapshot)
	}
	if _, err := env.c.ExtendTimeout(ctx, id, time.Minute); !vercel.IsSessionStopped(err) {
		t.Errorf("extend on a stopped session: %v, want 410 sandbox_stopped", err)
	}
	if again, err := env.c.StopSession(ctx, id); err != nil || again.Session.Status != vercel.SessionStopped {
		t.Errorf("second stop: %+v %v", again, err)
	}
}

func TestContractCommands(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("cmds"), Env: map[string]string{"FROM_SANDBOX": "sb"}}).Session.ID

	cmd, err := env.c.RunCommand(ctx, id, vercel.RunCommandRequest{
		Command: "sh", Args: []string{"-c", `sleep 0.3; echo "out $FROM_SANDBOX $FROM_CMD"; echo err >&2; exit 7`},
		Env: map[string]string{"FROM_CMD": "cmd"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.ExitCode != nil || !strings.HasPrefix(cmd.ID, "cmd_") || cmd.Name != "sh" || cmd.SessionID != id {
		t.Errorf("detached command %+v", cmd)
	}
	checkCommand(t, cmd)
	done, err := env.c.GetCommand(ctx, id, cmd.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if done.ExitCode == nil || *done.ExitCode != 7 {
		t.Errorf("waited command %+v", done)
	}
	checkCommand(t, done)
	stdout, stderr, err := env.c.ReadAllLogs(ctx, id, cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "out sb cmd\n" || stderr != "err\n" {
		t.Errorf("logs replay: stdout %q stderr %q", stdout, stderr)
	}

	second, err := env.c.RunCommand(ctx, id, vercel.RunCommandRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := env.c.ListCommands(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != second.ID || list[1].ID != cmd.ID {
		t.Errorf("list (newest first) = %+v", list)
	}
	if _, err := env.c.GetCommand(ctx, id, "cmd_doesnotexist", false); !vercel.IsNotFound(err) {
		t.Errorf("unknown command: %v", err)
	}

	// Kill: the exit code is 128+signal.
	sleeper, err := env.c.RunCommand(ctx, id, vercel.RunCommandRequest{Command: "sleep", Args: []string{"30"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.KillCommand(ctx, id, sleeper.ID, 15); err != nil {
		t.Fatal(err)
	}
	killed, err := env.c.GetCommand(ctx, id, sleeper.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if killed.ExitCode == nil || *killed.ExitCode != 128+15 {
		t.Errorf("killed command %+v", killed)
	}
}

// A long command's output arrives while it runs, before the exit record.
func TestContractCommandStream(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("stream")}).Session.ID

	s, err := env.c.RunCommandStream(ctx, id, vercel.RunCommandRequest{
		Command: "sh", Args: []string{"-c", `for i in 1 2 3 4 5; do echo "line $i"; sleep 0.25; done; exit 3`}, Logs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	var out strings.Builder
	var firstOutput, final time.Duration
	var records []vercel.Record
	for {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d records: %v", len(records), err)
		}
		records = append(records, rec)
		switch {
		case rec.Stream == vercel.StreamStdout:
			if firstOutput == 0 {
				firstOutput = time.Since(start)
			}
			out.WriteString(rec.Data)
		case rec.Command != nil && rec.Command.ExitCode != nil:
			final = time.Since(start)
		}
	}
	if len(records) < 3 || records[0].Command == nil || records[0].Command.ExitCode != nil {
		t.Fatalf("stream must open with the running command: %+v", records)
	}
	last := records[len(records)-1]
	if last.Command == nil || last.Command.ExitCode == nil || *last.Command.ExitCode != 3 || last.Command.ID != records[0].Command.ID {
		t.Errorf("final record %+v", last.Command)
	}
	if out.String() != "line 1\nline 2\nline 3\nline 4\nline 5\n" {
		t.Errorf("output %q", out.String())
	}
	if final-firstOutput < 700*time.Millisecond {
		t.Errorf("first output at %v, exit at %v: output was not streamed", firstOutput, final)
	}

	// Without logs the stream is exactly the two command records.
	s2, err := env.c.RunCommandStream(ctx, id, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", "echo hidden"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var n int
	for {
		rec, err := s2.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Command == nil {
			t.Errorf("output record without logs: %+v", rec)
		}
		n++
	}
	if n != 2 || s2.Command().ExitCode == nil || *s2.Command().ExitCode != 0 {
		t.Errorf("%d records, final %+v", n, s2.Command())
	}
}

func TestContractFilesSnapshotForkResume(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("files")}).Session.ID

	if err := env.c.Mkdir(ctx, id, "a/b/c", "", true); err != nil {
		t.Fatal(err)
	}
	err := env.c.WriteFiles(ctx, id, []vercel.File{
		{Path: "hello.txt", Content: []byte("hello")},
		{Path: "/vercel/sandbox/bin/run.sh", Content: []byte("#!/bin/sh\necho ran\n"), Mode: 0o755},
		{Path: "a/b/c/deep.txt", Content: []byte("deep")},
		{Path: "/tmp/abs.txt", Content: []byte("abs")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, cwd, want string }{
		{"hello.txt", "", "hello"},
		{"/vercel/sandbox/hello.txt", "", "hello"},
		{"c/deep.txt", "/vercel/sandbox/a/b", "deep"},
		{"/tmp/abs.txt", "", "abs"},
	} {
		got, err := env.c.ReadFile(ctx, id, tc.path, tc.cwd)
		if err != nil || string(got) != tc.want {
			t.Errorf("ReadFile(%s, cwd %q) = %q, %v", tc.path, tc.cwd, got, err)
		}
	}
	// The mode was applied and mkdir made the directory: a command sees both.
	run, err := env.c.RunCommandStream(ctx, id, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", "test -d a/b/c && ./bin/run.sh"}, Logs: true})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := run.Wait()
	run.Close()
	if err != nil || *cmd.ExitCode != 0 {
		t.Errorf("run.sh: %+v %v", cmd, err)
	}
	if _, err := env.c.ReadFile(ctx, id, "missing.txt", ""); !vercel.IsNotFound(err) {
		t.Errorf("missing file: %v, want IsNotFound", err)
	}

	snap, err := env.c.CreateSnapshot(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, &snap.Snapshot)
	checkSession(t, snap.Session)
	if snap.Session != nil && snap.Session.SnapshottedAt == 0 {
		t.Errorf("snapshotted session without snapshottedAt: %+v", snap.Session)
	}
	if snap.Snapshot.Status != vercel.SnapshotCreated || snap.Snapshot.SizeBytes <= 0 || snap.Snapshot.SourceSessionID != id ||
		snap.Session == nil || !snap.Session.Status.Terminal() && snap.Session.Status != vercel.SessionSnapshotting {
		t.Errorf("snapshot answer %+v / %+v", snap.Snapshot, snap.Session)
	}
	if _, err := env.c.RunCommand(ctx, id, vercel.RunCommandRequest{Command: "true"}); !vercel.IsSessionStopped(err) && !vercel.IsSnapshotting(err) {
		t.Errorf("command on a snapshotted session: %v", err)
	}

	fork, err := env.c.ForkSandbox(ctx, env.n("files"), vercel.ForkSandboxRequest{Name: env.n("files-fork")})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Sandbox.Name != env.n("files-fork") || fork.Session == nil || fork.Session.SourceSnapshotID != snap.Snapshot.ID {
		t.Errorf("fork %+v / %+v", fork.Sandbox, fork.Session)
	}
	if got, err := env.c.ReadFile(ctx, fork.Session.ID, "hello.txt", ""); err != nil || string(got) != "hello" {
		t.Errorf("fork read back %q, %v", got, err)
	}

	resumed, err := env.c.GetSandbox(ctx, env.n("files"), true)
	if err != nil {
		t.Fatal(err)
	}
	if !resumed.Resumed || resumed.Session.ID == id || resumed.Session.SourceSnapshotID != snap.Snapshot.ID {
		t.Errorf("resume %+v", resumed.Session)
	}
	if got, err := env.c.ReadFile(ctx, resumed.Session.ID, "a/b/c/deep.txt", ""); err != nil || string(got) != "deep" {
		t.Errorf("resume read back %q, %v", got, err)
	}
}

func TestContractSnapshots(t *testing.T) {
	env := newContractEnv(t, emulator.Options{})
	ctx := testCtx(t)
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "snaps"}).Session.ID
	if err := env.c.WriteFiles(ctx, id, []vercel.File{{Path: "x", Content: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	forever, err := env.c.CreateSnapshot(ctx, id, new(time.Duration))
	if err != nil {
		t.Fatal(err)
	}
	s := forever.Snapshot
	if s.ExpiresAt != 0 || !strings.HasPrefix(s.ID, "snap_") {
		t.Errorf("expiration 0 must mean never: %+v", s)
	}

	got, err := env.c.GetSnapshot(ctx, s.ID)
	if err != nil || got.ID != s.ID || got.Status != vercel.SnapshotCreated {
		t.Errorf("get %+v %v", got, err)
	}

	// A second snapshot with an expiry, from the resumed session.
	res, err := env.c.GetSandbox(ctx, "snaps", true)
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Hour
	timed, err := env.c.CreateSnapshot(ctx, res.Session.ID, &hour)
	if err != nil {
		t.Fatal(err)
	}
	if timed.Snapshot.ExpiresAt != timed.Snapshot.CreatedAt+hour.Milliseconds() || timed.Snapshot.ParentID != s.ID {
		t.Errorf("timed snapshot %+v", timed.Snapshot)
	}

	page, err := env.c.ListSnapshots(ctx, vercel.ListSnapshotsOptions{Name: "snaps", Limit: 1})
	if err != nil || len(page.Snapshots) != 1 || page.Pagination.Next == nil {
		t.Fatalf("list page %+v %v", page, err)
	}
	all, err := env.c.ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: "snaps", Limit: 1})
	if err != nil || len(all) != 2 {
		t.Errorf("list all %+v %v", all, err)
	}

	del, err := env.c.DeleteSnapshot(ctx, s.ID)
	if err != nil || del.Status != vercel.SnapshotDeleted {
		t.Fatalf("delete %+v %v", del, err)
	}
	if after, err := env.c.GetSnapshot(ctx, s.ID); err != nil || after.Status != vercel.SnapshotDeleted {
		t.Errorf("get after delete %+v %v", after, err)
	}
	_, err = env.c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "from-deleted", Source: &vercel.Source{Type: vercel.SourceSnapshot, SnapshotID: s.ID}})
	if !vercel.IsSnapshotNotFound(err) || vercel.Reason(err) != vercel.ReasonSnapshotNotFound {
		t.Errorf("create from a deleted snapshot: %v", err)
	}
	if _, ok := env.emu.Sandbox("from-deleted"); ok {
		t.Error("a failed create left a sandbox behind")
	}

	// The live snapshot still works as a source.
	from := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "from-timed", Source: &vercel.Source{Type: vercel.SourceSnapshot, SnapshotID: timed.Snapshot.ID}})
	if from.Session.SourceSnapshotID != timed.Snapshot.ID {
		t.Errorf("session from snapshot %+v", from.Session)
	}
	if b, err := env.c.ReadFile(ctx, from.Session.ID, "x", ""); err != nil || string(b) != "x" {
		t.Errorf("read from snapshot: %q %v", b, err)
	}
}

func TestContractTimeoutAutoStop(t *testing.T) {
	clock := emulator.NewFakeClock(time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC))
	env := newContractEnv(t, emulator.Options{Clock: clock})
	ctx := testCtx(t)
	created := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "timeout", Timeout: 60000})
	id := created.Session.ID

	clock.Advance(30 * time.Second)
	if s, err := env.c.GetSession(ctx, id); err != nil || s.Session.Status != vercel.SessionRunning {
		t.Fatalf("before the deadline: %+v %v", s, err)
	}
	clock.Advance(31 * time.Second)
	s, err := env.c.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Session.Status != vercel.SessionStopped || s.Session.StoppedAt == 0 {
		t.Errorf("after the deadline: %+v", s.Session)
	}
	_, err = env.c.RunCommand(ctx, id, vercel.RunCommandRequest{Command: "true"})
	if !vercel.IsSessionStopped(err) || vercel.Reason(err) != vercel.ReasonGone {
		t.Errorf("command on a timed-out session: %v, want 410 sandbox_stopped", err)
	}
	sb, err := env.c.GetSandbox(ctx, "timeout", false)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Sandbox.CurrentSnapshotID == "" || sb.Sandbox.ExpiresAt != 0 {
		t.Errorf("persistent sandbox after timeout: %+v", sb.Sandbox)
	}
}

func TestContractRateLimitHonoured(t *testing.T) {
	env := newContractEnv(t, emulator.Options{})
	ctx := testCtx(t)
	mustCreate(t, env, vercel.CreateSandboxRequest{Name: "rl"})
	// A command run is never re-sent, even for a short Retry-After.
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "rl-cmd"}).Session.ID
	env.emu.Faults().RateLimit("runCommand", 1, time.Second)
	before := env.emu.RequestCount("runCommand")
	if _, err := env.c.RunCommand(ctx, id, vercel.RunCommandRequest{Command: "true"}); !vercel.IsRateLimited(err) || vercel.RetryAfter(err) != time.Second {
		t.Errorf("runCommand under 429: %v", err)
	}
	if n := env.emu.RequestCount("runCommand") - before; n != 1 {
		t.Errorf("runCommand sent %d times", n)
	}

	env.emu.Faults().RateLimit("getSandbox", 1, time.Second)
	before = env.emu.RequestCount("getSandbox")
	start := time.Now()
	if _, err := env.c.GetSandbox(ctx, "rl", false); err != nil {
		t.Fatalf("GetSandbox after a short 429: %v", err)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("retried after %v, before Retry-After", el)
	}
	if n := env.emu.RequestCount("getSandbox") - before; n != 2 {
		t.Errorf("%d getSandbox requests, want 2 (429 then retry)", n)
	}

	env.emu.Faults().RateLimit("getSandbox", 1, 30*time.Second)
	before = env.emu.RequestCount("getSandbox")
	start = time.Now()
	_, err := env.c.GetSandbox(ctx, "rl", false)
	if !vercel.IsRateLimited(err) || vercel.RetryAfter(err) != 30*time.Second || time.Since(start) > 5*time.Second {
		t.Errorf("long Retry-After: %v (RetryAfter %v) after %v", err, vercel.RetryAfter(err), time.Since(start))
	}
	if n := env.emu.RequestCount("getSandbox") - before; n != 1 {
		t.Errorf("%d requests for a long Retry-After, want 1", n)
	}
	// The Retry-After holds back the credential's other calls too: they
	// fail at once, unsent, and say when to come back.
	_, err = env.c.ListSandboxes(ctx, vercel.ListSandboxesOptions{})
	if !vercel.IsRateLimited(err) || vercel.RetryAfter(err) < 25*time.Second || vercel.RetryAfter(err) > 45*time.Second {
		t.Errorf("list during the Retry-After: %v (RetryAfter %v)", err, vercel.RetryAfter(err))
	}
	if n := env.emu.RequestCount("listSandboxes"); n != 0 {
		t.Errorf("%d listSandboxes requests sent during the Retry-After", n)
	}
}

func TestContractTransientReadsAreRetried(t *testing.T) {
	env := newContractEnv(t, emulator.Options{})
	ctx := testCtx(t)
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "flaky"}).Session.ID
	env.emu.Faults().FailNext("getSession", 2, 503)
	before := env.emu.RequestCount("getSession")
	if _, err := env.c.GetSession(ctx, id); err != nil {
		t.Fatalf("GetSession after two 503s: %v", err)
	}
	if n := env.emu.RequestCount("getSession") - before; n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

func TestContractCommittedThenFailedCreate(t *testing.T) {
	for _, mode := range []emulator.FailMode{emulator.FailWith500, emulator.FailDropConnection} {
		t.Run(mode.String(), func(t *testing.T) {
			env := newContractEnv(t, emulator.Options{})
			ctx := testCtx(t)

			env.emu.Faults().CommitThenFail("createSandbox", 1, mode)
			got, err := env.c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "adopt-me"})
			if err != nil {
				t.Fatalf("named create after a lost answer: %v", err)
			}
			if got.Sandbox.Name != "adopt-me" || got.Session == nil {
				t.Errorf("adopted %+v", got)
			}
			live := env.emu.LiveSandboxes()
			if len(live) != 1 || live[0].Name != "adopt-me" {
				t.Errorf("emulator holds %d sandboxes (%+v), want exactly adopt-me", len(live), live)
			}
			if c, g := env.emu.RequestCount("createSandbox"), env.emu.RequestCount("getSandbox"); c != 2 || g != 1 {
				t.Errorf("createSandbox %d, getSandbox %d; want 2 and 1", c, g)
			}

			// Unnamed: never re-sent, so never duplicated; the caller sees
			// the failure.
			env.emu.Faults().CommitThenFail("createSandbox", 1, mode)
			_, err = env.c.CreateSandbox(ctx, vercel.CreateSandboxRequest{})
			if !vercel.IsTransient(err) {
				t.Errorf("unnamed create after a lost answer: %v, want transient", err)
			}
			if c := env.emu.RequestCount("createSandbox"); c != 3 {
				t.Errorf("unnamed create sent %d times", c-2)
			}
			if n := len(env.emu.LiveSandboxes()); n != 2 {
				t.Errorf("emulator holds %d sandboxes, want 2", n)
			}
		})
	}
}

func TestContractStreamsEndWhenTheSessionTimesOut(t *testing.T) {
	clock := emulator.NewFakeClock(time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC))
	env := newContractEnv(t, emulator.Options{Clock: clock})
	ctx := testCtx(t)
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "ends", Timeout: 60000}).Session.ID

	stream, err := env.c.RunCommandStream(ctx, id, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", "echo started; sleep 30"}, Logs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if rec, err := stream.Next(); err != nil || rec.Command == nil {
		t.Fatalf("first record %+v %v", rec, err)
	}
	logs, err := env.c.CommandLogs(ctx, id, stream.Command().ID)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	if rec, err := logs.Next(); err != nil || rec.Data != "started\n" {
		t.Fatalf("log replay %+v %v", rec, err)
	}

	clock.Advance(61 * time.Second)
	// Both streams end promptly: with the final record (the command was
	// killed) or an in-band sandbox_stream_closed error; never by hanging.
	cmd, err := stream.Wait()
	var se *vercel.StreamError
	switch {
	case err == nil:
		if cmd.ExitCode == nil || *cmd.ExitCode == 0 {
			t.Errorf("command outlived its session: %+v", cmd)
		}
	case errors.As(err, &se) && se.Code == vercel.CodeSandboxStreamClosed:
	default:
		t.Errorf("wait stream ended with %v", err)
	}
	for {
		_, err := logs.Next()
		if err == io.EOF || errors.As(err, &se) && se.Code == vercel.CodeSandboxStreamClosed {
			break
		}
		if err != nil {
			t.Fatalf("log stream ended with %v", err)
		}
	}
}

func TestContractDeleteOrphanSnapshots(t *testing.T) {
	env := newPortableContractEnv(t)
	ctx := testCtx(t)
	id := mustCreate(t, env, vercel.CreateSandboxRequest{Name: env.n("orphans")}).Session.ID
	snap, err := env.c.CreateSnapshot(ctx, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	keep := mustCreate(t, env, vercel.CreateSandboxRequest{Name: "keeps"}).Session.ID
	kept, err := env.c.CreateSnapshot(ctx, keep, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.DeleteSandbox(ctx, "keeps", false); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.DeleteSandbox(ctx, env.n("orphans"), true); err != nil {
		t.Fatal(err)
	}
	// Orphan deletion is asynchronous on the real API.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := env.c.GetSnapshot(ctx, snap.Snapshot.ID)
		if vercel.IsNotFound(err) || err == nil && s.Status == vercel.SnapshotDeleted {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("orphan snapshot still %+v %v", s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s, err := env.c.GetSnapshot(ctx, kept.Snapshot.ID); err != nil || s.Status != vercel.SnapshotCreated {
		t.Errorf("snapshot of a sandbox deleted without the flag: %+v %v", s, err)
	}
}

func TestContractConcurrencyLimit(t *testing.T) {
	env := newContractEnv(t, emulator.Options{})
	ctx := testCtx(t)
	mustCreate(t, env, vercel.CreateSandboxRequest{Name: "only-one"})
	env.emu.Faults().SetMaxRunning(1)
	_, err := env.c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "one-too-many"})
	if !vercel.IsRateLimited(err) {
		t.Errorf("create over the concurrency limit: %v, want 429", err)
	}
	if n := len(env.emu.LiveSandboxes()); n != 1 {
		t.Errorf("%d sandboxes after a refused create", n)
	}
}

func TestContractAuthAndScope(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	oidc := enc(`{"alg":"RS256"}`) + "." + enc(`{"owner_id":"`+contractTeam+`","project_id":"`+contractProject+`"}`) + "." + enc("sig")
	env := newContractEnv(t, emulator.Options{Token: oidc})
	ctx := testCtx(t)

	// The OIDC token alone scopes the client; the /api prefix of the SDK's
	// default base URL works too.
	c, err := vercel.New(vercel.Config{BaseURL: env.emu.URL() + "/api", OIDCToken: oidc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: "oidc"}); err != nil {
		t.Fatalf("create with OIDC: %v", err)
	}
	if sb, ok := env.emu.Sandbox("oidc"); !ok || sb.Name != "oidc" {
		t.Error("sandbox not created in the token's scope")
	}
	if _, err := env.c.GetSandbox(ctx, "oidc", false); err != nil {
		t.Errorf("same scope through explicit ids: %v", err)
	}

	bad, err := vercel.New(vercel.Config{BaseURL: env.emu.URL(), Token: "wrong-token", TeamID: contractTeam, ProjectID: contractProject})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.GetSandbox(ctx, "oidc", false)
	if !vercel.IsUnauthorized(err) || strings.Contains(err.Error(), "wrong-token") {
		t.Errorf("wrong token: %v", err)
	}
}
