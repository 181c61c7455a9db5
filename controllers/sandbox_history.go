package controllers

// status.history: the snapshot lineage of a persistent Sandbox, read from
// Vercel's snapshot listing only when it can have changed. Every new
// snapshot of the sandbox (a stop's, a capture's) and every rewind changes
// the sandbox's currentSnapshotId, which each look at Vercel records in
// status.currentSnapshotID; the listing is read when that id is not the one
// the history marks current. A poll that finds nothing new reads nothing.

import (
	"cmp"
	"context"
	"slices"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// historyTimeout bounds the one listing request: the history is a view, and
// a slow listing must not hold the reconcile.
const historyTimeout = 10 * time.Second

// refreshHistory brings status.history up to date with
// status.currentSnapshotID: one listing request when the current snapshot is
// not the one the history marks current, none otherwise. A failed listing
// leaves the history as it was (it is tried again at the next reconcile);
// it never fails the reconcile.
func (r *SandboxReconciler) refreshHistory(ctx context.Context, sbx *sandboxv1.Sandbox) {
	st := &sbx.Status
	if notPersistent(st) || st.CurrentSnapshotID == "" {
		// No snapshot yet, or a new Vercel sandbox (a recreation): the
		// lineage of another sandbox is not this one's.
		st.History = nil
		return
	}
	keep := int(sbx.Spec.SnapshotRetention.KeepLastOrDefault())
	if i := slices.IndexFunc(st.History, func(e sandboxv1.SnapshotHistoryEntry) bool { return e.Current }); i >= 0 && st.History[i].ID == st.CurrentSnapshotID {
		if len(st.History) > keep && i < keep {
			// keepLast was lowered: Vercel evicts at the next snapshot.
			st.History = st.History[:keep]
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	page, err := r.api(ctx).ListSnapshots(ctx, vercel.ListSnapshotsOptions{Name: st.VercelName, Limit: keep, SortOrder: "desc"})
	if err != nil {
		logf.FromContext(ctx).V(1).Info("Could not list the sandbox's snapshots for status.history", "vercelName", st.VercelName, "error", err.Error())
		return
	}
	st.History = historyOf(page.Snapshots, st.CurrentSnapshotID, keep)
}

// historyOf is the history of a sandbox whose listing (any order) is snaps
// and whose current snapshot is current: the newest keep snapshots, newest
// first, the current one marked and always shown (in place of the oldest when
// the listing did not hold it), deleted ones left out.
func historyOf(snaps []vercel.Snapshot, current string, keep int) []sandboxv1.SnapshotHistoryEntry {
	live := make([]vercel.Snapshot, 0, len(snaps))
	for _, s := range snaps {
		if s.Status != vercel.SnapshotDeleted {
			live = append(live, s)
		}
	}
	slices.SortStableFunc(live, func(a, b vercel.Snapshot) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	cur := sandboxv1.SnapshotHistoryEntry{ID: current, Current: true}
	out := make([]sandboxv1.SnapshotHistoryEntry, 0, min(len(live), keep))
	found := false
	for _, s := range live {
		e := sandboxv1.SnapshotHistoryEntry{ID: s.ID, CreatedAt: msTime(s.CreatedAt), SizeBytes: s.SizeBytes, ExpiresAt: msTime(s.ExpiresAt),
			ParentID: s.ParentID, Current: s.ID == current, Automatic: s.CreationMethod == "automatic"}
		if e.Current {
			cur = e
		}
		if len(out) < keep {
			found = found || e.Current
			out = append(out, e)
		}
	}
	if !found {
		// Beyond keep, or not listed (yet): shown in place of the oldest,
		// with what the listing or status knows of it.
		if len(out) == keep {
			out = out[:keep-1]
		}
		out = append(out, cur)
	}
	return out
}
