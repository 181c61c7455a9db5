package emulator

import (
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func TestTimeoutAutoStopAndResume(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "p", "timeout": 60000})
	sid := sb.Session.ID
	if sb.Sandbox.CurrentSnapshotID != "" {
		t.Fatalf("fresh sandbox has snapshot %q", sb.Sandbox.CurrentSnapshotID)
	}
	te.writeFiles(sid, map[string]string{"vercel/sandbox/keep.txt": "kept"})

	te.clk.Advance(59 * time.Second)
	if s := te.session(sid); s.Status != vercel.SessionRunning {
		t.Fatalf("before deadline: %s", s.Status)
	}
	te.clk.Advance(5 * time.Second) // past the deadline: the sweep runs synchronously
	s := te.session(sid)
	if s.Status != vercel.SessionStopped || s.StoppedAt != t0.UnixMilli()+60000 || s.Duration != 60000 ||
		s.RequestedStopAt == 0 || s.NetworkTransfer == nil {
		t.Fatalf("after timeout: %+v", s)
	}
	_, got := te.getSandbox("p", false)
	if got.Sandbox.Status != vercel.SessionStopped || got.Sandbox.ExpiresAt != 0 || got.Sandbox.CurrentSnapshotID == "" || got.Resumed {
		t.Fatalf("sandbox after timeout: %+v", got.Sandbox)
	}
	snapID := got.Sandbox.CurrentSnapshotID
	var snap vercel.SnapshotResponse
	te.must(200, "GET", "/v2/sandboxes/snapshots/"+snapID, nil, &snap)
	if snap.Snapshot.CreationMethod != "automatic" || snap.Snapshot.SourceSessionID != sid || snap.Snapshot.Status != vercel.SnapshotCreated || snap.Snapshot.SizeBytes <= 0 {
		t.Fatalf("automatic snapshot: %+v", snap.Snapshot)
	}

	// Everything but GET/stop on the dead session is 410
	// (docs/dev/vercel-sandbox-api.md §9 item 7).
	for _, op := range []struct{ method, path string }{
		{"POST", "/cmd"}, {"GET", "/cmd"}, {"POST", "/fs/read"}, {"POST", "/fs/mkdir"},
		{"POST", "/snapshot"}, {"POST", "/extend-timeout"}, {"POST", "/network-policy"},
	} {
		body := map[string]any{"command": "ls", "path": "x", "duration": 1000, "mode": "allow-all"}
		if op.path == "/snapshot" {
			body = nil
		}
		if op.method == "GET" {
			body = nil
		}
		r := te.req(op.method, "/v2/sandboxes/sessions/"+sid+op.path, body)
		if op.path == "/extend-timeout" || op.path == "/network-policy" || op.path == "/cmd" || op.path == "/fs/read" || op.path == "/fs/mkdir" {
			r = te.req(op.method, "/v2/sandboxes/sessions/"+sid+op.path, pick(op.path))
		}
		if r.status != 410 || r.errCode() != "sandbox_stopped" {
			t.Errorf("%s %s on stopped session: %d %s", op.method, op.path, r.status, r.body)
		}
	}
	if r := te.writeFiles(sid, map[string]string{"a": "b"}); r.status != 410 {
		t.Errorf("write on stopped session: %d", r.status)
	}

	// GET without resume never starts a session; with resume it does.
	te.must(200, "GET", "/v2/sandboxes/p"+prj, nil, nil)
	if n := len(te.e.Sessions()); n != 1 {
		t.Fatalf("GET without resume started a session (%d sessions)", n)
	}
	te.clk.Advance(time.Hour)
	r, res := te.getSandbox("p", true)
	if r.status != 200 || !res.Resumed || res.Session.ID == sid || res.Session.SourceSnapshotID != snapID || res.Session.Status != vercel.SessionRunning {
		t.Fatalf("resume: %d %+v", r.status, res)
	}
	if res.Sandbox.CurrentSessionID != res.Session.ID || res.Sandbox.ExpiresAt != te.clk.Now().UnixMilli()+60000 {
		t.Fatalf("sandbox after resume: %+v", res.Sandbox)
	}
	// The filesystem came back.
	if r := te.readFile(res.Session.ID, "/vercel/sandbox/keep.txt"); r.status != 200 || string(r.body) != "kept" {
		t.Fatalf("restored file: %d %q", r.status, r.body)
	}
	// The snapshot's expiry counts from this use.
	te.must(200, "GET", "/v2/sandboxes/snapshots/"+snapID, nil, &snap)
	if snap.Snapshot.LastUsedAt != te.clk.Now().UnixMilli() || snap.Snapshot.ExpiresAt != snap.Snapshot.LastUsedAt+30*24*3600*1000 {
		t.Fatalf("snapshot after use: %+v", snap.Snapshot)
	}
	// Resume on a running sandbox is a no-op.
	if _, again := te.getSandbox("p", true); again.Resumed || again.Session.ID != res.Session.ID {
		t.Fatalf("second resume: %+v", again)
	}
	// Second stop on the new session: parentId chains the snapshots.
	stop := te.stop(res.Session.ID)
	if stop.Snapshot == nil || stop.Snapshot.ParentID != snapID || stop.Sandbox == nil || stop.Sandbox.CurrentSnapshotID != stop.Snapshot.ID {
		t.Fatalf("stop of resumed session: %+v", stop)
	}
	var sessions vercel.ListSessionsResponse
	te.must(200, "GET", "/v2/sandboxes/sessions?project=prj_emulator&name=p", nil, &sessions)
	if len(sessions.Sessions) != 2 {
		t.Fatalf("sessions: %d", len(sessions.Sessions))
	}
}

func pick(path string) map[string]any {
	switch path {
	case "/extend-timeout":
		return map[string]any{"duration": 1000}
	case "/network-policy":
		return map[string]any{"mode": "allow-all"}
	case "/cmd":
		return map[string]any{"command": "ls"}
	case "/snapshot":
		return nil
	}
	return map[string]any{"path": "x"}
}

func TestNonPersistentCannotResume(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "np", "persistent": false})
	stop := te.stop(sb.Session.ID)
	if stop.Snapshot != nil || stop.Sandbox != nil || stop.Session.Status != vercel.SessionStopped {
		t.Fatalf("non-persistent stop: %+v", stop)
	}
	r, _ := te.getSandbox("np", true)
	if r.status != 410 || r.errCode() != "snapshot_not_found" || r.errMessage() != "Cannot resume sandbox: no snapshot available." {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	// PATCH ?resume=true too.
	if r := te.req("PATCH", "/v2/sandboxes/np"+prj+"&resume=true", map[string]any{}); r.status != 410 {
		t.Fatalf("patch resume: %d %s", r.status, r.body)
	}
}

func TestStopSemantics(t *testing.T) {
	for _, second := range []int{200, 410} {
		te := newEnv(t, Options{SecondStopStatus: second})
		sb := te.create(nil)
		first := te.stop(sb.Session.ID)
		if first.Session.Status != vercel.SessionStopped || first.Snapshot == nil || first.Sandbox == nil ||
			first.Snapshot.Status != vercel.SnapshotCreated || first.Sandbox.Status != vercel.SessionStopped {
			t.Fatalf("stop: %+v", first)
		}
		r := te.req("POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/stop", nil)
		if r.status != second {
			t.Fatalf("second stop: %d, want %d", r.status, second)
		}
		if second == 200 {
			var again vercel.StopSessionResponse
			r.json(t, &again)
			if again.Session.StoppedAt != first.Session.StoppedAt || again.Snapshot != nil {
				t.Fatalf("second stop changed: %+v", again)
			}
		} else if r.errCode() != "sandbox_stopped" {
			t.Fatalf("second stop code %s", r.errCode())
		}
		if n := len(te.e.Snapshots()); n != 1 {
			t.Fatalf("%d snapshots after two stops", n)
		}
		if r := te.req("POST", "/v2/sandboxes/sessions/sbx_nope/stop", nil); r.status != 404 {
			t.Fatalf("stop unknown: %d", r.status)
		}
	}
}

func TestExtendTimeout(t *testing.T) {
	te := newEnv(t, Options{Plan: PlanHobby()})
	sb := te.create(map[string]any{"timeout": 60000})
	id := sb.Session.ID
	var out struct {
		Session vercel.Session `json:"session"`
	}
	te.must(200, "POST", "/v2/sandboxes/sessions/"+id+"/extend-timeout", map[string]any{"duration": 30000}, &out)
	if out.Session.Timeout != 90000 {
		t.Fatalf("timeout %d", out.Session.Timeout)
	}
	_, g := te.getSandbox(sb.Sandbox.Name, false)
	if g.Sandbox.ExpiresAt != t0.UnixMilli()+90000 {
		t.Fatalf("expiresAt %d", g.Sandbox.ExpiresAt)
	}
	r := te.req("POST", "/v2/sandboxes/sessions/"+id+"/extend-timeout", map[string]any{"duration": 999})
	if r.status != 400 || r.errCode() != "bad_request" || !strings.Contains(r.errMessage(), "`duration`") {
		t.Fatalf("short extend: %d %s", r.status, r.body)
	}
	r = te.req("POST", "/v2/sandboxes/sessions/"+id+"/extend-timeout", map[string]any{"duration": 45 * 60000})
	if r.status != 400 || r.errCode() != "sandbox_timeout_invalid" {
		t.Fatalf("extend beyond plan max: %d %s", r.status, r.body)
	}
	// The old deadline no longer fires; the new one does.
	te.clk.Advance(61 * time.Second)
	if s := te.session(id); s.Status != vercel.SessionRunning {
		t.Fatalf("stopped at the old deadline")
	}
	te.clk.Advance(30 * time.Second)
	if s := te.session(id); s.Status != vercel.SessionStopped || s.Duration != 90000 {
		t.Fatalf("after extended deadline: %+v", s)
	}
}

func TestManualSnapshot(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "m", "persistent": false})
	te.writeFiles(sb.Session.ID, map[string]string{"vercel/sandbox/f": "1"})
	var out vercel.SnapshotResponse
	r := te.must(201, "POST", "/v2/sandboxes/sessions/"+sb.Session.ID+"/snapshot", nil, &out)
	_ = r
	if out.Snapshot.Status != vercel.SnapshotCreated || out.Snapshot.SizeBytes <= 0 || out.Snapshot.CreationMethod != "manual" ||
		out.Snapshot.ExpiresAt != t0.UnixMilli()+30*24*3600*1000 || out.Snapshot.LastUsedAt != t0.UnixMilli() {
		t.Fatalf("snapshot: %+v", out.Snapshot)
	}
	if out.Session == nil || out.Session.Status != vercel.SessionStopped || out.Session.SnapshottedAt == 0 {
		t.Fatalf("session after snapshot: %+v", out.Session)
	}
	_, g := te.getSandbox("m", false)
	if g.Sandbox.CurrentSnapshotID != out.Snapshot.ID {
		t.Fatalf("currentSnapshotId %q", g.Sandbox.CurrentSnapshotID)
	}
	// Even a non-persistent sandbox resumes from a manual snapshot.
	rr, res := te.getSandbox("m", true)
	if rr.status != 200 || !res.Resumed {
		t.Fatalf("resume: %d %s", rr.status, rr.body)
	}
	// v3 route: 7 days; expiration 0: never.
	te.must(201, "POST", "/v3/sandboxes/sessions/"+res.Session.ID+"/snapshot", nil, &out)
	if out.Snapshot.ExpiresAt != te.clk.Now().UnixMilli()+7*24*3600*1000 {
		t.Fatalf("v3 expiry: %+v", out.Snapshot)
	}
	if out.Snapshot.ParentID == "" {
		t.Fatalf("second snapshot has no parent")
	}
	_, res = te.getSandbox("m", true)
	out = vercel.SnapshotResponse{}
	te.must(201, "POST", "/v2/sandboxes/sessions/"+res.Session.ID+"/snapshot", map[string]any{"expiration": 0}, &out)
	if out.Snapshot.ExpiresAt != 0 {
		t.Fatalf("expiration 0: %+v", out.Snapshot)
	}
	if r := te.req("POST", "/v2/sandboxes/sessions/"+res.Session.ID+"/snapshot", map[string]any{"expiration": -1}); r.status != 400 {
		t.Fatalf("negative expiration: %d", r.status)
	}
}

func TestSnapshotExpiryAndDelete(t *testing.T) {
	for _, getStatus := range []int{200, 404} {
		te := newEnv(t, Options{DeletedSnapshotGetStatus: getStatus})
		sb := te.create(map[string]any{"name": "x", "snapshotExpiration": 3600000, "timeout": 3 * 3600000})
		stop := te.stop(sb.Session.ID)
		snap := stop.Snapshot
		if snap.ExpiresAt != t0.UnixMilli()+3600000 {
			t.Fatalf("expiresAt %d", snap.ExpiresAt)
		}
		// Using it resets the timer (expiry counts from last use).
		te.clk.Advance(50 * time.Minute)
		_, res := te.getSandbox("x", true)
		te.clk.Advance(50 * time.Minute) // 100 min after creation, 50 after use
		var got vercel.SnapshotResponse
		te.must(200, "GET", "/v2/sandboxes/snapshots/"+snap.ID, nil, &got)
		if got.Snapshot.Status != vercel.SnapshotCreated {
			t.Fatalf("expired despite recent use: %+v", got.Snapshot)
		}
		// Stop without auto-snapshot would leave it current; make it current again.
		te.must(200, "PATCH", "/v2/sandboxes/x"+prj, map[string]any{"persistent": false}, nil)
		te.stop(res.Session.ID)
		te.clk.Advance(11 * time.Minute)
		r := te.req("GET", "/v2/sandboxes/snapshots/"+snap.ID, nil)
		if r.status != getStatus {
			t.Fatalf("GET expired snapshot: %d, want %d", r.status, getStatus)
		}
		if getStatus == 200 {
			r.json(t, &got)
			if got.Snapshot.Status != vercel.SnapshotDeleted {
				t.Fatalf("expired snapshot status %s", got.Snapshot.Status)
			}
		}
		all := te.e.Snapshots()
		if len(all) != 1 || all[0].Status != vercel.SnapshotDeleted {
			t.Fatalf("Snapshots(): %+v", all)
		}
		// Resume and create-from-snapshot now fail with 410.
		if r, _ := te.getSandbox("x", true); r.status != 410 || r.errCode() != "snapshot_not_found" {
			t.Fatalf("resume from expired: %d %s", r.status, r.body)
		}
		r = te.req("POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator", "source": map[string]any{"type": "snapshot", "snapshotId": snap.ID}})
		if r.status != 410 || r.errCode() != "snapshot_not_found" {
			t.Fatalf("create from expired: %d %s", r.status, r.body)
		}
		// Explicit delete.
		sb2 := te.create(nil)
		stop2 := te.stop(sb2.Session.ID)
		var del vercel.SnapshotResponse
		te.must(200, "DELETE", "/v2/sandboxes/snapshots/"+stop2.Snapshot.ID, nil, &del)
		if del.Snapshot.Status != vercel.SnapshotDeleted {
			t.Fatalf("delete answer: %+v", del.Snapshot)
		}
		if r := te.req("GET", "/v2/sandboxes/snapshots/"+stop2.Snapshot.ID, nil); r.status != getStatus {
			t.Fatalf("GET deleted: %d", r.status)
		}
		if r := te.req("GET", "/v2/sandboxes/snapshots/snap_short", nil); r.status != 400 {
			t.Fatalf("malformed id: %d", r.status)
		}
		if r := te.req("GET", "/v2/sandboxes/snapshots/snap_AAAAAAAAAAAAAAAAAAAAAAAAAAAA", nil); r.status != 404 {
			t.Fatalf("unknown id: %d", r.status)
		}
	}
}

func TestKeepLastSnapshots(t *testing.T) {
	for _, deleteEvicted := range []bool{true, false} {
		te := newEnv(t, Options{})
		sb := te.create(map[string]any{"name": "k", "keepLastSnapshots": map[string]any{"count": 2, "deleteEvicted": deleteEvicted}})
		if sb.Sandbox.KeepLastSnapshots == nil || *sb.Sandbox.KeepLastSnapshots.DeleteEvicted != deleteEvicted {
			t.Fatalf("keepLastSnapshots: %+v", sb.Sandbox.KeepLastSnapshots)
		}
		var ids []string
		sid := sb.Session.ID
		for i := 0; i < 3; i++ {
			st := te.stop(sid)
			ids = append(ids, st.Snapshot.ID)
			te.clk.Advance(time.Second)
			_, res := te.getSandbox("k", true)
			sid = res.Session.ID
		}
		status := map[string]vercel.SnapshotStatus{}
		for _, s := range te.e.Snapshots() {
			status[s.ID] = s.Status
		}
		wantOldest := vercel.SnapshotCreated
		if deleteEvicted {
			wantOldest = vercel.SnapshotDeleted
		}
		if status[ids[0]] != wantOldest || status[ids[1]] != vercel.SnapshotCreated || status[ids[2]] != vercel.SnapshotCreated {
			t.Fatalf("deleteEvicted=%v: %v (ids %v)", deleteEvicted, status, ids)
		}
	}
	// keepLastSnapshots.deleteEvicted is always present in answers.
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"keepLastSnapshots": map[string]any{"count": 1}})
	if sb.Sandbox.KeepLastSnapshots.DeleteEvicted == nil || !*sb.Sandbox.KeepLastSnapshots.DeleteEvicted {
		t.Fatalf("default deleteEvicted: %+v", sb.Sandbox.KeepLastSnapshots)
	}
	// /v4 defaults: 7-day expiry, keep last 1; null disables.
	var v4 vercel.SandboxResponse
	te.must(200, "POST", "/v4/sandboxes", map[string]any{"projectId": "prj_emulator"}, &v4)
	if v4.Sandbox.SnapshotExpiration == nil || *v4.Sandbox.SnapshotExpiration != 7*24*3600*1000 || v4.Sandbox.KeepLastSnapshots == nil || v4.Sandbox.KeepLastSnapshots.Count != 1 {
		t.Fatalf("v4 defaults: %+v", v4.Sandbox)
	}
	v4 = vercel.SandboxResponse{}
	te.must(200, "POST", "/v4/sandboxes", map[string]any{"projectId": "prj_emulator", "keepLastSnapshots": nil}, &v4)
	if v4.Sandbox.KeepLastSnapshots != nil {
		t.Fatalf("v4 keepLastSnapshots null: %+v", v4.Sandbox.KeepLastSnapshots)
	}
}

func TestDeleteSandbox(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "d"})
	stop := te.stop(sb.Session.ID)
	_, res := te.getSandbox("d", true)
	var del struct {
		Sandbox vercel.Sandbox `json:"sandbox"`
	}
	te.must(200, "DELETE", "/v2/sandboxes/d"+prj, nil, &del)
	if del.Sandbox.Name != "d" || del.Sandbox.Status != vercel.SessionStopped {
		t.Fatalf("delete answer: %+v", del.Sandbox)
	}
	for _, p := range []struct{ m, path string }{
		{"GET", "/v2/sandboxes/d" + prj},
		{"GET", "/v2/sandboxes/d" + prj + "&resume=true"},
		{"PATCH", "/v2/sandboxes/d" + prj},
		{"DELETE", "/v2/sandboxes/d" + prj},
		{"POST", "/v2/sandboxes/d/fork" + prj},
		{"GET", "/v2/sandboxes/sessions/" + sb.Session.ID},
		{"GET", "/v2/sandboxes/sessions/" + res.Session.ID},
		{"POST", "/v2/sandboxes/sessions/" + res.Session.ID + "/stop"},
	} {
		if r := te.req(p.m, p.path, map[string]any{}); r.status != 404 || r.errCode() != "not_found" {
			t.Errorf("%s %s after delete: %d %s", p.m, p.path, r.status, r.body)
		}
	}
	if _, ok := te.e.Sandbox("d"); ok || len(te.e.LiveSandboxes()) != 0 || len(te.e.Sessions()) != 0 {
		t.Fatal("deleted sandbox still listed")
	}
	// The snapshot survives and can seed a new sandbox with the same name.
	var snap vercel.SnapshotResponse
	te.must(200, "GET", "/v2/sandboxes/snapshots/"+stop.Snapshot.ID, nil, &snap)
	if snap.Snapshot.Status != vercel.SnapshotCreated {
		t.Fatalf("snapshot after delete: %s", snap.Snapshot.Status)
	}
	again := te.create(map[string]any{"name": "d", "source": map[string]any{"type": "snapshot", "snapshotId": stop.Snapshot.ID}})
	if again.Session.SourceSnapshotID != stop.Snapshot.ID {
		t.Fatalf("create from snapshot: %+v", again.Session)
	}
	// deleteOrphanSnapshots removes the sandbox's own snapshots.
	st := te.stop(again.Session.ID)
	te.must(200, "DELETE", "/v2/sandboxes/d"+prj+"&deleteOrphanSnapshots=true", nil, nil)
	te.must(200, "GET", "/v2/sandboxes/snapshots/"+st.Snapshot.ID, nil, &snap)
	if snap.Snapshot.Status != vercel.SnapshotDeleted {
		t.Fatalf("orphan snapshot: %s", snap.Snapshot.Status)
	}
}

func TestDuplicateNameAndNotIdempotent(t *testing.T) {
	for _, status := range []int{400, 409} {
		te := newEnv(t, Options{DuplicateNameStatus: status})
		a := te.create(nil)
		b := te.create(nil)
		if a.Sandbox.Name == b.Sandbox.Name || a.Session.ID == b.Session.ID {
			t.Fatal("two unnamed creates gave the same sandbox")
		}
		te.create(map[string]any{"name": "same"})
		r := te.req("POST", "/v3/sandboxes", map[string]any{"projectId": "prj_emulator", "name": "same"})
		if r.status != status || !strings.Contains(r.errMessage(), "GET /v2/sandboxes/same") {
			t.Fatalf("duplicate: %d %s", r.status, r.body)
		}
		if status == 400 && r.errCode() != "bad_request" {
			t.Fatalf("duplicate code %s", r.errCode())
		}
		if n := len(te.e.LiveSandboxes()); n != 3 {
			t.Fatalf("%d sandboxes", n)
		}
	}
}

func TestFork(t *testing.T) {
	te := newEnv(t, Options{})
	src := te.create(map[string]any{"name": "src", "ports": []int{3000}, "env": map[string]string{"A": "1"},
		"tags": map[string]string{"t": "v"}, "timeout": 120000, "resources": map[string]any{"vcpus": 4},
		"networkPolicy": map[string]any{"mode": "deny-all"}})
	te.writeFiles(src.Session.ID, map[string]string{"vercel/sandbox/live.txt": "live"})

	// Running source without a snapshot: the live filesystem is copied.
	var f1 vercel.SandboxResponse
	te.must(200, "POST", "/v2/sandboxes/src/fork"+prj, map[string]any{"name": "f1"}, &f1)
	if f1.Sandbox.VCPUs != 4 || f1.Sandbox.Timeout != 120000 || f1.Sandbox.Tags["t"] != "v" || f1.Sandbox.NetworkPolicy.Mode != "deny-all" || len(f1.Routes) != 1 || f1.Session.SourceSnapshotID != "" {
		t.Fatalf("fork copy: %+v", f1)
	}
	if r := te.readFile(f1.Session.ID, "/vercel/sandbox/live.txt"); r.status != 200 || string(r.body) != "live" {
		t.Fatalf("live copy: %d %s", r.status, r.body)
	}
	// With a snapshot: starts from it; body fields override.
	stop := te.stop(src.Session.ID)
	var f2 vercel.SandboxResponse
	te.must(200, "POST", "/v3/sandboxes/src/fork"+prj, map[string]any{"tags": map[string]string{"x": "y"}, "persistent": false}, &f2)
	if f2.Session.SourceSnapshotID != stop.Snapshot.ID || f2.Sandbox.Tags["x"] != "y" || f2.Sandbox.Persistent || f2.Sandbox.Name == "" {
		t.Fatalf("fork from snapshot: %+v", f2)
	}
	if f2.Sandbox.SnapshotExpiration == nil || *f2.Sandbox.SnapshotExpiration != 7*24*3600*1000 {
		t.Fatalf("v3 fork default snapshotExpiration: %+v", f2.Sandbox.SnapshotExpiration)
	}
	if r := te.readFile(f2.Session.ID, "/vercel/sandbox/live.txt"); r.status != 200 {
		t.Fatalf("snapshot fork file: %d", r.status)
	}
	for _, bad := range []map[string]any{{"source": map[string]any{"type": "git", "url": "https://x"}}, {"runtime": "node22"}} {
		if r := te.req("POST", "/v2/sandboxes/src/fork"+prj, bad); r.status != 400 {
			t.Errorf("fork with %v: %d", bad, r.status)
		}
	}
	if r := te.req("POST", "/v2/sandboxes/missing/fork"+prj, nil); r.status != 404 {
		t.Fatalf("fork missing: %d", r.status)
	}
	if r := te.req("POST", "/v2/sandboxes/src/fork"+prj, map[string]any{"name": "f1"}); r.status != 400 {
		t.Fatalf("fork duplicate name: %d", r.status)
	}
}

func TestUpdateSandbox(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "u", "ports": []int{3000}, "tags": map[string]string{"a": "1"}})
	var out vercel.SandboxResponse
	te.must(200, "PATCH", "/v2/sandboxes/u"+prj, map[string]any{
		"ports": []int{4000, 5000}, "resources": map[string]any{"vcpus": 4, "memory": 8192},
		"tags": map[string]string{}, "timeout": 600000, "env": map[string]string{"B": "2"},
	}, &out)
	if len(out.Routes) != 2 || out.Routes[0].Port != 4000 || out.Sandbox.VCPUs != 4 || out.Sandbox.Memory != 8192 ||
		out.Sandbox.Tags != nil || out.Sandbox.Timeout != 600000 || out.Session != nil {
		t.Fatalf("patch: %+v", out)
	}
	// Defaults apply to the next session, not the running one.
	if s := te.session(sb.Session.ID); s.VCPUs != 2 || s.Timeout != 300000 {
		t.Fatalf("running session changed: %+v", s)
	}
	var sr vercel.SessionResponse
	te.must(200, "GET", "/v2/sandboxes/sessions/"+sb.Session.ID, nil, &sr)
	if len(sr.Routes) != 2 {
		t.Fatalf("session routes: %+v", sr.Routes)
	}
	te.stop(sb.Session.ID)
	var res sandboxAndSession
	te.must(200, "PATCH", "/v2/sandboxes/u"+prj+"&resume=true", map[string]any{}, &res)
	if !res.Resumed || res.Session.VCPUs != 4 || res.Session.Timeout != 600000 {
		t.Fatalf("patch resume: %+v", res)
	}
	if r := te.req("PATCH", "/v2/sandboxes/u"+prj, map[string]any{"currentSnapshotId": "snap_nope"}); r.status != 400 {
		t.Fatalf("bad currentSnapshotId: %d %s", r.status, r.body)
	}
}

// TestTransitionalStates holds a stop (and a snapshot) in its slow part to
// observe stopping/snapshotting and the 422 answers of
// docs/dev/vercel-sandbox-api.md §9 item 7.
func TestTransitionalStates(t *testing.T) {
	for _, tc := range []struct {
		path, status, code string
		want               int
	}{
		{"/stop", "stopping", "sandbox_stopping", 200},
		{"/snapshot", "snapshotting", "sandbox_snapshotting", 201},
	} {
		t.Run(tc.status, func(t *testing.T) {
			te := newEnv(t, Options{})
			sb := te.create(map[string]any{"name": "tr"})
			id := sb.Session.ID
			te.writeFiles(id, map[string]string{"vercel/sandbox/a": "a"}) // a filesystem makes the stop slow
			entered, release := make(chan struct{}), make(chan struct{})
			te.e.mu.Lock()
			te.e.hookStop = func() { close(entered); <-release }
			te.e.mu.Unlock()
			first := make(chan resp, 1)
			go func() { first <- te.req("POST", "/v2/sandboxes/sessions/"+id+tc.path, nil) }()
			<-entered
			te.e.mu.Lock()
			te.e.hookStop = nil
			te.e.mu.Unlock()

			if s := te.session(id); string(s.Status) != tc.status {
				t.Fatalf("status %s, want %s", s.Status, tc.status)
			}
			for _, p := range []string{"/cmd", "/fs/read", "/extend-timeout", "/snapshot"} {
				r := te.req("POST", "/v2/sandboxes/sessions/"+id+p, pick(p))
				if r.status != 422 || r.errCode() != tc.code {
					t.Errorf("%s while %s: %d %s", p, tc.status, r.status, r.body)
				}
			}
			if r, _ := te.getSandbox("tr", true); r.status != 422 || r.errCode() != tc.code {
				t.Errorf("resume while %s: %d %s", tc.status, r.status, r.body)
			}
			// A concurrent stop waits for the transition, then answers the stopped session.
			second := make(chan resp, 1)
			go func() { second <- te.req("POST", "/v2/sandboxes/sessions/"+id+"/stop", nil) }()
			select {
			case r := <-second:
				t.Fatalf("second stop answered during the transition: %d", r.status)
			case <-time.After(50 * time.Millisecond):
			}
			close(release)
			if r := <-first; r.status != tc.want {
				t.Fatalf("first: %d %s", r.status, r.body)
			}
			r := <-second
			var st vercel.StopSessionResponse
			r.json(t, &st)
			if r.status != 200 || st.Session.Status != vercel.SessionStopped {
				t.Fatalf("second stop: %d %s", r.status, r.body)
			}
			if _, res := te.getSandbox("tr", true); !res.Resumed {
				t.Fatal("no resume after the transition")
			}
		})
	}
}

func TestStopBeforeStart(t *testing.T) {
	te := newEnv(t, Options{StartPending: time.Minute})
	sb := te.create(map[string]any{"name": "early"})
	// A fresh persistent session stopped while pending: an (empty) snapshot.
	st := te.stop(sb.Session.ID)
	if st.Snapshot == nil || st.Session.Duration != 0 || st.Session.StartedAt != 0 {
		t.Fatalf("stop pending: %+v", st)
	}
	// A resumed session stopped before it ran keeps the snapshot it booted from.
	_, res := te.getSandbox("early", true)
	if res.Session.Status != vercel.SessionPending {
		t.Fatalf("resume: %s", res.Session.Status)
	}
	st2 := te.stop(res.Session.ID)
	if st2.Snapshot != nil {
		t.Fatalf("snapshot of a session that never ran: %+v", st2.Snapshot)
	}
	if _, g := te.getSandbox("early", false); g.Sandbox.CurrentSnapshotID != st.Snapshot.ID {
		t.Fatalf("current snapshot %q, want %q", g.Sandbox.CurrentSnapshotID, st.Snapshot.ID)
	}
}
