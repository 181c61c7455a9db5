package controllers

// The Sandbox's one decision: from one observation of its Vercel side (what
// Vercel answered just now, or, between polls, what status recorded) and the
// spec, decide what to do next and the status it leaves: phase, Ready, the
// event to emit and when to look again. decide is pure: the reconciler makes
// the observation (sandbox_controller.go) and performs the action decide
// names (sandbox_act.go); sandbox_decide_internal_test.go walks every branch.

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// remoteState is what one observation found on the Vercel side.
type remoteState int

const (
	// remoteMissing: Vercel has no sandbox under the recorded name (404).
	remoteMissing remoteState = iota
	// remoteForeign: a sandbox has the name but was not created for this object.
	remoteForeign
	// noSession: the sandbox exists but has no session yet.
	noSession
	sessionPending
	sessionRunning
	// sessionStopping: stopping, or being snapshotted (which stops it).
	sessionStopping
	sessionStopped
	// sessionFailed: failed or aborted.
	sessionFailed
)

// observation is one look at the Vercel side of a Sandbox.
type observation struct {
	state remoteState
	// fromVercel: Vercel answered now. The other observations come from
	// status, between polls, for a session that runs or rests.
	fromVercel bool
	// session is the Vercel session Vercel answered with (nil from status).
	session *vercel.Session
	// sessionID is the observed session.
	sessionID string
	// sameSession: status had already recorded this session before the look.
	sameSession bool
	// start and deadline of a running session, as status records them.
	start, deadline time.Time
}

// lifecycle is everything decide weighs: the observation, the spec's wishes,
// what status recorded, the clock and the manager's settings.
type lifecycle struct {
	obs observation
	now time.Time

	// From the spec.
	stopped        bool // spec.state is Stopped
	shutdownDelete bool // spec.shutdownPolicy is Delete
	specChanged    bool // the spec generation was not applied to Vercel yet
	activity       time.Time
	idle           time.Duration
	shutdown       shutdownState
	deleteAtIdle   bool          // spec.idle.action is Delete
	deleteAfter    time.Duration // spec.idle.deleteObjectAfterSeconds; 0: never
	recreate       sandboxv1.RecreatePolicy

	// From status.
	name       string // the Vercel sandbox's name
	phase      sandboxv1.SandboxPhase
	hadSession bool   // a session was recorded once
	ready      string // the Ready reason before this reconcile; "" when unset
	stoppedAt  time.Time
	persistent bool // Vercel keeps the filesystem when a session stops
	// snapshotOutdated: the snapshotRef has new content (SnapshotOutdated).
	snapshotOutdated bool

	// From the reconciler.
	maxSession time.Duration
	refused    bool      // Vercel refused to extend this session before
	pollAt     time.Time // when the running session is next observed in Vercel
	// ownStop is the Ready reason this manager stopped the observed session
	// with ("" when it did not): the status write that recorded the stop
	// may not be in the cache yet when the next reconcile looks.
	ownStop string
	// rewind is where spec.rewind stands (sandbox_rewind.go).
	rewind rewindPlan
}

// action is what the reconciler does for a decision.
type action int

const (
	// actNone records the decision's status and waits for the requeue.
	actNone action = iota
	// actCreate creates the Vercel sandbox (adopting one made for this object).
	actCreate
	// actShutdownDelete deletes the Sandbox at spec.shutdownTime.
	actShutdownDelete
	// actStop stops the running session (spec.state Stopped, or shutdownTime).
	actStop
	// actResume starts a new session of a stopped persistent sandbox.
	actResume
	// actRun keeps a running session: applies a changed spec, runs setup,
	// then reports it Running and extends it when its deadline comes near.
	actRun
	// actIdleDelete deletes a resting Sandbox at the end of its idle life
	// (sandbox_endoflife.go), after recording the decision's status.
	actIdleDelete
	// actRecreate replaces a gone Vercel sandbox with a new one
	// (sandbox_endoflife.go), after recording the decision's status.
	actRecreate
	// actRewind takes the step of spec.rewind that decision.rewindStep
	// names (sandbox_rewind.go).
	actRewind
)

// readiness is the phase and Ready condition a step leaves a Sandbox in.
type readiness struct {
	phase   sandboxv1.SandboxPhase
	ready   metav1.ConditionStatus
	reason  string
	message string
}

// setReady records a Sandbox's phase and Ready condition.
func setReady(sbx *sandboxv1.Sandbox, rd readiness) {
	sbx.Status.Phase = rd.phase
	setCondition(&sbx.Status.Conditions, sbx.Generation, sandboxv1.ConditionReady, rd.ready, rd.reason, rd.message)
}

// event is an event to emit about the Sandbox.
type event struct {
	eventType, reason, note string
}

// decision is what to do next and the status it leaves.
type decision struct {
	action action
	// update applies a changed spec to the Vercel sandbox before the action
	// (actStop applies it after stopping, when specChanged).
	update bool
	// stoppedAt, when set, is recorded as the time the session stopped.
	stoppedAt *metav1.Time
	// event is emitted before acting.
	event *event
	// ready is the phase and Ready condition; nil leaves them. For actStop
	// and actRun it is recorded once the action succeeded.
	ready *readiness
	// noSession clears what only a live session has (routes, deadline).
	noSession bool
	// forgetPoll: a session that rests is not polled.
	forgetPoll bool
	// warn: the coming shutdown is warned about (once) while the session rests.
	warn bool
	// requeue is when to look again (0: not on a timer).
	requeue time.Duration

	// For actStop: the event reason and why, in words.
	stopEvent, stopWhy string
	// For actRun: the session's deadline and how much to extend it now.
	keep   keepAlive
	extend time.Duration
	// For actIdleDelete: why, in words. idleWarnAt, when set, is the idle
	// deletion to warn about.
	deleteWhy  string
	idleWarnAt time.Time
	// For actRecreate: the reason (NotFound, NotPersistent, ...).
	recreateWhy string
	// For actRewind: which step.
	rewindStep rewindStep
	// rewindReady, when set, is the Ready condition a rewind that waits or
	// failed reports instead of the action's (the phase stays the action's).
	rewindReady *readiness
}

// decide is the Sandbox's decision tree.
func decide(l lifecycle) decision {
	o := l.obs
	switch o.state {
	case remoteForeign:
		return decideForeign(l)
	case remoteMissing:
		return decideMissing(l)
	case noSession:
		return decision{requeue: sessionStartPoll}
	}
	if l.shutdown.due && l.shutdownDelete {
		return decision{action: actShutdownDelete}
	}
	if d, ok := decideRewind(l); ok {
		return d
	}
	return l.rewind.report(decideSession(l))
}

// decideSession decides on a sandbox whose session Vercel knows, when no
// rewind step comes first.
func decideSession(l lifecycle) decision {
	o := l.obs
	switch o.state {
	case sessionPending:
		return decision{requeue: sessionStartPoll,
			ready: &readiness{sandboxv1.SandboxCreating, metav1.ConditionFalse, sandboxv1.ReasonCreating, "Waiting for the session to start"}}
	case sessionStopping:
		return decision{requeue: setupPoll,
			ready: &readiness{sandboxv1.SandboxStopping, metav1.ConditionFalse, sandboxv1.ReasonSessionStopped, "The session is stopping"}}
	case sessionFailed:
		return decision{ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonSessionFailed,
			fmt.Sprintf("Session %s %s", o.sessionID, o.session.Status)}}
	case sessionStopped:
		return decideStopped(l)
	}
	return decideRunning(l)
}

// decideForeign leaves alone a Vercel sandbox of the Sandbox's name that
// was not created for it, and fails the Sandbox (one event).
func decideForeign(l lifecycle) decision {
	msg := fmt.Sprintf("A Vercel sandbox named %s exists but was not created for this object; it is left alone", l.name)
	d := decision{ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonNameConflict, msg}}
	if l.ready != sandboxv1.ReasonNameConflict {
		d.event = &event{corev1.EventTypeWarning, sandboxv1.ReasonNameConflict, msg}
	}
	return d
}

// decideMissing handles a Vercel sandbox that is not there: never created
// yet, deleted outside the operator and recreated by spec.recreatePolicy, or
// reported gone (one event).
func decideMissing(l lifecycle) decision {
	if !l.hadSession {
		return decideFirstCreate(l)
	}
	if recreates(l.recreate) && l.wantRunning() {
		return decision{action: actRecreate, recreateWhy: sandboxv1.ReasonNotFound}
	}
	next := "Delete and re-create this Sandbox to get a new one."
	if recreates(l.recreate) {
		// It should not run now (spec.state Stopped, or past its
		// shutdown time): the policy recreates it once it should.
		next = fmt.Sprintf("spec.recreatePolicy %s creates a new one from spec.source when it should run again.", l.recreate)
	}
	d := decision{noSession: true, ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonNotFound,
		fmt.Sprintf("Vercel sandbox %s no longer exists; it was deleted outside the operator. %s", l.name, next)}}
	if l.phase != sandboxv1.SandboxFailed || l.ready != sandboxv1.ReasonNotFound {
		d.event = &event{corev1.EventTypeWarning, sandboxv1.ReasonNotFound,
			fmt.Sprintf("Vercel sandbox %s no longer exists; it was deleted outside the operator", l.name)}
	}
	return d
}

// decideFirstCreate creates the Vercel sandbox, unless spec.shutdownTime has
// already passed: the API server cannot compare a time with now, so a
// shutdownTime in the past is refused here, before a VM boots only to be
// stopped. Under shutdownPolicy Delete the Sandbox is deleted, as it would
// have been at that time.
func decideFirstCreate(l lifecycle) decision {
	if !l.shutdown.due {
		return decision{action: actCreate}
	}
	if l.shutdownDelete {
		return decision{action: actShutdownDelete}
	}
	d := decision{ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonShutdownTimePassed, shutdownPassedMsg}}
	if l.ready != sandboxv1.ReasonShutdownTimePassed {
		d.event = &event{corev1.EventTypeWarning, sandboxv1.ReasonShutdownTimePassed, shutdownPassedMsg}
	}
	return d
}

const shutdownPassedMsg = "spec.shutdownTime had passed before the Vercel sandbox was created, so none was created; set a later spec.shutdownTime, or remove it, to create it"

// decideRunning keeps a running session, or stops it when it should not run.
func decideRunning(l lifecycle) decision {
	o := l.obs
	if !l.wantRunning() {
		reason, stopEvent, why := sandboxv1.ReasonStopped, "Stopped", "spec.state is Stopped"
		if !l.stopped {
			reason, stopEvent, why = sandboxv1.ReasonShutdownTime, "ShutdownStop", "spec.shutdownTime has come"
		}
		msg := fmt.Sprintf("Session %s stopped because %s", o.sessionID, why)
		if !l.persistent {
			msg += cannotResume(l.recreate)
		}
		return decision{action: actStop, stopEvent: stopEvent, stopWhy: why,
			ready:   &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, reason, msg},
			requeue: l.restingRequeue(l.now)}
	}
	k := keepAlive{start: o.start, deadline: o.deadline, activity: l.activity, idle: l.idle, max: l.maxSession}
	if l.refused {
		k = k.capped()
	}
	return decision{action: actRun, update: l.specChanged, keep: k, extend: k.extension(l.now),
		ready: &readiness{sandboxv1.SandboxRunning, metav1.ConditionTrue, sandboxv1.ReasonRunning, fmt.Sprintf("Session %s is running", o.sessionID)}}
}

// decideStopped reports why a session stopped and whether it can come back,
// and resumes it when it should run again. Between polls the reason status
// recorded stands; a fresh look classifies the stop again.
func decideStopped(l lifecycle) decision {
	reason, stoppedAt, record := l.stopOf()
	d := decision{stoppedAt: record}
	if l.obs.fromVercel {
		d.update = l.specChanged
	}
	msg := l.stopMessage(reason)
	if !l.persistent {
		msg += cannotResume(l.recreate)
	}
	d.event = stopEvent(reason, l.ready, msg)
	if why := l.recreateWhy(reason, stoppedAt); why != "" {
		// A changed spec goes to the new sandbox with its create.
		d.action, d.recreateWhy, d.update = actRecreate, why, false
		return d
	}
	if l.resumes(reason, stoppedAt) {
		d.action = actResume
		return d
	}
	return l.rest(d, reason, msg, stoppedAt)
}

// stopOf is why and when the session stopped: as status recorded them
// between polls; on a fresh look classified again, with the stop time to
// record (Vercel's, else now when status has none).
func (l lifecycle) stopOf() (reason string, stoppedAt time.Time, record *metav1.Time) {
	o := l.obs
	if !o.fromVercel {
		return l.ready, l.stoppedAt, nil
	}
	stoppedAt = l.stoppedAt
	if t := msTime(o.session.StoppedAt); t != nil {
		record, stoppedAt = t, t.Time
	} else if stoppedAt.IsZero() {
		record = &metav1.Time{Time: l.now.Truncate(time.Second)}
		stoppedAt = record.Time
	}
	return l.classifyStop(), stoppedAt, record
}

// classifyStop is why a session seen stopped on Vercel stopped.
func (l lifecycle) classifyStop() string {
	o := l.obs
	switch {
	case l.stopped:
		return sandboxv1.ReasonStopped
	case l.shutdown.due:
		return sandboxv1.ReasonShutdownTime
	case l.ownStop != "":
		// The controller's own stop, which status (read from a cache that
		// may not hold the write yet) may not show: a pause lifted at once
		// must resume, not look like a stop outside the operator.
		return l.ownStop
	case o.sameSession && (restingReasons[l.ready] != "" || l.ready == sandboxv1.ReasonQuotaExceeded) && l.phase != sandboxv1.SandboxStopping:
		// Already classified, by the controller's own stop or an earlier
		// look. A look while it was stopping recorded SessionStopped in
		// phase Stopping, which says nothing about why it stopped. A
		// resume the quota refused (QuotaExceeded) still wants to resume.
		return l.ready
	}
	reason := stopCause(o.session, l.maxSession)
	if reason == sandboxv1.ReasonIdleTimeout && l.refused {
		// It ran to the deadline Vercel would not move: the plan's limit.
		return sandboxv1.ReasonMaxSessionLength
	}
	return reason
}

// stopEvent is the event for a stop newly classified as reason (status had
// recorded): reported even when a heartbeat resumes the sandbox right away.
func stopEvent(reason, recorded, msg string) *event {
	if reason == recorded {
		return nil
	}
	switch reason {
	case sandboxv1.ReasonSessionStopped:
		return &event{corev1.EventTypeWarning, reason, msg}
	case sandboxv1.ReasonIdleTimeout, sandboxv1.ReasonMaxSessionLength, sandboxv1.ReasonSnapshotted:
		return &event{corev1.EventTypeNormal, reason, msg}
	}
	return nil
}

// resumes reports whether a persistent sandbox's stopped session resumes
// now.
func (l lifecycle) resumes(reason string, stoppedAt time.Time) bool {
	want := l.wantRunning()
	// A fresh look at a sandbox whose snapshot was missing happens only on a
	// spec change or a requested reconcile: both retry the resume.
	return l.persistent && (l.obs.fromVercel && reason == sandboxv1.ReasonSnapshotMissing && want ||
		shouldResume(reason, want, stoppedAt, l.activity))
}

// rest is the decision d for a session that stays stopped: its readiness on
// a fresh look, the shutdown warning, when to look again, and the end of its
// life (idle deletion, recreation).
func (l lifecycle) rest(d decision, reason, msg string, stoppedAt time.Time) decision {
	if l.obs.fromVercel {
		if reason == sandboxv1.ReasonSnapshotMissing {
			// The failed resume reported it; it waits for a spec change or
			// a requested reconcile, not for a timer.
			return d
		}
		d.ready = &readiness{restingReasons[reason], metav1.ConditionFalse, reason, msg}
		d.forgetPoll = true
	}
	d.warn = true
	d.requeue = restingRequeue(l.shutdownDelete, l.shutdown, l.now)
	l.endOfLife(&d, reason, stoppedAt)
	return d
}

// wantRunning reports whether the Sandbox should have a running session now:
// spec.state is Running and no Stop shutdown has passed.
func (l lifecycle) wantRunning() bool { return !l.stopped && !l.shutdown.due }

func (l lifecycle) stopMessage(reason string) string {
	id := l.obs.sessionID
	switch reason {
	case sandboxv1.ReasonStopped:
		return fmt.Sprintf("Session %s stopped because spec.state is Stopped", id)
	case sandboxv1.ReasonShutdownTime:
		return fmt.Sprintf("Session %s stopped at spec.shutdownTime", id)
	case sandboxv1.ReasonIdleTimeout:
		return fmt.Sprintf("Session %s stopped after %s without activity; a newer %s heartbeat resumes it", id, l.idle, sandboxv1.AnnotationLastActivity)
	case sandboxv1.ReasonMaxSessionLength:
		return fmt.Sprintf("Session %s stopped at the plan's maximum session length (%s); a newer %s heartbeat resumes it in a new session",
			id, l.maxSession, sandboxv1.AnnotationLastActivity)
	case sandboxv1.ReasonSnapshotted:
		return fmt.Sprintf("Session %s stopped when a snapshot was taken of it; a newer %s heartbeat resumes it", id, sandboxv1.AnnotationLastActivity)
	default:
		return fmt.Sprintf("Session %s was stopped outside the operator; a newer %s heartbeat resumes it", id, sandboxv1.AnnotationLastActivity)
	}
}

// cannotRunAgain ends the message about a stopped session of a sandbox that
// is not persistent and is never recreated.
const cannotRunAgain = "; spec.persistent is false, so it cannot run again: delete and re-create this Sandbox for a new one"

// cannotResume ends the message about a stopped session of a sandbox that is
// not persistent: it cannot resume, and only a recreatePolicy that recreates
// gone sandboxes runs it again, in a new Vercel sandbox.
func cannotResume(policy sandboxv1.RecreatePolicy) string {
	if recreates(policy) {
		return fmt.Sprintf("; spec.persistent is false, so it cannot resume: spec.recreatePolicy %s creates a new Vercel sandbox from spec.source when it should run again", policy)
	}
	return cannotRunAgain
}

// restingRequeue is when a Sandbox whose session stops at stoppedAt needs the
// controller again without any change to it: for its shutdown or its idle
// deletion (warning, then delete).
func (l lifecycle) restingRequeue(stoppedAt time.Time) time.Duration {
	d := restingRequeue(l.shutdownDelete, l.shutdown, l.now)
	if next := restSchedule(l.now, stoppedAt, l.deleteAfter).next; !next.IsZero() {
		if r := requeueAt(l.now, next); d == 0 || r < d {
			d = r
		}
	}
	return d
}

// restingRequeue is when a stopped sandbox needs the controller again without
// any change to it: only for its shutdown (warning, then delete).
func restingRequeue(shutdownDelete bool, sd shutdownState, now time.Time) time.Duration {
	if !shutdownDelete {
		return 0
	}
	return requeueAt(now, sd.next)
}
