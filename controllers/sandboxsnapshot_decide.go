package controllers

// The SandboxSnapshot's decisions, for its three sources and its deletion:
// each takes what one observation of Kubernetes and Vercel found and says
// what to do next and the readiness it leaves. They are pure: the reconciler
// observes (sandboxsnapshot_controller.go, _capture.go, _build.go,
// _builder.go) and acts; sandboxsnapshot_decide_internal_test.go walks every
// branch. setSnapshotReady is the one writer of phase, readyToUse and Ready.

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// snapReadiness is the phase and Ready condition a step leaves a
// SandboxSnapshot in.
type snapReadiness struct {
	// phase is the new phase; "" leaves it (a rebuild while a snapshot is
	// served shows on Ready only).
	phase sandboxv1.SandboxSnapshotPhase
	// ready is the Ready condition's status; "" leaves the condition.
	ready   metav1.ConditionStatus
	reason  string
	message string
}

// setSnapshotReady records a SandboxSnapshot's phase, readyToUse and Ready
// condition. readyToUse follows the phase: true when Ready, false when
// Failed, Expired or Deleting; a capture, build or wait in progress leaves
// it, since it does not change what is served.
func setSnapshotReady(snap *sandboxv1.SandboxSnapshot, rd snapReadiness) {
	st := &snap.Status
	switch rd.phase {
	case sandboxv1.SnapshotReady:
		st.ReadyToUse = true
	case sandboxv1.SnapshotFailed, sandboxv1.SnapshotExpired, sandboxv1.SnapshotDeleting:
		st.ReadyToUse = false
	}
	if rd.phase != "" {
		st.Phase = rd.phase
	}
	if rd.ready != "" {
		setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, rd.ready, rd.reason, rd.message)
	}
}

func snapPending(reason, msg string) snapReadiness {
	return snapReadiness{sandboxv1.SnapshotPending, metav1.ConditionFalse, reason, msg}
}

func snapFailed(reason, msg string) snapReadiness {
	return snapReadiness{sandboxv1.SnapshotFailed, metav1.ConditionFalse, reason, msg}
}

// buildReadiness is the readiness a build's state leaves: while an older
// snapshot is served it shows on Ready only (True, naming what is served,
// with servingNote), else it is the phase.
func buildReadiness(serving bool, served string, phase sandboxv1.SandboxSnapshotPhase, reason, msg, servingNote string) snapReadiness {
	if serving {
		return snapReadiness{"", metav1.ConditionTrue, reason, fmt.Sprintf("Serving %s%s: %s", served, servingNote, msg)}
	}
	return snapReadiness{phase, metav1.ConditionFalse, reason, msg}
}

// buildingReadiness is the readiness of a build in progress: Building, or
// still Ready (reason Rebuilding) while the old snapshot is served.
func buildingReadiness(serving bool, served, msg string) snapReadiness {
	rd := buildReadiness(serving, served, sandboxv1.SnapshotBuilding, sandboxv1.ReasonBuilding, msg, " while it is rebuilt")
	if serving {
		rd.reason = sandboxv1.ReasonRebuilding
	}
	return rd
}

// servedState is what Vercel answered for a snapshot id.
type servedState int

const (
	// servedGone: Vercel has no such snapshot (404, 410).
	servedGone servedState = iota
	// servedExpired: deleted, or past its expiry.
	servedExpired
	// servedFailed: Vercel reports the snapshot failed.
	servedFailed
	// servedCreated: ready to boot from.
	servedCreated
	// servedOther: any other status (being created).
	servedOther
)

// snapshotExpired reports a snapshot Vercel no longer serves at now.
func snapshotExpired(s *vercel.Snapshot, now time.Time) bool {
	return s.Status == vercel.SnapshotDeleted || (s.ExpiresAt > 0 && s.ExpiresAt <= now.UnixMilli())
}

// classifyServed classifies the answer to a read of a snapshot; an error
// other than 404 or 410 is returned.
func classifyServed(s *vercel.Snapshot, err error, now time.Time) (servedState, error) {
	switch {
	case vercel.IsNotFound(err) || vercel.IsGone(err):
		return servedGone, nil
	case err != nil:
		return 0, err
	case snapshotExpired(s, now):
		return servedExpired, nil
	case s.Status == vercel.SnapshotFailed:
		return servedFailed, nil
	case s.Status == vercel.SnapshotCreated:
		return servedCreated, nil
	}
	return servedOther, nil
}

// captureAction is what a capture does next.
type captureAction int

const (
	// captureObserve: a snapshot is recorded; a resume that failed after
	// the capture is retried, then the snapshot observed.
	captureObserve captureAction = iota
	// captureClassMismatch: the Sandbox is of another SandboxClass.
	captureClassMismatch
	// captureRecord: the recorded session's snapshot was found; record it.
	captureRecord
	// captureRetry: the recorded session still runs; ask Vercel again.
	captureRetry
	// captureSourceMissing: the Sandbox does not exist.
	captureSourceMissing
	// captureWaitSource: the Sandbox does not run (waitForSource).
	captureWaitSource
	// captureReadSource: the quota admits it, then the source's Vercel
	// sandbox is read; decideCapture is asked again with what it found.
	captureReadSource
	// captureForeign: the source's Vercel sandbox is not the Sandbox's.
	captureForeign
	// captureTake: capture the running session.
	captureTake
)

// captureObservation is one look at a capture and its source.
type captureObservation struct {
	// recorded: status holds the snapshot id.
	recorded bool
	sbx      *sandboxv1.Sandbox
	// mismatch: the Sandbox's class differs (the message), "" when not.
	mismatch string
	// intent: a capture of a session was recorded; found is the snapshot
	// Vercel took of it, intentRunning that the session still runs.
	intent        bool
	found         *vercel.Snapshot
	intentRunning bool
	// sourceRead: the source's Vercel sandbox was read; source is the
	// answer (nil: 404).
	sourceRead bool
	source     *vercel.SandboxResponse
	owner      ownership
}

// decideCapture is the capture's decision tree. forget reports that the
// recorded intent is stale (its session stopped without a snapshot).
func decideCapture(o captureObservation) (act captureAction, forget bool) {
	switch {
	case o.recorded:
		return captureObserve, false
	case o.mismatch != "":
		return captureClassMismatch, false
	case o.intent && o.found != nil:
		return captureRecord, false
	case o.intent && o.intentRunning:
		return captureRetry, false
	}
	return decideSource(o), o.intent
}

// decideSource decides from the source Sandbox and its Vercel sandbox.
func decideSource(o captureObservation) captureAction {
	switch s := o.sbx; {
	case s == nil:
		return captureSourceMissing
	case s.Status.Phase != sandboxv1.SandboxRunning || s.Status.SessionID == "" || s.Status.VercelName == "":
		return captureWaitSource
	case !o.sourceRead:
		return captureReadSource
	case o.source == nil:
		return captureWaitSource
	case o.owner != ownedBySelf:
		return captureForeign
	case o.source.Session == nil || o.source.Session.Status != vercel.SessionRunning:
		return captureWaitSource
	}
	return captureTake
}

// sourceWait is the readiness of a capture whose Sandbox does not run:
// Failed (SourceFailed) while it cannot run again — it failed, or it
// stopped and is not persistent — else Pending with what would make it run.
func sourceWait(sbx *sandboxv1.Sandbox) snapReadiness {
	name, why := sbx.Name, readyMessage(sbx.Status.Conditions)
	notPersistent := sbx.Spec.Persistent != nil && !*sbx.Spec.Persistent
	switch {
	case sbx.Status.Phase == sandboxv1.SandboxFailed:
		return snapFailed(sandboxv1.ReasonSourceFailed, fmt.Sprintf("Sandbox %q failed (%s); it cannot be captured unless it runs again", name, why))
	case sbx.Status.Phase == sandboxv1.SandboxStopped && notPersistent && sbx.Status.SessionID != "":
		return snapFailed(sandboxv1.ReasonSourceFailed, fmt.Sprintf("Sandbox %q stopped and is not persistent, so it cannot run again to be captured (%s)", name, why))
	}
	var msg string
	switch {
	case sbx.Spec.State == sandboxv1.SandboxStateStopped:
		msg = fmt.Sprintf("Waiting for Sandbox %q to be running before capturing it: it is paused (spec.state Stopped)", name)
	case sbx.Status.Phase == sandboxv1.SandboxStopped:
		msg = fmt.Sprintf("Waiting for Sandbox %q to be running before capturing it: it is stopped (%s)", name, why)
	default:
		phase := string(sbx.Status.Phase)
		if phase == "" {
			phase = "not started"
		}
		msg = fmt.Sprintf("Waiting for Sandbox %q to be running (phase %s) before capturing it", name, phase)
	}
	return snapPending(sandboxv1.ReasonSourceNotRunning, msg)
}

// peerToAdopt is the peer whose newer snapshot of the same hash this object
// should serve instead of its own (nil: none): the newest ready peer, when
// it serves another id and this object serves nothing or an older one.
func peerToAdopt(st *sandboxv1.SandboxSnapshotStatus, peers []*sandboxv1.SandboxSnapshot, serving bool) *sandboxv1.SandboxSnapshot {
	p := newestReadyPeer(peers)
	switch {
	case p == nil || p.Status.SnapshotID == st.SnapshotID:
		return nil
	case !serving:
		return p
	case p.Status.CreatedAt != nil && st.CreatedAt != nil && p.Status.CreatedAt.After(st.CreatedAt.Time):
		return p
	}
	return nil
}

// recipeAction is what a recipe does once it knows what it serves.
type recipeAction int

const (
	// recipeServe: the served snapshot is fresh; look again later.
	recipeServe recipeAction = iota
	// recipeFollow: another user of the hash drives the build.
	recipeFollow
	// recipeDrive: this object drives the build (sandboxsnapshot_builder.go).
	recipeDrive
)

// recipeDecision is what a recipe does and when it looks again.
type recipeDecision struct {
	action  recipeAction
	requeue time.Duration
	driver  *sandboxv1.SandboxSnapshot
}

// decideRecipe decides between serving, following and driving. served is
// nil when no live snapshot is served; age is the served snapshot's; next is
// when a served snapshot is observed again.
func decideRecipe(snap *sandboxv1.SandboxSnapshot, peers []*sandboxv1.SandboxSnapshot, served bool, age, next time.Duration) recipeDecision {
	if served {
		maxAge := effectiveMaxAge(snap, peers)
		if maxAge == 0 || age < maxAge {
			if maxAge > 0 && maxAge-age < next {
				next = max(maxAge-age, time.Second)
			}
			return recipeDecision{action: recipeServe, requeue: next}
		}
	}
	// A build is needed: none yet, the snapshot expired, or it is too old.
	if driver := buildDriver(snap, peers); driver != nil {
		return recipeDecision{action: recipeFollow, driver: driver}
	}
	return recipeDecision{action: recipeDrive}
}

// followReadiness is the readiness of a SandboxSnapshot that follows
// driver's build: Failed when that build failed and nothing is served, else
// building.
func followReadiness(driver *sandboxv1.SandboxSnapshot, serving bool, served string) snapReadiness {
	if db := driver.Status.Build; db != nil && db.Failed && !serving {
		msg := "the build failed"
		if c := meta.FindStatusCondition(driver.Status.Conditions, sandboxv1.ConditionReady); c != nil {
			msg = c.Message
		}
		return snapFailed(sandboxv1.ReasonBuildFailed, fmt.Sprintf("The build shared with SandboxSnapshot %s failed: %s", driver.Name, msg))
	}
	return buildingReadiness(serving, served, fmt.Sprintf("Waiting for the build run by SandboxSnapshot %s (same content hash)", driver.Name))
}

// builderClaim is who drives a build, from the builder's name and tags.
type builderClaim int

const (
	// claimFailed: the build under this name failed; reported already,
	// retried only when the recipe changes.
	claimFailed builderClaim = iota
	// claimNameTaken: a sandbox that is not a builder of this hash in this
	// cluster holds the name; it is left alone.
	claimNameTaken
	// claimFollow: a live peer created the builder and drives the build.
	claimFollow
	// claimTakeOver: a peer created it but is gone; this object takes over.
	claimTakeOver
	// claimOwn: this object's builder, or none yet.
	claimOwn
)

// builderObservation is one look at the builder a build runs in.
type builderObservation struct {
	// failedBefore: status records this builder's build as failed.
	failedBefore bool
	// found: Vercel has a sandbox under the builder's name.
	found bool
	owner ownership
	// hashMatches: its content-hash tag is this build's.
	hashMatches bool
	// liveOwner: the peer its owner tag names, when that peer exists and is
	// not being deleted.
	liveOwner *sandboxv1.SandboxSnapshot
}

// decideClaim decides who drives the build. Vercel's unique names make the
// builder a lock: whoever created it drives the build while it exists, so
// two users of a hash that both thought themselves first still never run a
// step twice.
func decideClaim(o builderObservation) builderClaim {
	switch {
	case o.failedBefore:
		return claimFailed
	case !o.found:
		return claimOwn
	case (o.owner != ownedBySelf && o.owner != ownedByPeer) || !o.hashMatches:
		return claimNameTaken
	case o.owner == ownedBySelf:
		return claimOwn
	case o.liveOwner != nil:
		return claimFollow
	}
	return claimTakeOver
}

// buildAction is the build's next act once this object drives it.
type buildAction int

const (
	// buildTimedOut: the build ran past its total time budget.
	buildTimedOut buildAction = iota
	// buildRecover: the builder is gone after its session was recorded: its
	// capture may have been taken before a crash; else a new one is created.
	buildRecover
	// buildCreate: create the builder.
	buildCreate
	// buildCaptured: the builder has a snapshot; record it.
	buildCaptured
	// buildBooting: its session has not started yet.
	buildBooting
	// buildSessionEnded: its session stopped or failed before the capture.
	buildSessionEnded
	// buildAdvance: run the steps (steps.go), then capture.
	buildAdvance
)

// buildProgress is one look at the builder a build runs in.
type buildProgress struct {
	// overBudget: the build ran longer than its time budget.
	overBudget bool
	// found: the builder exists; the rest describes it.
	found bool
	// sessionRecorded: status recorded a session of the builder.
	sessionRecorded bool
	// currentSnapshot: the builder's currentSnapshotId.
	currentSnapshot string
	session         *vercel.Session
}

func decideBuild(p buildProgress) buildAction {
	switch s := p.session; {
	case p.overBudget:
		return buildTimedOut
	case !p.found && p.sessionRecorded:
		return buildRecover
	case !p.found:
		return buildCreate
	case p.currentSnapshot != "":
		return buildCaptured
	case s == nil || s.Status == vercel.SessionPending:
		return buildBooting
	case s.Status != vercel.SessionRunning:
		return buildSessionEnded
	}
	return buildAdvance
}

// deleteVerdict is what deleting a SandboxSnapshot does with one Vercel
// snapshot id its status names.
type deleteVerdict int

const (
	// keepImported: imported by id, made outside this object.
	keepImported deleteVerdict = iota
	// keepRetained: deletionPolicy Retain.
	keepRetained
	// keepShared: another SandboxSnapshot still uses it.
	keepShared
	// deleteSnapshot: delete it, once it is shown to be the operator's.
	deleteSnapshot
)

// decideDelete decides one id. Only a live holder keeps it (holdsSnapshot):
// a peer still waiting for the shared build does not, since it may never
// record the id once this object, the only record of it, is gone (it builds
// again instead).
func decideDelete(snap *sandboxv1.SandboxSnapshot, peers []sandboxv1.SandboxSnapshot, id string) deleteVerdict {
	switch {
	case snap.Spec.Source.SnapshotID != nil:
		return keepImported
	case snap.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain:
		return keepRetained
	case holdsSnapshot(snap, peers, id):
		return keepShared
	}
	return deleteSnapshot
}

// releaseVerdict is whether a captured snapshot may be deleted, seen from the
// source's Vercel sandbox.
type releaseVerdict int

const (
	// releaseFree: nothing resumes from it; delete it.
	releaseFree releaseVerdict = iota
	// releaseWait: a session is settling; wait.
	releaseWait
	// releaseResume: the sandbox would resume from it; resume it first.
	releaseResume
)

// decideRelease decides for snapshot id from the source's Vercel sandbox.
func decideRelease(resp *vercel.SandboxResponse, id string) releaseVerdict {
	if !resp.Sandbox.Persistent || resp.Sandbox.CurrentSnapshotID != id {
		return releaseFree
	}
	s := resp.Session
	if s == nil {
		return releaseResume
	}
	switch s.Status {
	case vercel.SessionRunning:
		// The filesystem lives in the session now.
		return releaseFree
	case vercel.SessionPending, vercel.SessionStopping, vercel.SessionSnapshotting:
		return releaseWait
	case vercel.SessionFailed, vercel.SessionAborted:
		if s.SourceSnapshotID == id {
			// A session restored from it failed: resuming again would
			// loop, and the snapshot did not help.
			return releaseFree
		}
	}
	return releaseResume
}
