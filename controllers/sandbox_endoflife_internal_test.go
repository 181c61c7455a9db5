package controllers

import (
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func TestRestSchedule(t *testing.T) {
	const after = 600 * time.Second // warned 60 s before
	for _, tc := range []struct {
		name      string
		now       int
		stoppedAt time.Time
		after     time.Duration
		want      restDeletion
	}{
		{"never without deleteObjectAfterSeconds", 10_000, at(0), 0, restDeletion{}},
		{"never without a stop time", 10_000, time.Time{}, after, restDeletion{}},
		{"resting: look again at the warning", 100, at(0), after, restDeletion{at: at(600), next: at(540)}},
		{"within the warning lead", 540, at(0), after, restDeletion{warn: true, at: at(600), next: at(600)}},
		{"due", 600, at(0), after, restDeletion{due: true, at: at(600)}},
		{"the lead is at most 5 minutes", 0, at(0), 24 * time.Hour, restDeletion{at: at(86400), next: at(86400 - 300)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := restSchedule(at(tc.now), tc.stoppedAt, tc.after); got != tc.want {
				t.Errorf("restSchedule = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The end-of-life branches of decide: what a stopped session leads to under
// spec.idle and spec.recreatePolicy.
func TestDecideEndOfLife(t *testing.T) {
	const id = "sbx_sess1"
	ms := func(s int) int64 { return at(s).UnixMilli() }
	// A persistent Sandbox whose session stopped at its 300 s deadline,
	// looked at from status at 400 s.
	base := func() lifecycle {
		return lifecycle{
			now: at(400), idle: 300 * time.Second, maxSession: 24 * time.Hour,
			name: "ns-box-1234", phase: sandboxv1.SandboxIdle, hadSession: true, ready: sandboxv1.ReasonIdleTimeout,
			stoppedAt: at(300), persistent: true,
			obs: observation{state: sessionStopped, sessionID: id, sameSession: true},
		}
	}
	idleStop := observation{state: sessionStopped, fromVercel: true, sessionID: id, sameSession: true,
		session: &vercel.Session{ID: id, Status: vercel.SessionStopped, StartedAt: ms(0), Timeout: 300_000, StoppedAt: ms(300)}}
	for _, tc := range []struct {
		name        string
		edit        func(*lifecycle)
		wantAction  action
		wantWhy     string
		wantRequeue time.Duration
		wantWarn    bool
	}{
		{"idle under Stop: rests, no timer", nil, actNone, "", 0, false},
		{"idle stop seen under action Delete: delete",
			func(l *lifecycle) {
				l.deleteAtIdle, l.obs, l.ready, l.phase = true, idleStop, sandboxv1.ReasonRunning, sandboxv1.SandboxRunning
			},
			actIdleDelete, "", 0, false},
		{"idle under action Delete, a newer heartbeat: resume instead",
			func(l *lifecycle) { l.deleteAtIdle, l.activity = true, at(350) }, actResume, "", 0, false},
		{"paused under action Delete: not an idle stop, kept",
			func(l *lifecycle) {
				l.deleteAtIdle, l.stopped, l.ready, l.phase = true, true, sandboxv1.ReasonStopped, sandboxv1.SandboxStopped
			}, actNone, "", 0, false},
		{"resting with deleteObjectAfterSeconds: timer to the warning",
			func(l *lifecycle) { l.deleteAfter = 600 * time.Second }, actNone, "", 440 * time.Second, false},
		{"resting within the warning lead: warned, timer to the deletion",
			func(l *lifecycle) { l.deleteAfter, l.now = 600*time.Second, at(850) }, actNone, "", 50 * time.Second, true},
		{"rested long enough: delete",
			func(l *lifecycle) { l.deleteAfter, l.now = 600*time.Second, at(900) }, actIdleDelete, "", 0, false},
		{"a Failed sandbox is not counted",
			func(l *lifecycle) {
				l.deleteAfter, l.now, l.ready, l.phase = 600*time.Second, at(900), sandboxv1.ReasonSnapshotMissing, sandboxv1.SandboxFailed
			}, actNone, "", 0, false},
		{"non-persistent, a newer heartbeat, Never: stays ended",
			func(l *lifecycle) { l.persistent, l.activity = false, at(350) }, actNone, "", 0, false},
		{"non-persistent, a newer heartbeat, OnGone: recreate",
			func(l *lifecycle) { l.persistent, l.activity, l.recreate = false, at(350), sandboxv1.RecreateOnGone },
			actRecreate, sandboxv1.ReasonNotPersistent, 0, false},
		{"non-persistent, no heartbeat, OnGone: stays ended until one",
			func(l *lifecycle) { l.persistent, l.recreate = false, sandboxv1.RecreateOnGone }, actNone, "", 0, false},
		{"outdated snapshot, a newer heartbeat, OnGone: resume",
			func(l *lifecycle) {
				l.snapshotOutdated, l.activity, l.recreate = true, at(350), sandboxv1.RecreateOnGone
			},
			actResume, "", 0, false},
		{"outdated snapshot, a newer heartbeat, OnNewerSnapshot: recreate",
			func(l *lifecycle) {
				l.snapshotOutdated, l.activity, l.recreate = true, at(350), sandboxv1.RecreateOnNewerSnapshot
			}, actRecreate, sandboxv1.ReasonSnapshotOutdated, 0, false},
		{"deleted outside the operator, Never: reported",
			func(l *lifecycle) { l.obs = observation{state: remoteMissing, fromVercel: true} }, actNone, "", 0, false},
		{"deleted outside the operator, OnGone: recreate",
			func(l *lifecycle) {
				l.obs, l.recreate = observation{state: remoteMissing, fromVercel: true}, sandboxv1.RecreateOnGone
			}, actRecreate, sandboxv1.ReasonNotFound, 0, false},
		{"deleted outside the operator, OnGone, but spec.state Stopped: reported until it should run",
			func(l *lifecycle) {
				l.obs, l.recreate, l.stopped = observation{state: remoteMissing, fromVercel: true}, sandboxv1.RecreateOnGone, true
			}, actNone, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := base()
			if tc.edit != nil {
				tc.edit(&l)
			}
			d := decide(l)
			if d.action != tc.wantAction || d.recreateWhy != tc.wantWhy || d.requeue != tc.wantRequeue || !d.idleWarnAt.IsZero() != tc.wantWarn {
				t.Errorf("decide = action %v, recreateWhy %q, requeue %v, idleWarnAt %v; want %v, %q, %v, warn %v",
					d.action, d.recreateWhy, d.requeue, d.idleWarnAt, tc.wantAction, tc.wantWhy, tc.wantRequeue, tc.wantWarn)
			}
			if d.action == actIdleDelete && d.deleteWhy == "" {
				t.Error("an idle deletion says why")
			}
		})
	}
}

func TestRecreatedName(t *testing.T) {
	if got := recreatedName("ns-box-1234abcd", 0); got != "ns-box-1234abcd" {
		t.Errorf("recreation 0 = %q, want the first name", got)
	}
	if got := recreatedName("ns-box-1234abcd", 3); got != "ns-box-1234abcd-r3" {
		t.Errorf("recreation 3 = %q", got)
	}
	long := vercelName(strings.Repeat("n", 63), strings.Repeat("b", 253), "0123456789abcdef")
	got := recreatedName(long, 12)
	if len(got) != maxVercelNameLength || !strings.HasSuffix(got, "-r12") {
		t.Errorf("a long name's recreation = %q (%d characters), want %d ending in -r12", got, len(got), maxVercelNameLength)
	}
	if recreatedName(long, 12) == recreatedName(long, 1) {
		t.Error("recreations share a name")
	}
}

func TestSnapshotChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		booted sandboxv1.BootedFrom
		snap   sandboxv1.SandboxSnapshotStatus
		want   bool
	}{
		{"same hash, rebuilt (maxAgeSeconds): same content", sandboxv1.BootedFrom{SnapshotID: "snap_a", ContentHash: "h1"},
			sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap_b", ContentHash: "h1"}, false},
		{"another hash", sandboxv1.BootedFrom{SnapshotID: "snap_a", ContentHash: "h1"},
			sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap_b", ContentHash: "h2"}, true},
		{"a capture: same id", sandboxv1.BootedFrom{SnapshotID: "snap_a"}, sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap_a"}, false},
		{"a capture: another id", sandboxv1.BootedFrom{SnapshotID: "snap_a"}, sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap_b"}, true},
		{"adopted without a hash, same snapshot", sandboxv1.BootedFrom{SnapshotID: "snap_a"},
			sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap_a", ContentHash: "h1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := snapshotChanged(&tc.booted, &tc.snap); got != tc.want {
				t.Errorf("snapshotChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
