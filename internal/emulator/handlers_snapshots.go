package emulator

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func (e *Emulator) handleCreateSnapshot(rc *reqCtx) {
	var b snapshotBody
	if err := rc.decode(&b, true); err != nil {
		rc.fail(err)
		return
	}
	if b.Expiration != nil && *b.Expiration < 0 {
		rc.fail(invalid("expiration", "should be >= 0"))
		return
	}
	e.mu.Lock()
	s, err := e.liveSessionLocked(rc)
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	exp := e.snapshotExpirationFor(s.sb, b.Expiration, rc.version == "v3")
	j := e.stopLocked(s, stopSnapshot, e.nowMs(), exp)
	if j.result == nil || j.result.status != vercel.SnapshotCreated {
		e.unlock()
		rc.fail(&apiError{status: 500, code: "internal_server_error", message: "The snapshot could not be taken; the session was stopped."})
		return
	}
	sess := e.renderSession(s)
	resp := vercel.SnapshotResponse{Snapshot: renderSnapshot(j.result), Session: &sess}
	e.unlock()
	rc.json(http.StatusCreated, resp)
}

// snapshotLocked finds a snapshot visible to the request.
func (e *Emulator) snapshotLocked(rc *reqCtx) (*snapshotRec, *apiError) {
	id := rc.param("snap")
	if len(id) > 33 || !snapshotPattern.MatchString(id) {
		return nil, invalid("snapshotId", "should match pattern \"^(?:snap_[A-Za-z0-9]{28}|vhs_[a-z0-9]{28})$\"")
	}
	sn := e.st.snapshots[id]
	if sn == nil || !rc.visible(sn.scope) {
		return nil, notFound("Snapshot %s not found.", id)
	}
	return sn, nil
}

func (e *Emulator) handleGetSnapshot(rc *reqCtx) {
	e.mu.Lock()
	sn, err := e.snapshotLocked(rc)
	if err == nil && sn.status == vercel.SnapshotDeleted && e.opts.DeletedSnapshotGetStatus == http.StatusNotFound {
		err = notFound("Snapshot %s not found.", sn.id)
	}
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	resp := vercel.SnapshotResponse{Snapshot: renderSnapshot(sn)}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleDeleteSnapshot(rc *reqCtx) {
	e.mu.Lock()
	sn, err := e.snapshotLocked(rc)
	if err == nil && sn.status == vercel.SnapshotDeleted && e.opts.DeletedSnapshotGetStatus == http.StatusNotFound {
		err = notFound("Snapshot %s not found.", sn.id)
	}
	if err != nil {
		e.unlock()
		rc.fail(err)
		return
	}
	e.deleteSnapshotLocked(sn, e.nowMs())
	resp := vercel.SnapshotResponse{Snapshot: renderSnapshot(sn)}
	e.unlock()
	rc.json(http.StatusOK, resp)
}

func (e *Emulator) handleListSnapshots(rc *reqCtx) {
	sc, err := rc.queryProject("project")
	if err != nil {
		rc.fail(err)
		return
	}
	q, err := parseListQuery(rc.r.URL.Query(), []string{"createdAt"}, false)
	if err != nil {
		rc.fail(err)
		return
	}
	name := rc.query("name")
	e.mu.Lock()
	var items []pageItem
	var recs []*snapshotRec
	for _, sn := range e.st.snapshots {
		if sn.scope != sc || sn.status == vercel.SnapshotDeleted || (name != "" && sn.sandboxName != name) {
			continue
		}
		items = append(items, pageItem{num: sn.createdAt, seq: sn.seq, idx: len(recs)})
		recs = append(recs, sn)
	}
	page, pg := paginate(items, q)
	out := vercel.ListSnapshotsResponse{Snapshots: make([]vercel.Snapshot, 0, len(page)), Pagination: pg}
	for _, i := range page {
		out.Snapshots = append(out.Snapshots, renderSnapshot(recs[i]))
	}
	e.unlock()
	rc.json(http.StatusOK, out)
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
	sc, err := rc.queryProject("project")
	if err != nil {
		rc.fail(err)
		return
	}
	q, err := parseListQuery(rc.r.URL.Query(), []string{"createdAt"}, false)
	if err != nil {
		rc.fail(err)
		return
	}
	anchorID := rc.query("snapshotId")
	e.mu.Lock()
	defer e.unlock()
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
			rc.fail(notFound("Snapshot %s not found.", anchorID))
			return
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
	items := make([]pageItem, 0, len(chain))
	for i, sn := range chain {
		items = append(items, pageItem{num: sn.createdAt, seq: sn.seq, idx: i})
	}
	page, pg := paginate(items, q)
	out := struct {
		Snapshots  []treeEntry       `json:"snapshots"`
		Anchor     *treeEntry        `json:"anchor,omitempty"`
		Pagination vercel.Pagination `json:"pagination"`
	}{Snapshots: make([]treeEntry, 0, len(page)), Anchor: anchor, Pagination: pg}
	for _, i := range page {
		out.Snapshots = append(out.Snapshots, entry(chain[i]))
	}
	rc.json(http.StatusOK, out)
}
