package controllers

import (
	"reflect"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func TestHistoryOf(t *testing.T) {
	snap := func(id string, created int64, status vercel.SnapshotStatus) vercel.Snapshot {
		return vercel.Snapshot{ID: id, CreatedAt: created * 1000, SizeBytes: created, Status: status, CreationMethod: "automatic"}
	}
	entry := func(id string, created int64, current bool) sandboxv1.SnapshotHistoryEntry {
		return sandboxv1.SnapshotHistoryEntry{ID: id, CreatedAt: msTime(created * 1000), SizeBytes: created, Current: current, Automatic: true}
	}
	listing := []vercel.Snapshot{snap("a", 1, vercel.SnapshotCreated), snap("c", 3, vercel.SnapshotCreated), snap("b", 2, vercel.SnapshotCreated)}
	for _, tc := range []struct {
		name    string
		snaps   []vercel.Snapshot
		current string
		keep    int
		want    []sandboxv1.SnapshotHistoryEntry
	}{
		{"newest first, the current one marked", listing, "c", 5,
			[]sandboxv1.SnapshotHistoryEntry{entry("c", 3, true), entry("b", 2, false), entry("a", 1, false)}},
		{"after a rewind the current one is an older one", listing, "a", 5,
			[]sandboxv1.SnapshotHistoryEntry{entry("c", 3, false), entry("b", 2, false), entry("a", 1, true)}},
		{"bounded by keep", listing, "c", 2,
			[]sandboxv1.SnapshotHistoryEntry{entry("c", 3, true), entry("b", 2, false)}},
		{"the current one beyond keep takes the oldest place", listing, "a", 2,
			[]sandboxv1.SnapshotHistoryEntry{entry("c", 3, false), entry("a", 1, true)}},
		{"a current one the listing does not hold is shown with what status knows", listing[:1], "z", 5,
			[]sandboxv1.SnapshotHistoryEntry{entry("a", 1, false), {ID: "z", Current: true}}},
		{"deleted snapshots are left out", append([]vercel.Snapshot{snap("d", 4, vercel.SnapshotDeleted)}, listing...), "c", 5,
			[]sandboxv1.SnapshotHistoryEntry{entry("c", 3, true), entry("b", 2, false), entry("a", 1, false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := historyOf(tc.snaps, tc.current, tc.keep); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("historyOf() =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}
