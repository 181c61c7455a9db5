package controllers

import (
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// usageT0 is the start of every session in these tables (ms since epoch).
const usageT0 = int64(1_800_000_000_000)

const usageMemory = 4096 // MB, a 2-vCPU session

func runningSession(id string, started int64) *vercel.Session {
	return &vercel.Session{ID: id, Status: vercel.SessionRunning, Memory: usageMemory, VCPUs: 2, StartedAt: started}
}

// stoppedSession is a session Vercel reports after a successful stop: with
// its duration, active CPU and network transfer.
func stoppedSession(id string, started, dur, cpu, egress, ingress int64) *vercel.Session {
	return &vercel.Session{ID: id, Status: vercel.SessionStopped, Memory: usageMemory, VCPUs: 2, StartedAt: started,
		StoppedAt: started + dur, Duration: dur, ActiveCPUDurationMs: cpu,
		NetworkTransfer: &vercel.NetworkTransfer{Egress: egress, Ingress: ingress}}
}

// named is the named sandbox with Vercel's cumulative totals over its
// finished sessions.
func named(name, current string, status vercel.SessionStatus, dur, cpu, egress, ingress int64) *vercel.Sandbox {
	return &vercel.Sandbox{Name: name, CurrentSessionID: current, Status: status, Memory: usageMemory, VCPUs: 2,
		TotalDurationMs: dur, TotalActiveCPUDurationMs: cpu, TotalEgressBytes: egress, TotalIngressBytes: ingress}
}

func msAt(ms int64) time.Time { return time.UnixMilli(ms) }

func amounts(cpu, dur, egress, ingress int64) *sandboxv1.UsageAmounts {
	return &sandboxv1.UsageAmounts{ActiveCPUMillis: cpu, SessionMillis: dur, MemoryMBMillis: dur * usageMemory, EgressBytes: egress, IngressBytes: ingress}
}

// TestFoldUsage plays sequences of Vercel answers through foldUsage, each
// starting from the usage the previous step recorded, as successive
// reconciles (and a restarted manager, which has only status) do.
func TestFoldUsage(t *testing.T) {
	const a, b = "sbx-a", "sbx-a-r1"
	cases := []struct {
		name    string
		answers []usageAnswer
		total   *sandboxv1.UsageAmounts
		current string // current.sessionID
		ended   bool   // current.endedAt set
		snap    int64
	}{{
		name:    "a running session is current with no figures yet: Vercel reports them when it stops",
		answers: []usageAnswer{{vercelName: a, sandbox: named(a, "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + 60_000)}},
		total:   nil, current: "s1",
	}, {
		name: "a session seen ended is counted once with Vercel's final figures",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + 60_000)},
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionStopped, 90_000, 7_000, 300, 4_000), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 95_000)},
		},
		total: amounts(7_000, 90_000, 300, 4_000), current: "s1", ended: true,
	}, {
		name: "the same answer read again (a restarted manager) changes nothing",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionStopped, 90_000, 7_000, 300, 4_000), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 95_000)},
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionStopped, 90_000, 7_000, 300, 4_000), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 500_000)},
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionStopped, 90_000, 7_000, 300, 4_000), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 900_000)},
		},
		total: amounts(7_000, 90_000, 300, 4_000), current: "s1", ended: true,
	}, {
		name: "a stop answer without the sandbox, then a resume whose totals include that session: counted once",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + 30_000)},
			{vercelName: a, session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 90_000)},
			{vercelName: a, sandbox: named(a, "s2", vercel.SessionRunning, 90_000, 7_000, 300, 4_000), session: runningSession("s2", usageT0+200_000), now: msAt(usageT0 + 210_000)},
		},
		total: amounts(7_000, 90_000, 300, 4_000), current: "s2",
	}, {
		name: "a session replaced without being seen ended: Vercel's totals give what it used after the last look",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + 30_000)},
			{vercelName: a, sandbox: named(a, "s2", vercel.SessionRunning, 90_000, 7_000, 300, 4_000), session: runningSession("s2", usageT0+200_000), now: msAt(usageT0 + 200_000)},
		},
		total: amounts(7_000, 90_000, 300, 4_000), current: "s2",
	}, {
		name: "Vercel sends no totals: a replaced session counts at its last known figures",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionRunning, 0, 0, 0, 0), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 95_000)},
			{vercelName: a, sandbox: named(a, "s2", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s2", usageT0+100_000), now: msAt(usageT0 + 100_000)},
			{vercelName: a, sandbox: named(a, "s3", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s3", usageT0+200_000), now: msAt(usageT0 + 210_000)},
		},
		// s1 final 90 s; s2 and s3 never seen ended.
		total: amounts(7_000, 90_000, 300, 4_000), current: "s3",
	}, {
		name: "sessions that began and ended while the manager was down come from Vercel's totals",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionStopped, 90_000, 7_000, 300, 4_000), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 95_000)},
			{vercelName: a, sandbox: named(a, "s4", vercel.SessionStopped, 300_000, 20_000, 1_000, 9_000), session: stoppedSession("s4", usageT0+500_000, 60_000, 5_000, 100, 1_000), now: msAt(usageT0 + 600_000)},
		},
		total: amounts(20_000, 300_000, 1_000, 9_000), current: "s4", ended: true,
	}, {
		name: "a recreation keeps the old sandbox's usage and counts the new one's from zero",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionStopped, 90_000, 7_000, 300, 4_000), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), now: msAt(usageT0 + 95_000)},
			{vercelName: b, sandbox: named(b, "t1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("t1", usageT0+100_000), now: msAt(usageT0 + 120_000)},
			{vercelName: b, sandbox: named(b, "t1", vercel.SessionStopped, 40_000, 1_000, 10, 20), session: stoppedSession("t1", usageT0+100_000, 40_000, 1_000, 10, 20), now: msAt(usageT0 + 150_000)},
		},
		total: amounts(8_000, 130_000, 310, 4_020), current: "t1", ended: true,
	}, {
		name: "a recreation while the old session was last seen running: what the gone sandbox used after the last answer is unknown",
		answers: []usageAnswer{
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + 50_000)},
			{vercelName: b, sandbox: named(b, "t1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("t1", usageT0+100_000), now: msAt(usageT0 + 120_000)},
			{vercelName: b, sandbox: named(b, "t1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("t1", usageT0+100_000), now: msAt(usageT0 + 130_000)},
		},
		total: nil, current: "t1",
	}, {
		name: "a stop's snapshot gives snapshotBytes while it is the one the next session resumes from",
		answers: []usageAnswer{
			{vercelName: a, session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), snapshot: &vercel.Snapshot{ID: "snap1", SizeBytes: 5 << 20}, currentSnapshotID: "snap1", now: msAt(usageT0 + 95_000)},
			{vercelName: a, sandbox: named(a, "s1", vercel.SessionStopped, 90_000, 7_000, 300, 4_000), session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), currentSnapshotID: "snap1", now: msAt(usageT0 + 100_000)},
		},
		total: amounts(7_000, 90_000, 300, 4_000), current: "s1", ended: true, snap: 5 << 20,
	}, {
		name: "snapshotBytes is forgotten once another snapshot, of unknown size, takes its place",
		answers: []usageAnswer{
			{vercelName: a, session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), snapshot: &vercel.Snapshot{ID: "snap1", SizeBytes: 5 << 20}, currentSnapshotID: "snap1", now: msAt(usageT0 + 95_000)},
			{vercelName: a, sandbox: named(a, "s2", vercel.SessionStopped, 180_000, 14_000, 600, 8_000), session: stoppedSession("s2", usageT0+100_000, 90_000, 7_000, 300, 4_000), currentSnapshotID: "snap2", now: msAt(usageT0 + 200_000)},
		},
		total: amounts(14_000, 180_000, 600, 8_000), current: "s2", ended: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var u *sandboxv1.SandboxUsage
			for _, a := range tc.answers {
				u = foldUsage(u, a)
			}
			if !apiequality.Semantic.DeepEqual(u.Total, tc.total) {
				t.Errorf("total = %+v, want %+v", u.Total, tc.total)
			}
			if u.Current == nil || u.Current.SessionID != tc.current {
				t.Fatalf("current = %+v, want session %s", u.Current, tc.current)
			}
			if (u.Current.EndedAt != nil) != tc.ended {
				t.Errorf("current.endedAt = %v, want set: %v", u.Current.EndedAt, tc.ended)
			}
			if u.SnapshotBytes != tc.snap {
				t.Errorf("snapshotBytes = %d, want %d", u.SnapshotBytes, tc.snap)
			}
			if u.ObservedAt == nil {
				t.Error("observedAt unset")
			}
		})
	}
}

// TestFoldUsageIdempotent: any answer folded twice in a row gives the same
// usage as folded once (besides observedAt), so a reconcile that reads
// Vercel again after a crash before its status write, or a restarted
// manager, never counts twice.
func TestFoldUsageIdempotent(t *testing.T) {
	answers := []usageAnswer{
		{vercelName: "x", sandbox: named("x", "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + 10_000)},
		{vercelName: "x", session: stoppedSession("s1", usageT0, 90_000, 7_000, 300, 4_000), snapshot: &vercel.Snapshot{ID: "p", SizeBytes: 9}, currentSnapshotID: "p", now: msAt(usageT0 + 95_000)},
		{vercelName: "x", sandbox: named("x", "s2", vercel.SessionRunning, 90_000, 7_000, 300, 4_000), session: runningSession("s2", usageT0+100_000), currentSnapshotID: "p", now: msAt(usageT0 + 110_000)},
		{vercelName: "x", sandbox: named("x", "s2", vercel.SessionStopped, 150_000, 9_000, 400, 5_000), session: stoppedSession("s2", usageT0+100_000, 60_000, 2_000, 100, 1_000), currentSnapshotID: "p", now: msAt(usageT0 + 170_000)},
		{vercelName: "x-r1", sandbox: named("x-r1", "t1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("t1", usageT0+200_000), now: msAt(usageT0 + 210_000)},
	}
	var u *sandboxv1.SandboxUsage
	for i, a := range answers {
		once := foldUsage(u, a)
		twice := foldUsage(once, a)
		if !apiequality.Semantic.DeepEqual(once, twice) {
			t.Errorf("answer %d folded twice: %+v, once: %+v", i, twice, once)
		}
		u = once
	}
	want := amounts(9_000, 150_000, 400, 5_000)
	if !apiequality.Semantic.DeepEqual(u.Total, want) {
		t.Errorf("total = %+v, want %+v", u.Total, want)
	}
}

// TestFoldUsageRunningPollChangesNothing: polls of a running session return
// the recorded usage itself, observedAt included, so the reconcile that
// finds nothing else to do writes no status; the stop changes it.
func TestFoldUsageRunningPollChangesNothing(t *testing.T) {
	first := foldUsage(nil, usageAnswer{vercelName: "x", sandbox: named("x", "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + 5_000)})
	for _, later := range []int64{60_000, 120_000} {
		got := foldUsage(first, usageAnswer{vercelName: "x", sandbox: named("x", "s1", vercel.SessionRunning, 0, 0, 0, 0), session: runningSession("s1", usageT0), now: msAt(usageT0 + later)})
		if !apiequality.Semantic.DeepEqual(got, first) {
			t.Errorf("poll at +%d ms changed usage: %+v, was %+v", later, got, first)
		}
	}
	stopped := foldUsage(first, usageAnswer{vercelName: "x", sandbox: named("x", "s1", vercel.SessionStopped, 90_000, 7_000, 0, 0), session: stoppedSession("s1", usageT0, 90_000, 7_000, 0, 0), now: msAt(usageT0 + 95_000)})
	if stopped.ObservedAt.Equal(first.ObservedAt) || stopped.Total == nil || stopped.Total.SessionMillis != 90_000 {
		t.Errorf("the stop = %+v, want new figures observed at the stop", stopped)
	}
}

// TestForkUsage: a fork's usage is its children's totals and snapshot bytes
// summed, observed when the latest of them was; nil while none used anything.
func TestForkUsage(t *testing.T) {
	child := func(u *sandboxv1.SandboxUsage) *sandboxv1.Sandbox {
		return &sandboxv1.Sandbox{Status: sandboxv1.SandboxStatus{Usage: u}}
	}
	early, late := metav1.NewTime(msAt(usageT0)), metav1.NewTime(msAt(usageT0+60_000))
	if got := forkUsage([]*sandboxv1.Sandbox{child(nil), child(&sandboxv1.SandboxUsage{Current: &sandboxv1.SessionUsage{SessionID: "s"}})}); got != nil {
		t.Errorf("children without figures: %+v, want nil", got)
	}
	got := forkUsage([]*sandboxv1.Sandbox{
		child(&sandboxv1.SandboxUsage{Total: amounts(1, 10, 2, 3), SnapshotBytes: 100, ObservedAt: &late}),
		child(nil),
		child(&sandboxv1.SandboxUsage{Total: amounts(4, 20, 5, 6), SnapshotBytes: 1, ObservedAt: &early}),
	})
	want := &sandboxv1.SandboxUsage{Total: amounts(5, 30, 7, 9), SnapshotBytes: 101, ObservedAt: &late}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("forkUsage = %+v, want %+v", got, want)
	}
}

// TestSnapshotStorage: a SandboxSnapshot's storage follows its snapshot; an
// unchanged size returns the recorded usage itself (no status write).
func TestSnapshotStorage(t *testing.T) {
	u := snapshotStorage(nil, "snap1", 4096, msAt(usageT0))
	if u.SnapshotBytes != 4096 || u.Accounting.SnapshotID != "snap1" || u.ObservedAt == nil {
		t.Fatalf("first = %+v", u)
	}
	if again := snapshotStorage(u, "snap1", 4096, msAt(usageT0+60_000)); again != u {
		t.Errorf("unchanged storage returned a new usage: %+v", again)
	}
	if gone := snapshotStorage(u, "", 0, msAt(usageT0+60_000)); gone.SnapshotBytes != 0 || gone.Accounting.SnapshotID != "" {
		t.Errorf("after the snapshot was retired = %+v, want 0 bytes", gone)
	}
}
