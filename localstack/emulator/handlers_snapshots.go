package emulator

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func (e *Emulator) handleCreateSnapshot(rc *reqCtx) {
	var b snapshotBody
	if !rc.decodeChecked(&b, true) {
		return
	}
	serve(e, rc, e.liveSessionLocked, func(s *sessionRec) (any, *apiError) {
		exp := e.snapshotExpirationFor(s.sb, b.Expiration, rc.version == "v3")
		j := e.stopLocked(s, stopSnapshot, e.nowMs(), exp)
		if j.result == nil || j.result.status != vercel.SnapshotCreated {
			return nil, &apiError{status: 500, code: "internal_server_error", message: "The snapshot could not be taken; the session was stopped."}
		}
		sess := e.renderSession(s)
		return created{vercel.SnapshotResponse{Snapshot: renderSnapshot(j.result), Session: &sess}}, nil
	})
}

// snapshotLocked finds a snapshot visible to the request. A deleted (or
// expired) one is not found when Options.DeletedSnapshotGetStatus is 404.
func (e *Emulator) snapshotLocked(rc *reqCtx) (*snapshotRec, *apiError) {
	id := rc.param("snap")
	if len(id) > 33 || !snapshotPattern.MatchString(id) {
		return nil, invalid("snapshotId", "should match pattern \"^(?:snap_[A-Za-z0-9]{28}|vhs_[a-z0-9]{28})$\"")
	}
	sn := e.st.snapshots[id]
	if sn == nil || !rc.visible(sn.scope) ||
		(sn.status == vercel.SnapshotDeleted && e.opts.DeletedSnapshotGetStatus == http.StatusNotFound) {
		return nil, notFound("Snapshot %s not found.", id)
	}
	return sn, nil
}

func (e *Emulator) handleGetSnapshot(rc *reqCtx) {
	serve(e, rc, e.snapshotLocked, func(sn *snapshotRec) (any, *apiError) {
		return vercel.SnapshotResponse{Snapshot: renderSnapshot(sn)}, nil
	})
}

func (e *Emulator) handleDeleteSnapshot(rc *reqCtx) {
	serve(e, rc, e.snapshotLocked, func(sn *snapshotRec) (any, *apiError) {
		e.deleteSnapshotLocked(sn, e.nowMs())
		return vercel.SnapshotResponse{Snapshot: renderSnapshot(sn)}, nil
	})
}

// snapshotKey sorts snapshots by creation.
func snapshotKey(sn *snapshotRec) pageItem { return pageItem{num: sn.createdAt, seq: sn.seq} }

func (e *Emulator) handleListSnapshots(rc *reqCtx) {
	name := rc.query("name")
	e.serveList(rc, []string{"createdAt"}, false, func(sc scope, q listQuery) (any, *apiError) {
		var recs []*snapshotRec
		for _, sn := range e.st.snapshots {
			if sn.scope == sc && sn.status != vercel.SnapshotDeleted && (name == "" || sn.sandboxName == name) {
				recs = append(recs, sn)
			}
		}
		out := vercel.ListSnapshotsResponse{}
		out.Snapshots, out.Pagination = listPage(q, recs, snapshotKey, renderSnapshot)
		return out, nil
	})
}

// treeEntry is one entry of GET /v2/sandboxes/snapshots/tree.
type treeEntry struct {
	Snapshot vercel.Snapshot   `json:"snapshot"`
	Siblings []vercel.Snapshot `json:"siblings"`
	Count    string            `json:"count"`
}

// Defaults and bounds of the tree's limit (the CLI asks for 1–10, default
// 10; the SDK passes the caller's value through).
const (
	treeDefaultLimit = 10
	treeMaxLimit     = 50
)

// handleSnapshotTree answers the SDK-only snapshot tree endpoint, as the SDK
// 3.5 and the CLI 4.5 read it (Snapshot.tree, `sandbox snapshots tree`):
// snapshotId is the anchor, returned in `anchor`; sortOrder "desc" (the
// default) walks its ancestors (parent first, towards the root), "asc" its
// descendants (the newest child at each level). `snapshots` holds the page
// without the anchor, each node with its siblings (the other snapshots of
// its parent) and, in count, how many snapshots that level holds with it.
// pagination.next is the last node's id when the walk goes on: the SDK's
// paginator asks for the next page by passing it as snapshotId, and the CLI
// shows it as the cursor of `--cursor`. Deleted snapshots are not nodes.
// Without snapshotId the roots of the project are listed, as before.
func (e *Emulator) handleSnapshotTree(rc *reqCtx) {
	anchorID := rc.query("snapshotId")
	order := rc.query("sortOrder")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		rc.fail(badRequest("Invalid request: `sortOrder` should be one of asc, desc."))
		return
	}
	limit := treeDefaultLimit
	if v := rc.query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > treeMaxLimit {
			rc.fail(badRequest("Invalid request: `limit` should be an integer from 1 to %d.", treeMaxLimit))
			return
		}
		limit = n
	}
	sc, aerr := rc.queryProject("project")
	if aerr != nil {
		rc.fail(aerr)
		return
	}
	e.answerLocked(rc, func() (any, *apiError) {
		children := map[string][]*snapshotRec{}
		var roots []*snapshotRec
		for _, sn := range e.st.snapshots {
			if sn.scope != sc || sn.status == vercel.SnapshotDeleted {
				continue
			}
			children[sn.parentID] = append(children[sn.parentID], sn)
		}
		for _, c := range children {
			sort.Slice(c, func(i, j int) bool { return c[i].seq < c[j].seq })
		}
		live := func(id string) *snapshotRec {
			if sn := e.st.snapshots[id]; sn != nil && sn.scope == sc && sn.status != vercel.SnapshotDeleted {
				return sn
			}
			return nil
		}
		entry := func(sn *snapshotRec) treeEntry {
			level := children[sn.parentID]
			te := treeEntry{Snapshot: renderSnapshot(sn), Siblings: []vercel.Snapshot{}, Count: strconv.Itoa(max(len(level), 1))}
			for _, sib := range level {
				if sib != sn {
					te.Siblings = append(te.Siblings, renderSnapshot(sib))
				}
			}
			return te
		}
		out := struct {
			Snapshots  []treeEntry       `json:"snapshots"`
			Anchor     *treeEntry        `json:"anchor,omitempty"`
			Pagination vercel.Pagination `json:"pagination"`
		}{Snapshots: []treeEntry{}}
		if anchorID == "" {
			for _, list := range children {
				for _, sn := range list {
					if live(sn.parentID) == nil {
						roots = append(roots, sn)
					}
				}
			}
			sort.Slice(roots, func(i, j int) bool { return roots[i].seq < roots[j].seq })
			for _, sn := range roots {
				out.Snapshots = append(out.Snapshots, entry(sn))
			}
			out.Pagination.Count = int64(len(out.Snapshots))
			return out, nil
		}
		anchor := live(anchorID)
		if anchor == nil {
			return nil, notFound("Snapshot %s not found.", anchorID)
		}
		a := entry(anchor)
		out.Anchor = &a
		next := func(cur *snapshotRec) *snapshotRec {
			if order == "desc" {
				return live(cur.parentID)
			}
			if c := children[cur.id]; len(c) > 0 {
				return c[len(c)-1] // the newest child carries the line on
			}
			return nil
		}
		seen := map[string]bool{anchor.id: true}
		cur := next(anchor)
		for cur != nil && !seen[cur.id] && len(out.Snapshots) < limit {
			seen[cur.id] = true
			out.Snapshots = append(out.Snapshots, entry(cur))
			cur = next(cur)
		}
		out.Pagination.Count = int64(len(out.Snapshots))
		if cur != nil && !seen[cur.id] && len(out.Snapshots) > 0 {
			last := out.Snapshots[len(out.Snapshots)-1].Snapshot.ID
			out.Pagination.Next = &last
		}
		return out, nil
	})
}
