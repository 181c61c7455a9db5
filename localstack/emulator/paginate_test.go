package emulator

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// walk follows pagination.next with limit=1 and returns the names seen.
func walkSandboxes(t *testing.T, te *tenv, query string) []string {
	t.Helper()
	var names []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("pagination does not end")
		}
		q := "/v2/sandboxes?project=prj_emulator&limit=1" + query
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		var out vercel.ListSandboxesResponse
		te.must(200, "GET", q, nil, &out)
		if out.Pagination.Count != int64(len(out.Sandboxes)) || len(out.Sandboxes) > 1 {
			t.Fatalf("page: %+v", out.Pagination)
		}
		for _, s := range out.Sandboxes {
			names = append(names, s.Name)
		}
		if out.Pagination.Next == nil {
			return names
		}
		cursor = *out.Pagination.Next
	}
}

func TestPaginationWalk(t *testing.T) {
	te := newEnv(t, Options{})
	// Three sandboxes created in the same millisecond: the tie-breaker keeps
	// the order stable; a fourth later.
	for _, n := range []string{"b-two", "a-one", "c-three"} {
		te.create(map[string]any{"name": n, "tags": map[string]string{"group": n[:1]}})
	}
	te.clk.Advance(time.Second)
	d := te.create(map[string]any{"name": "d-four", "tags": map[string]string{"group": "a"}})
	te.stop(d.Session.ID)

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"d-four", "c-three", "a-one", "b-two"}},
		{"&sortOrder=asc", []string{"b-two", "a-one", "c-three", "d-four"}},
		{"&sortBy=name&sortOrder=asc", []string{"a-one", "b-two", "c-three", "d-four"}},
		{"&sortBy=name", []string{"d-four", "c-three", "b-two", "a-one"}},
		{"&sortBy=name&namePrefix=c", []string{"c-three"}},
		{"&status=stopped", []string{"d-four"}},
		{"&status=running&sortOrder=asc", []string{"b-two", "a-one", "c-three"}},
		{"&tags=group:a", []string{"d-four", "a-one"}},
		{"&sortBy=statusUpdatedAt", []string{"d-four", "c-three", "a-one", "b-two"}},
	} {
		if got := walkSandboxes(t, te, tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.query, got, tc.want)
		}
	}
	// Default page size 20, last page has next:null.
	var out vercel.ListSandboxesResponse
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, &out)
	if len(out.Sandboxes) != 4 || out.Pagination.Next != nil || out.Pagination.Count != 4 {
		t.Fatalf("default page: %d %+v", len(out.Sandboxes), out.Pagination)
	}
	// A raw check that next is JSON null, not absent.
	r := te.must(200, "GET", "/v2/sandboxes?project=prj_emulator", nil, nil)
	if !strings.Contains(string(r.body), `"next":null`) {
		t.Fatalf("next not null: %s", r.body)
	}
	// A cursor from one sort cannot be used with another.
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator&limit=1", nil, &out)
	if r := te.req("GET", "/v2/sandboxes?project=prj_emulator&limit=1&sortBy=name&cursor="+url.QueryEscape(*out.Pagination.Next), nil); r.status != 400 {
		t.Fatalf("cursor of another sort: %d", r.status)
	}
	// Items deleted between pages do not break the walk.
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator&limit=2", nil, &out)
	te.must(200, "DELETE", "/v2/sandboxes/"+out.Sandboxes[1].Name+prj, nil, nil)
	te.must(200, "GET", "/v2/sandboxes?project=prj_emulator&limit=2&cursor="+url.QueryEscape(*out.Pagination.Next), nil, &out)
	if len(out.Sandboxes) != 2 || out.Sandboxes[0].Name != "a-one" {
		t.Fatalf("after delete: %+v", out.Sandboxes)
	}
}

func TestPaginationSessionsAndSnapshots(t *testing.T) {
	te := newEnv(t, Options{})
	sb := te.create(map[string]any{"name": "s"})
	sid := sb.Session.ID
	for i := 0; i < 3; i++ {
		te.clk.Advance(time.Second)
		te.stop(sid)
		_, res := te.getSandbox("s", true)
		sid = res.Session.ID
	}
	te.create(map[string]any{"name": "other"})

	var ids []string
	cursor := ""
	for {
		var out vercel.ListSessionsResponse
		q := "/v2/sandboxes/sessions?project=prj_emulator&name=s&limit=1"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		te.must(200, "GET", q, nil, &out)
		for _, s := range out.Sessions {
			ids = append(ids, s.ID)
		}
		if out.Pagination.Next == nil {
			break
		}
		cursor = *out.Pagination.Next
	}
	if len(ids) != 4 || ids[0] != sid {
		t.Fatalf("sessions newest first: %v (current %s)", ids, sid)
	}
	var all vercel.ListSessionsResponse
	te.must(200, "GET", "/v2/sandboxes/sessions?project=prj_emulator&sortOrder=asc", nil, &all)
	if len(all.Sessions) != 5 || all.Sessions[0].ID != sb.Session.ID {
		t.Fatalf("all sessions asc: %d", len(all.Sessions))
	}

	var snaps []string
	cursor = ""
	for {
		var out vercel.ListSnapshotsResponse
		q := "/v2/sandboxes/snapshots?project=prj_emulator&name=s&limit=1&sortOrder=asc"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		te.must(200, "GET", q, nil, &out)
		for _, s := range out.Snapshots {
			snaps = append(snaps, s.ID)
		}
		if out.Pagination.Next == nil {
			break
		}
		cursor = *out.Pagination.Next
	}
	if len(snaps) != 3 {
		t.Fatalf("snapshots: %v", snaps)
	}
	// Deleted snapshots are not listed.
	te.must(200, "DELETE", "/v2/sandboxes/snapshots/"+snaps[0], nil, nil)
	var out vercel.ListSnapshotsResponse
	te.must(200, "GET", "/v2/sandboxes/snapshots?project=prj_emulator", nil, &out)
	if len(out.Snapshots) != 2 {
		t.Fatalf("after delete: %d", len(out.Snapshots))
	}
	// Tree: the ancestors of the newest snapshot; a deleted one ends the
	// line (snapshot_tree_test.go has the rest).
	var tree struct {
		Snapshots []treeEntry `json:"snapshots"`
		Anchor    *treeEntry  `json:"anchor"`
	}
	te.must(200, "GET", "/v2/sandboxes/snapshots/tree?project=prj_emulator&snapshotId="+snaps[2], nil, &tree)
	if tree.Anchor == nil || tree.Anchor.Snapshot.ID != snaps[2] || len(tree.Snapshots) != 1 || tree.Snapshots[0].Snapshot.ID != snaps[1] || tree.Snapshots[0].Count != "1" {
		t.Fatalf("tree: %+v", tree)
	}
}
