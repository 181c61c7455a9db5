package controllers

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// setSnapshotReady writes phase, readyToUse and Ready together: readyToUse
// follows the phase, and "" leaves phase or condition as they were.
func TestSetSnapshotReady(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rd         snapReadiness
		wasReady   bool
		wantPhase  sandboxv1.SandboxSnapshotPhase
		wantReady  bool
		wantReason string
	}{
		{"ready", snapReadiness{sandboxv1.SnapshotReady, metav1.ConditionTrue, sandboxv1.ReasonSnapshotReady, "m"}, false, sandboxv1.SnapshotReady, true, sandboxv1.ReasonSnapshotReady},
		{"failed", snapFailed(sandboxv1.ReasonBuildFailed, "m"), true, sandboxv1.SnapshotFailed, false, sandboxv1.ReasonBuildFailed},
		{"expired", snapReadiness{sandboxv1.SnapshotExpired, metav1.ConditionFalse, sandboxv1.ReasonExpired, "m"}, true, sandboxv1.SnapshotExpired, false, sandboxv1.ReasonExpired},
		{"deleting, condition left", snapReadiness{phase: sandboxv1.SnapshotDeleting}, true, sandboxv1.SnapshotDeleting, false, "Old"},
		{"pending leaves readyToUse", snapPending(sandboxv1.ReasonSourceNotFound, "m"), true, sandboxv1.SnapshotPending, true, sandboxv1.ReasonSourceNotFound},
		{"building leaves readyToUse", snapReadiness{phase: sandboxv1.SnapshotBuilding}, false, sandboxv1.SnapshotBuilding, false, "Old"},
		{"condition only leaves the phase", snapReadiness{ready: metav1.ConditionTrue, reason: sandboxv1.ReasonRebuilding, message: "m"}, true, sandboxv1.SnapshotReady, true, sandboxv1.ReasonRebuilding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &sandboxv1.SandboxSnapshot{}
			snap.Status.Phase, snap.Status.ReadyToUse = sandboxv1.SnapshotReady, tc.wasReady
			setCondition(&snap.Status.Conditions, 0, sandboxv1.ConditionReady, metav1.ConditionTrue, "Old", "old")
			setSnapshotReady(snap, tc.rd)
			if snap.Status.Phase != tc.wantPhase || snap.Status.ReadyToUse != tc.wantReady {
				t.Fatalf("phase %s readyToUse %v, want %s %v", snap.Status.Phase, snap.Status.ReadyToUse, tc.wantPhase, tc.wantReady)
			}
			if c := readyCondition(snap); c.Reason != tc.wantReason {
				t.Fatalf("Ready reason %s, want %s", c.Reason, tc.wantReason)
			}
		})
	}
}

func readyCondition(snap *sandboxv1.SandboxSnapshot) metav1.Condition {
	for _, c := range snap.Status.Conditions {
		if c.Type == sandboxv1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

// A build's state shows on the phase, or on Ready alone while an older
// snapshot is served.
func TestBuildReadiness(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  snapReadiness
		want snapReadiness
	}{
		{"building", buildingReadiness(false, "", "booting"), snapReadiness{sandboxv1.SnapshotBuilding, metav1.ConditionFalse, sandboxv1.ReasonBuilding, "booting"}},
		{"rebuilding while serving", buildingReadiness(true, "snap_1", "booting"), snapReadiness{"", metav1.ConditionTrue, sandboxv1.ReasonRebuilding, "Serving snap_1 while it is rebuilt: booting"}},
		{"failed", buildReadiness(false, "", sandboxv1.SnapshotFailed, sandboxv1.ReasonBuildFailed, "exit 3", "; its rebuild failed"), snapFailed(sandboxv1.ReasonBuildFailed, "exit 3")},
		{"rebuild failed while serving", buildReadiness(true, "snap_1", sandboxv1.SnapshotFailed, sandboxv1.ReasonBuildFailed, "exit 3", "; its rebuild failed"),
			snapReadiness{"", metav1.ConditionTrue, sandboxv1.ReasonBuildFailed, "Serving snap_1; its rebuild failed: exit 3"}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

// Every answer to a read of a snapshot, one row each.
func TestClassifyServed(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		s       *vercel.Snapshot
		err     error
		want    servedState
		wantErr bool
	}{
		{"404", nil, &vercel.APIError{Status: 404}, servedGone, false},
		{"410", nil, &vercel.APIError{Status: 410}, servedGone, false},
		{"other error", nil, boom, 0, true},
		{"deleted", &vercel.Snapshot{Status: vercel.SnapshotDeleted}, nil, servedExpired, false},
		{"past its expiry", &vercel.Snapshot{Status: vercel.SnapshotCreated, ExpiresAt: now.UnixMilli()}, nil, servedExpired, false},
		{"failed", &vercel.Snapshot{Status: vercel.SnapshotFailed}, nil, servedFailed, false},
		{"created", &vercel.Snapshot{Status: vercel.SnapshotCreated, ExpiresAt: now.UnixMilli() + 1}, nil, servedCreated, false},
		{"being created", &vercel.Snapshot{Status: "creating"}, nil, servedOther, false},
	} {
		got, err := classifyServed(tc.s, tc.err, now)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

// Every branch of decideCapture, one row each.
func TestDecideCapture(t *testing.T) {
	running := &sandboxv1.Sandbox{Status: sandboxv1.SandboxStatus{Phase: sandboxv1.SandboxRunning, SessionID: "s1", VercelName: "ns-box-1"}}
	pending := &sandboxv1.Sandbox{Status: sandboxv1.SandboxStatus{Phase: sandboxv1.SandboxPending}}
	live := &vercel.SandboxResponse{Session: &vercel.Session{ID: "s1", Status: vercel.SessionRunning}}
	stopping := &vercel.SandboxResponse{Session: &vercel.Session{ID: "s1", Status: vercel.SessionStopping}}
	read := func(resp *vercel.SandboxResponse, o ownership) captureObservation {
		return captureObservation{sbx: running, sourceRead: true, source: resp, owner: o}
	}
	for _, tc := range []struct {
		name       string
		o          captureObservation
		want       captureAction
		wantForget bool
	}{
		{"a snapshot is recorded", captureObservation{recorded: true}, captureObserve, false},
		{"the Sandbox is of another class", captureObservation{sbx: running, mismatch: "class"}, captureClassMismatch, false},
		{"the intent's snapshot was taken", captureObservation{sbx: running, intent: true, found: &vercel.Snapshot{ID: "snap"}}, captureRecord, false},
		{"the intent's session still runs", captureObservation{intent: true, intentRunning: true}, captureRetry, false},
		{"no Sandbox", captureObservation{}, captureSourceMissing, false},
		{"no Sandbox, a stale intent", captureObservation{intent: true}, captureSourceMissing, true},
		{"the Sandbox does not run", captureObservation{sbx: pending}, captureWaitSource, false},
		{"running, not read yet", captureObservation{sbx: running}, captureReadSource, false},
		{"running, a stale intent", captureObservation{sbx: running, intent: true}, captureReadSource, true},
		{"its Vercel sandbox is gone", read(nil, unowned), captureWaitSource, false},
		{"its Vercel sandbox is another's", read(live, ownedElsewhere), captureForeign, false},
		{"its session does not run", read(stopping, ownedBySelf), captureWaitSource, false},
		{"no session", read(&vercel.SandboxResponse{}, ownedBySelf), captureWaitSource, false},
		{"capture", read(live, ownedBySelf), captureTake, false},
	} {
		got, forget := decideCapture(tc.o)
		if got != tc.want || forget != tc.wantForget {
			t.Errorf("%s: got %v (forget %v), want %v (forget %v)", tc.name, got, forget, tc.want, tc.wantForget)
		}
	}
}

// A capture never waits silently: every state of its source, one row each.
func TestSourceWait(t *testing.T) {
	no := false
	sbx := func(phase sandboxv1.SandboxPhase, edit func(*sandboxv1.Sandbox)) *sandboxv1.Sandbox {
		s := &sandboxv1.Sandbox{}
		s.Name, s.Status.Phase = "box", phase
		if edit != nil {
			edit(s)
		}
		return s
	}
	for _, tc := range []struct {
		name       string
		sbx        *sandboxv1.Sandbox
		wantPhase  sandboxv1.SandboxSnapshotPhase
		wantReason string
		wantIn     string
	}{
		{"failed", sbx(sandboxv1.SandboxFailed, nil), sandboxv1.SnapshotFailed, sandboxv1.ReasonSourceFailed, "it cannot be captured unless it runs again"},
		{"stopped, not persistent", sbx(sandboxv1.SandboxStopped, func(s *sandboxv1.Sandbox) { s.Spec.Persistent, s.Status.SessionID = &no, "s1" }),
			sandboxv1.SnapshotFailed, sandboxv1.ReasonSourceFailed, "is not persistent"},
		{"stopped, not persistent, never ran", sbx(sandboxv1.SandboxStopped, func(s *sandboxv1.Sandbox) { s.Spec.Persistent = &no }),
			sandboxv1.SnapshotPending, sandboxv1.ReasonSourceNotRunning, "it is stopped"},
		{"paused", sbx(sandboxv1.SandboxStopped, func(s *sandboxv1.Sandbox) { s.Spec.State = sandboxv1.SandboxStateStopped }),
			sandboxv1.SnapshotPending, sandboxv1.ReasonSourceNotRunning, "it is paused"},
		{"stopped", sbx(sandboxv1.SandboxStopped, nil), sandboxv1.SnapshotPending, sandboxv1.ReasonSourceNotRunning, "it is stopped"},
		{"pending", sbx(sandboxv1.SandboxPending, nil), sandboxv1.SnapshotPending, sandboxv1.ReasonSourceNotRunning, "(phase Pending)"},
		{"not started", sbx("", nil), sandboxv1.SnapshotPending, sandboxv1.ReasonSourceNotRunning, "(phase not started)"},
	} {
		rd := sourceWait(tc.sbx)
		if rd.phase != tc.wantPhase || rd.reason != tc.wantReason || rd.ready != metav1.ConditionFalse || !strings.Contains(rd.message, tc.wantIn) {
			t.Errorf("%s: got %+v", tc.name, rd)
		}
	}
}

func readyPeer(name, id string, created int64) *sandboxv1.SandboxSnapshot {
	p := &sandboxv1.SandboxSnapshot{}
	p.Name, p.UID = name, types.UID(name)
	p.Status.ReadyToUse, p.Status.SnapshotID = true, id
	p.Status.CreatedAt = &metav1.Time{Time: time.Unix(created, 0)}
	return p
}

// Which peer's snapshot of the same hash a recipe serves instead of its own.
func TestPeerToAdopt(t *testing.T) {
	self := &sandboxv1.SandboxSnapshotStatus{SnapshotID: "old", CreatedAt: &metav1.Time{Time: time.Unix(100, 0)}}
	newer, older, same := readyPeer("newer", "new", 200), readyPeer("older", "older", 50), readyPeer("same", "old", 300)
	notReady := readyPeer("building", "", 0)
	notReady.Status.ReadyToUse = false
	for _, tc := range []struct {
		name    string
		st      *sandboxv1.SandboxSnapshotStatus
		peers   []*sandboxv1.SandboxSnapshot
		serving bool
		want    *sandboxv1.SandboxSnapshot
	}{
		{"no ready peer", self, []*sandboxv1.SandboxSnapshot{notReady}, true, nil},
		{"the peer serves the same id", self, []*sandboxv1.SandboxSnapshot{same}, true, nil},
		{"nothing served: any ready peer", &sandboxv1.SandboxSnapshotStatus{}, []*sandboxv1.SandboxSnapshot{older}, false, older},
		{"serving: a newer peer", self, []*sandboxv1.SandboxSnapshot{older, newer}, true, newer},
		{"serving: an older peer is not adopted", self, []*sandboxv1.SandboxSnapshot{older}, true, nil},
	} {
		if got := peerToAdopt(tc.st, tc.peers, tc.serving); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every branch of decideRecipe, one row each.
func TestDecideRecipe(t *testing.T) {
	maxAge := func(s int64) *sandboxv1.SandboxSnapshot {
		o := &sandboxv1.SandboxSnapshot{}
		o.Name, o.UID, o.CreationTimestamp = "self", "self", metav1.Unix(100, 0)
		if s > 0 {
			o.Spec.MaxAgeSeconds = &s
		}
		return o
	}
	older := &sandboxv1.SandboxSnapshot{}
	older.Name, older.UID, older.CreationTimestamp = "older", "older", metav1.Unix(50, 0)
	deleting := older.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(60, 0)}
	for _, tc := range []struct {
		name     string
		snap     *sandboxv1.SandboxSnapshot
		peers    []*sandboxv1.SandboxSnapshot
		served   bool
		age      time.Duration
		want     recipeDecision
		wantNext time.Duration
	}{
		{"served, no maxAge", maxAge(0), nil, true, time.Hour, recipeDecision{action: recipeServe, requeue: time.Minute}, 0},
		{"served, fresh: looked at when it ages out", maxAge(100), nil, true, 90 * time.Second, recipeDecision{action: recipeServe, requeue: 10 * time.Second}, 0},
		{"served, fresh: the poll comes first", maxAge(3600), nil, true, time.Second, recipeDecision{action: recipeServe, requeue: time.Minute}, 0},
		{"served, too old, drives the rebuild", maxAge(100), nil, true, 100 * time.Second, recipeDecision{action: recipeDrive}, 0},
		{"served, too old, an older user drives", maxAge(100), []*sandboxv1.SandboxSnapshot{older}, true, 200 * time.Second, recipeDecision{action: recipeFollow, driver: older}, 0},
		{"nothing served, an older user drives", maxAge(0), []*sandboxv1.SandboxSnapshot{older}, false, 0, recipeDecision{action: recipeFollow, driver: older}, 0},
		{"nothing served, the older user is being deleted", maxAge(0), []*sandboxv1.SandboxSnapshot{deleting}, false, 0, recipeDecision{action: recipeDrive}, 0},
		{"nothing served, drives", maxAge(0), nil, false, 0, recipeDecision{action: recipeDrive}, 0},
	} {
		if got := decideRecipe(tc.snap, tc.peers, tc.served, tc.age, time.Minute); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A follower reports the shared build; a failed one only when it serves nothing.
func TestFollowReadiness(t *testing.T) {
	driver := &sandboxv1.SandboxSnapshot{}
	driver.Name = "driver"
	failed := driver.DeepCopy()
	failed.Status.Build = &sandboxv1.SnapshotBuildStatus{Failed: true}
	setCondition(&failed.Status.Conditions, 0, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonBuildFailed, "exit 3")
	for _, tc := range []struct {
		name    string
		driver  *sandboxv1.SandboxSnapshot
		serving bool
		want    snapReadiness
	}{
		{"building", driver, false, snapReadiness{sandboxv1.SnapshotBuilding, metav1.ConditionFalse, sandboxv1.ReasonBuilding, "Waiting for the build run by SandboxSnapshot driver (same content hash)"}},
		{"rebuilding", driver, true, snapReadiness{"", metav1.ConditionTrue, sandboxv1.ReasonRebuilding, "Serving snap_1 while it is rebuilt: Waiting for the build run by SandboxSnapshot driver (same content hash)"}},
		{"failed", failed, false, snapFailed(sandboxv1.ReasonBuildFailed, "The build shared with SandboxSnapshot driver failed: exit 3")},
		{"failed while serving", failed, true, snapReadiness{"", metav1.ConditionTrue, sandboxv1.ReasonRebuilding, "Serving snap_1 while it is rebuilt: Waiting for the build run by SandboxSnapshot driver (same content hash)"}},
	} {
		if got := followReadiness(tc.driver, tc.serving, "snap_1"); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Every branch of decideClaim, one row each.
func TestDecideClaim(t *testing.T) {
	peer := &sandboxv1.SandboxSnapshot{}
	for _, tc := range []struct {
		name string
		o    builderObservation
		want builderClaim
	}{
		{"its build failed", builderObservation{failedBefore: true}, claimFailed},
		{"no builder yet", builderObservation{}, claimOwn},
		{"a foreign sandbox holds the name", builderObservation{found: true, owner: unowned, hashMatches: true}, claimNameTaken},
		{"another cluster's", builderObservation{found: true, owner: ownedElsewhere, hashMatches: true}, claimNameTaken},
		{"ours, another hash", builderObservation{found: true, owner: ownedBySelf}, claimNameTaken},
		{"ours", builderObservation{found: true, owner: ownedBySelf, hashMatches: true}, claimOwn},
		{"a live peer's", builderObservation{found: true, owner: ownedByPeer, hashMatches: true, liveOwner: peer}, claimFollow},
		{"a gone peer's", builderObservation{found: true, owner: ownedByPeer, hashMatches: true}, claimTakeOver},
	} {
		if got := decideClaim(tc.o); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every branch of decideBuild, one row each.
func TestDecideBuild(t *testing.T) {
	session := func(s vercel.SessionStatus) *vercel.Session { return &vercel.Session{ID: "s1", Status: s} }
	for _, tc := range []struct {
		name string
		p    buildProgress
		want buildAction
	}{
		{"over budget", buildProgress{overBudget: true, found: true, session: session(vercel.SessionRunning)}, buildTimedOut},
		{"gone after its session was recorded", buildProgress{sessionRecorded: true}, buildRecover},
		{"not created yet", buildProgress{}, buildCreate},
		{"captured", buildProgress{found: true, currentSnapshot: "snap_1", session: session(vercel.SessionStopped)}, buildCaptured},
		{"no session yet", buildProgress{found: true}, buildBooting},
		{"session pending", buildProgress{found: true, session: session(vercel.SessionPending)}, buildBooting},
		{"session stopped", buildProgress{found: true, session: session(vercel.SessionStopped)}, buildSessionEnded},
		{"session failed", buildProgress{found: true, session: session(vercel.SessionFailed)}, buildSessionEnded},
		{"running", buildProgress{found: true, sessionRecorded: true, session: session(vercel.SessionRunning)}, buildAdvance},
	} {
		if got := decideBuild(tc.p); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every branch of decideDelete, one row each.
func TestDecideDelete(t *testing.T) {
	obj := func(name string, edit func(*sandboxv1.SandboxSnapshot)) *sandboxv1.SandboxSnapshot {
		o := &sandboxv1.SandboxSnapshot{}
		o.Name, o.UID = name, types.UID(name)
		o.Status.ContentHash = "h"
		if edit != nil {
			edit(o)
		}
		return o
	}
	imported := obj("self", func(o *sandboxv1.SandboxSnapshot) { id := "snap_1"; o.Spec.Source.SnapshotID = &id })
	retain := obj("self", func(o *sandboxv1.SandboxSnapshot) { o.Spec.DeletionPolicy = sandboxv1.DeletionPolicyRetain })
	self := obj("self", nil)
	holder := *obj("holder", func(o *sandboxv1.SandboxSnapshot) { o.Status.SnapshotID = "snap_1" })
	deleting := func(o sandboxv1.SandboxSnapshot, name string) sandboxv1.SandboxSnapshot {
		now := metav1.Now()
		o.Name, o.UID, o.DeletionTimestamp = name, types.UID(name), &now
		return o
	}
	waiter := *obj("waiter", nil)
	for _, tc := range []struct {
		name  string
		snap  *sandboxv1.SandboxSnapshot
		peers []sandboxv1.SandboxSnapshot
		want  deleteVerdict
	}{
		{"imported", imported, nil, keepImported},
		{"retained", retain, nil, keepRetained},
		{"another serves it", self, []sandboxv1.SandboxSnapshot{holder}, keepShared},
		// Issue 36: a holder being deleted keeps nothing, whatever its
		// name (the smallest name used to delete, and a holder held
		// Terminating made the last user keep it too).
		{"the other holder is being deleted, smaller name", self, []sandboxv1.SandboxSnapshot{deleting(holder, "a")}, deleteSnapshot},
		{"the other holder is being deleted, larger name", self, []sandboxv1.SandboxSnapshot{deleting(holder, "z")}, deleteSnapshot},
		{"one holder being deleted, another live", self, []sandboxv1.SandboxSnapshot{deleting(holder, "a"), holder}, keepShared},
		// A peer waiting for the shared build has not recorded the id, and
		// may never (this object is the only record of it): not kept.
		{"another waits for the shared build", self, []sandboxv1.SandboxSnapshot{waiter}, deleteSnapshot},
		{"nobody else", self, nil, deleteSnapshot},
	} {
		if got := decideDelete(tc.snap, tc.peers, "snap_1"); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every branch of decideRelease, one row each.
func TestDecideRelease(t *testing.T) {
	resp := func(persistent bool, current string, s *vercel.Session) *vercel.SandboxResponse {
		return &vercel.SandboxResponse{Sandbox: vercel.Sandbox{Persistent: persistent, CurrentSnapshotID: current}, Session: s}
	}
	session := func(st vercel.SessionStatus, from string) *vercel.Session {
		return &vercel.Session{ID: "s1", Status: st, SourceSnapshotID: from}
	}
	for _, tc := range []struct {
		name string
		resp *vercel.SandboxResponse
		want releaseVerdict
	}{
		{"not persistent", resp(false, "snap_1", nil), releaseFree},
		{"resumes from another snapshot", resp(true, "snap_2", nil), releaseFree},
		{"no session: would resume from it", resp(true, "snap_1", nil), releaseResume},
		{"running", resp(true, "snap_1", session(vercel.SessionRunning, "")), releaseFree},
		{"pending", resp(true, "snap_1", session(vercel.SessionPending, "")), releaseWait},
		{"stopping", resp(true, "snap_1", session(vercel.SessionStopping, "")), releaseWait},
		{"snapshotting", resp(true, "snap_1", session(vercel.SessionSnapshotting, "")), releaseWait},
		{"a session restored from it failed", resp(true, "snap_1", session(vercel.SessionFailed, "snap_1")), releaseFree},
		{"a session restored from it aborted", resp(true, "snap_1", session(vercel.SessionAborted, "snap_1")), releaseFree},
		{"another session failed", resp(true, "snap_1", session(vercel.SessionFailed, "snap_0")), releaseResume},
		{"stopped", resp(true, "snap_1", session(vercel.SessionStopped, "")), releaseResume},
	} {
		if got := decideRelease(tc.resp, "snap_1"); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
