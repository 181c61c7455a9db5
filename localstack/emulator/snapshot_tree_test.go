package emulator

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// treePage is GET /v2/sandboxes/snapshots/tree's answer as the SDK reads it.
type treePage struct {
	Snapshots  []treeEntry `json:"snapshots"`
	Anchor     *treeEntry  `json:"anchor"`
	Pagination struct {
		Count int64   `json:"count"`
		Next  *string `json:"next"`
	} `json:"pagination"`
}

func (te *tenv) tree(anchor, order string, limit int) treePage {
	te.t.Helper()
	q := url.Values{"project": {"prj_emulator"}, "snapshotId": {anchor}}
	if order != "" {
		q.Set("sortOrder", order)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out treePage
	te.must(200, "GET", "/v2/sandboxes/snapshots/tree?"+q.Encode(), nil, &out)
	return out
}

// walk follows pagination.next as the SDK's paginator does (the next page's
// snapshotId is the previous page's next) and returns the ids in order.
func (te *tenv) walk(anchor, order string, limit int) []string {
	te.t.Helper()
	var ids []string
	for range 10 {
		page := te.tree(anchor, order, limit)
		for _, n := range page.Snapshots {
			ids = append(ids, n.Snapshot.ID)
		}
		if page.Pagination.Next == nil {
			return ids
		}
		anchor = *page.Pagination.Next
	}
	te.t.Fatalf("the walk from %s (%s) does not end: %v", anchor, order, ids)
	return nil
}

// TestSnapshotTreeBothDirectionsAndPaging: the lineage s0 → s1 → s2 → s3 of
// a persistent sandbox, and t0, a snapshot of another sandbox created from
// s1 (a sibling of s2), seen as SDK 3.5's Snapshot.tree and CLI 4.5's
// `snapshots tree` read it.
func TestSnapshotTreeBothDirectionsAndPaging(t *testing.T) {
	te := newEnv(t, Options{})
	sid := te.create(map[string]any{"name": "s"}).Session.ID
	var s []string
	stop := func() {
		te.clk.Advance(time.Second)
		out := te.stop(sid)
		if out.Snapshot == nil {
			t.Fatal("a persistent sandbox's stop made no snapshot")
		}
		s = append(s, out.Snapshot.ID)
		_, res := te.getSandbox("s", true)
		sid = res.Session.ID
	}
	stop()
	stop()
	other := te.create(map[string]any{"name": "t", "source": map[string]any{"type": "snapshot", "snapshotId": s[1]}})
	te.clk.Advance(time.Second)
	t0 := te.stop(other.Session.ID).Snapshot.ID
	stop()
	stop()

	desc := te.tree(s[3], "desc", 0)
	if desc.Anchor == nil || desc.Anchor.Snapshot.ID != s[3] {
		t.Fatalf("anchor: %+v", desc.Anchor)
	}
	if got := ids(desc.Snapshots); strings.Join(got, ",") != strings.Join([]string{s[2], s[1], s[0]}, ",") {
		t.Errorf("ancestors of s3: %v, want s2, s1, s0 %v (the anchor only in anchor)", got, s)
	}
	if desc.Pagination.Next != nil || desc.Pagination.Count != 3 {
		t.Errorf("ancestors' pagination: count %d next %v, want 3 and null", desc.Pagination.Count, desc.Pagination.Next)
	}
	// s2's level: s1's children s2 and t0.
	if n := desc.Snapshots[0]; n.Count != "2" || len(n.Siblings) != 1 || n.Siblings[0].ID != t0 {
		t.Errorf("s2's node: count %q siblings %v, want 2 and [t0 %s]", n.Count, n.Siblings, t0)
	}
	if n := desc.Snapshots[2]; n.Count != "1" || len(n.Siblings) != 0 {
		t.Errorf("the root's node: count %q siblings %v", n.Count, n.Siblings)
	}

	if got := ids(te.tree(s[0], "asc", 0).Snapshots); strings.Join(got, ",") != strings.Join(s[1:], ",") {
		t.Errorf("descendants of s0: %v, want s1, s2, s3 (the newest child at each level) %v", got, s)
	}
	if got := te.tree(s[3], "asc", 0); len(got.Snapshots) != 0 || got.Pagination.Next != nil {
		t.Errorf("descendants of the newest: %+v", got)
	}
	if got := te.tree(s[1], "", 0); strings.Join(ids(got.Snapshots), ",") != s[0] {
		t.Errorf("the default order walks ancestors: %v", ids(got.Snapshots))
	}

	// Pages of one, followed through pagination.next as snapshotId.
	if got := te.walk(s[3], "desc", 1); strings.Join(got, ",") != strings.Join([]string{s[2], s[1], s[0]}, ",") {
		t.Errorf("ancestors page by page: %v", got)
	}
	if got := te.walk(s[0], "asc", 2); strings.Join(got, ",") != strings.Join(s[1:], ",") {
		t.Errorf("descendants two by two: %v", got)
	}

	for _, q := range []string{"sortOrder=up", "limit=0", "limit=51", "limit=x"} {
		if r := te.req("GET", "/v2/sandboxes/snapshots/tree?project=prj_emulator&snapshotId="+s[0]+"&"+q, nil); r.status != 400 {
			t.Errorf("%s: %d, want 400", q, r.status)
		}
	}
	if r := te.req("GET", "/v2/sandboxes/snapshots/tree?project=prj_emulator&snapshotId=snap_nope", nil); r.status != 404 {
		t.Errorf("unknown anchor: %d, want 404", r.status)
	}
}

func ids(nodes []treeEntry) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Snapshot.ID)
	}
	return out
}
