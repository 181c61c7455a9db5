package emulator

import (
	"testing"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// A persistent sandbox rewound by PATCH currentSnapshotId resumes from that
// snapshot (docs/dev/vercel-sandbox-api.md §5.4): the files are the earlier
// ones, the next stop's snapshot descends from it, and the later snapshot
// stays listed. What the operator's spec.rewind relies on.
func TestPatchCurrentSnapshotIDRewinds(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "rw", "keepLastSnapshots": map[string]any{"count": 5}})
	te.writeFiles(sb.Session.ID, map[string]string{"vercel/sandbox/notes.txt": "A"})
	a := te.stop(sb.Session.ID).Snapshot.ID
	_, res := te.getSandbox("rw", true)
	te.writeFiles(res.Session.ID, map[string]string{"vercel/sandbox/notes.txt": "B"})
	b := te.stop(res.Session.ID).Snapshot.ID

	var patched vercel.SandboxResponse
	te.must(200, "PATCH", "/v2/sandboxes/rw"+prj, map[string]any{"currentSnapshotId": a}, &patched)
	if patched.Sandbox.CurrentSnapshotID != a || patched.Session != nil {
		t.Fatalf("patch: current %q, session %+v; want %s and no session started", patched.Sandbox.CurrentSnapshotID, patched.Session, a)
	}
	r, res := te.getSandbox("rw", true)
	if r.status != 200 || !res.Resumed || res.Session.SourceSnapshotID != a {
		t.Fatalf("resume after rewind: %d %+v", r.status, res.Session)
	}
	if r := te.readFile(res.Session.ID, "/vercel/sandbox/notes.txt"); r.status != 200 || string(r.body) != "A" {
		t.Fatalf("rewound file: %d %q, want A", r.status, r.body)
	}
	if c := te.stop(res.Session.ID).Snapshot; c.ParentID != a {
		t.Fatalf("snapshot after the rewind has parent %q, want %s", c.ParentID, a)
	}
	var list vercel.ListSnapshotsResponse
	te.must(200, "GET", "/v2/sandboxes/snapshots?project=prj_emulator&name=rw", nil, &list)
	ids := map[string]bool{}
	for _, s := range list.Snapshots {
		ids[s.ID] = true
	}
	if !ids[a] || !ids[b] || len(list.Snapshots) != 3 {
		t.Fatalf("listing after the rewind: %+v", list.Snapshots)
	}

	// With resume=true the PATCH resumes from the snapshot in the same call.
	te.must(200, "PATCH", "/v2/sandboxes/rw"+prj+"&resume=true", map[string]any{"currentSnapshotId": b}, &patched)
	if patched.Session == nil || patched.Session.SourceSnapshotID != b {
		t.Fatalf("patch with resume: %+v", patched.Session)
	}
	if r := te.readFile(patched.Session.ID, "/vercel/sandbox/notes.txt"); string(r.body) != "B" {
		t.Fatalf("file after patch with resume: %q, want B", r.body)
	}
}
