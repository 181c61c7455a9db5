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

// handleSnapshotTree answers the SDK-only snapshot tree endpoint. Its exact
// semantics are undocumented; the emulator serves the lineage of the anchor
// snapshot (`snapshotId`): the anchor and its ancestors via parentId, each
// with its siblings (snapshots sharing its parent) and, in `count`, its
// number of children. Without snapshotId the roots of the project are listed.
func (e *Emulator) handleSnapshotTree(rc *reqCtx) {
	anchorID := rc.query("snapshotId")
	e.serveList(rc, []string{"createdAt"}, false, func(sc scope, q listQuery) (any, *apiError) {
		children := map[string][]*snapshotRec{}
		var all []*snapshotRec
		for _, sn := range e.st.snapshots {
			if sn.scope != sc || sn.status == vercel.SnapshotDeleted {
				continue
			}
			all = append(all, sn)
			children[sn.parentID] = append(children[sn.parentID], sn)
		}
		for _, c := range children {
			sort.Slice(c, func(i, j int) bool { return c[i].seq < c[j].seq })
		}
		entry := func(sn *snapshotRec) treeEntry {
			te := treeEntry{Snapshot: renderSnapshot(sn), Siblings: []vercel.Snapshot{}, Count: strconv.Itoa(len(children[sn.id]))}
			for _, sib := range children[sn.parentID] {
				if sib != sn {
					te.Siblings = append(te.Siblings, renderSnapshot(sib))
				}
			}
			return te
		}
		var chain []*snapshotRec
		var anchor *treeEntry
		if anchorID != "" {
			sn := e.st.snapshots[anchorID]
			if sn == nil || sn.scope != sc {
				return nil, notFound("Snapshot %s not found.", anchorID)
			}
			a := entry(sn)
			anchor = &a
			seen := map[string]bool{}
			for cur := sn; cur != nil && !seen[cur.id]; cur = e.st.snapshots[cur.parentID] {
				seen[cur.id] = true
				chain = append(chain, cur)
			}
		} else {
			for _, sn := range all {
				if p := e.st.snapshots[sn.parentID]; p == nil || p.scope != sc || p.status == vercel.SnapshotDeleted {
					chain = append(chain, sn)
				}
			}
		}
		out := struct {
			Snapshots  []treeEntry       `json:"snapshots"`
			Anchor     *treeEntry        `json:"anchor,omitempty"`
			Pagination vercel.Pagination `json:"pagination"`
		}{Anchor: anchor}
		out.Snapshots, out.Pagination = listPage(q, chain, snapshotKey, entry)
		return out, nil
	})
}
