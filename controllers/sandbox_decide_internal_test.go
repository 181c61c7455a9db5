package controllers

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Every branch of decide, one row each: the observation and what the spec
// and status say, and the whole decision expected.
func TestDecide(t *testing.T) {
	const idle = 300 * time.Second
	const id = "sbx_sess1"
	ms := func(s int) int64 { return at(s).UnixMilli() }
	// A persistent Sandbox whose session started at t0 with a 300 s window,
	// looked at 100 s later, polled again at 160 s.
	base := func() lifecycle {
		return lifecycle{
			now: at(100), idle: idle, maxSession: 24 * time.Hour,
			name: "ns-box-1234", phase: sandboxv1.SandboxRunning, hadSession: true, ready: sandboxv1.ReasonRunning,
			persistent: true, pollAt: at(160),
		}
	}
	with := func(o observation, edit func(*lifecycle)) lifecycle {
		l := base()
		l.obs = o
		if edit != nil {
			edit(&l)
		}
		return l
	}
	running := observation{state: sessionRunning, fromVercel: true, sessionID: id, sameSession: true, start: at(0), deadline: at(300),
		session: &vercel.Session{ID: id, Status: vercel.SessionRunning, StartedAt: ms(0), Timeout: 300_000}}
	runningFromStatus := observation{state: sessionRunning, sessionID: id, sameSession: true, start: at(0), deadline: at(300)}
	// stoppedAfter is a fresh look at the session stopped s seconds after its start.
	stoppedAfter := func(s int, edit func(*vercel.Session)) observation {
		sess := &vercel.Session{ID: id, Status: vercel.SessionStopped, StartedAt: ms(0), Timeout: 300_000, StoppedAt: ms(s)}
		if edit != nil {
			edit(sess)
		}
		return observation{state: sessionStopped, fromVercel: true, sessionID: id, sameSession: true, session: sess}
	}
	resting := observation{state: sessionStopped, sessionID: id, sameSession: true}
	keep := keepAlive{start: at(0), deadline: at(300), idle: idle, max: 24 * time.Hour}
	runningReady := &readiness{sandboxv1.SandboxRunning, metav1.ConditionTrue, sandboxv1.ReasonRunning, "Session sbx_sess1 is running"}
	idleMsg := "Session sbx_sess1 stopped after 5m0s without activity; a newer sandbox.sentry.io/last-activity heartbeat resumes it"
	stoppedAt := func(s int) *metav1.Time { return msTime(ms(s)) }
	warnAt := shutdownState{warn: true, next: at(200)}

	for _, tc := range []struct {
		name string
		l    lifecycle
		want decision
	}{
		// What a look at Vercel found besides a session.
		{"a sandbox with the name exists but is not ours: NameConflict, reported once",
			with(observation{state: remoteForeign, fromVercel: true}, nil),
			decision{ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonNameConflict,
				"A Vercel sandbox named ns-box-1234 exists but was not created for this object; it is left alone"},
				event: &event{corev1.EventTypeWarning, sandboxv1.ReasonNameConflict, "A Vercel sandbox named ns-box-1234 exists but was not created for this object; it is left alone"}}},
		{"the name conflict already reported: no second event",
			with(observation{state: remoteForeign, fromVercel: true}, func(l *lifecycle) { l.ready = sandboxv1.ReasonNameConflict }),
			decision{ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonNameConflict,
				"A Vercel sandbox named ns-box-1234 exists but was not created for this object; it is left alone"}}},
		{"no sandbox and none recorded: create it",
			with(observation{state: remoteMissing, fromVercel: true}, func(l *lifecycle) {
				l.hadSession, l.phase, l.ready = false, sandboxv1.SandboxCreating, sandboxv1.ReasonCreating
			}),
			decision{action: actCreate}},
		{"never created and shutdownTime passed, policy Stop: refuse to create, reported once",
			with(observation{state: remoteMissing, fromVercel: true}, func(l *lifecycle) {
				l.hadSession, l.phase, l.ready, l.shutdown = false, sandboxv1.SandboxCreating, sandboxv1.ReasonCreating, shutdownState{due: true}
			}),
			decision{event: &event{corev1.EventTypeWarning, sandboxv1.ReasonShutdownTimePassed, shutdownPassedMsg},
				ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonShutdownTimePassed, shutdownPassedMsg}}},
		{"never created and shutdownTime passed, already reported: no second event",
			with(observation{state: remoteMissing, fromVercel: true}, func(l *lifecycle) {
				l.hadSession, l.phase, l.ready, l.shutdown = false, sandboxv1.SandboxFailed, sandboxv1.ReasonShutdownTimePassed, shutdownState{due: true}
			}),
			decision{ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonShutdownTimePassed, shutdownPassedMsg}}},
		{"never created and shutdownTime passed, policy Delete: delete the Sandbox, create nothing",
			with(observation{state: remoteMissing, fromVercel: true}, func(l *lifecycle) {
				l.hadSession, l.shutdown, l.shutdownDelete = false, shutdownState{due: true}, true
			}),
			decision{action: actShutdownDelete}},
		{"never created, shutdownTime ahead: create it",
			with(observation{state: remoteMissing, fromVercel: true}, func(l *lifecycle) {
				l.hadSession, l.shutdown = false, warnAt
			}),
			decision{action: actCreate}},
		{"no sandbox but a session was recorded: deleted outside, reported once",
			with(observation{state: remoteMissing, fromVercel: true}, nil),
			decision{noSession: true,
				event: &event{corev1.EventTypeWarning, sandboxv1.ReasonNotFound, "Vercel sandbox ns-box-1234 no longer exists; it was deleted outside the operator"},
				ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonNotFound,
					"Vercel sandbox ns-box-1234 no longer exists; it was deleted outside the operator. Delete and re-create this Sandbox to get a new one."}}},
		{"deleted outside while spec.state is Stopped, recreatePolicy OnGone: reported, recreated once it should run",
			with(observation{state: remoteMissing, fromVercel: true}, func(l *lifecycle) { l.stopped, l.recreate = true, sandboxv1.RecreateOnGone }),
			decision{noSession: true,
				event: &event{corev1.EventTypeWarning, sandboxv1.ReasonNotFound, "Vercel sandbox ns-box-1234 no longer exists; it was deleted outside the operator"},
				ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonNotFound,
					"Vercel sandbox ns-box-1234 no longer exists; it was deleted outside the operator. spec.recreatePolicy OnGone creates a new one from spec.source when it should run again."}}},
		{"still missing, already reported: no second event",
			with(observation{state: remoteMissing, fromVercel: true}, func(l *lifecycle) { l.phase, l.ready = sandboxv1.SandboxFailed, sandboxv1.ReasonNotFound }),
			decision{noSession: true, ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonNotFound,
				"Vercel sandbox ns-box-1234 no longer exists; it was deleted outside the operator. Delete and re-create this Sandbox to get a new one."}}},
		{"no session yet: look again soon, status untouched",
			with(observation{state: noSession, fromVercel: true}, func(l *lifecycle) { l.shutdown, l.shutdownDelete = shutdownState{due: true}, true }),
			decision{action: actNone, requeue: sessionStartPoll}},

		// Shutdown with policy Delete comes before anything else.
		{"shutdown due, policy Delete, running: delete the Sandbox",
			with(running, func(l *lifecycle) { l.shutdown, l.shutdownDelete = shutdownState{due: true}, true }),
			decision{action: actShutdownDelete}},
		{"shutdown due, policy Delete, resting (from status): delete the Sandbox",
			with(resting, func(l *lifecycle) {
				l.phase, l.ready, l.shutdown, l.shutdownDelete = sandboxv1.SandboxIdle, sandboxv1.ReasonIdleTimeout, shutdownState{due: true}, true
			}),
			decision{action: actShutdownDelete}},
		{"shutdown due, policy Delete, session starting: delete the Sandbox",
			with(observation{state: sessionPending, fromVercel: true, sessionID: id}, func(l *lifecycle) { l.shutdown, l.shutdownDelete = shutdownState{due: true}, true }),
			decision{action: actShutdownDelete}},

		// Sessions in passing states.
		{"session starting: Creating",
			with(observation{state: sessionPending, fromVercel: true, sessionID: id}, nil),
			decision{requeue: sessionStartPoll, ready: &readiness{sandboxv1.SandboxCreating, metav1.ConditionFalse, sandboxv1.ReasonCreating, "Waiting for the session to start"}}},
		{"session stopping or being snapshotted: Stopping",
			with(observation{state: sessionStopping, fromVercel: true, sessionID: id}, nil),
			decision{requeue: setupPoll, ready: &readiness{sandboxv1.SandboxStopping, metav1.ConditionFalse, sandboxv1.ReasonSessionStopped, "The session is stopping"}}},
		{"session failed: Failed, not retried",
			with(observation{state: sessionFailed, fromVercel: true, sessionID: id, session: &vercel.Session{ID: id, Status: vercel.SessionAborted}}, nil),
			decision{ready: &readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, sandboxv1.ReasonSessionFailed, "Session sbx_sess1 aborted"}}},

		// A running session.
		{"running, nothing due: keep it, no extension",
			with(running, nil),
			decision{action: actRun, keep: keep, ready: runningReady}},
		{"running from status: the same decision",
			with(runningFromStatus, nil),
			decision{action: actRun, keep: keep, ready: runningReady}},
		{"running with a changed spec: apply it first",
			with(running, func(l *lifecycle) { l.specChanged = true }),
			decision{action: actRun, update: true, keep: keep, ready: runningReady}},
		{"running, a heartbeat within the extension margin: extend to heartbeat + window",
			with(running, func(l *lifecycle) { l.now, l.activity = at(250), at(240) }),
			decision{action: actRun, keep: keepAlive{start: at(0), deadline: at(300), activity: at(240), idle: idle, max: 24 * time.Hour},
				extend: 240 * time.Second, ready: runningReady}},
		{"running, Vercel refused to extend this session: the deadline is the limit",
			with(running, func(l *lifecycle) { l.now, l.activity, l.refused = at(250), at(240), true }),
			decision{action: actRun, keep: keepAlive{start: at(0), deadline: at(300), activity: at(240), idle: idle, max: 301 * time.Second},
				ready: runningReady}},
		{"running but spec.state is Stopped: stop it",
			with(running, func(l *lifecycle) { l.stopped = true }),
			decision{action: actStop, stopEvent: "Stopped", stopWhy: "spec.state is Stopped",
				ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonStopped, "Session sbx_sess1 stopped because spec.state is Stopped"}}},
		{"running, spec.state Stopped, policy Delete ahead: stop, and come back for the shutdown",
			with(running, func(l *lifecycle) { l.stopped, l.shutdown, l.shutdownDelete = true, warnAt, true }),
			decision{action: actStop, stopEvent: "Stopped", stopWhy: "spec.state is Stopped", requeue: 100 * time.Second,
				ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonStopped, "Session sbx_sess1 stopped because spec.state is Stopped"}}},
		{"running past shutdownTime, policy Stop, not persistent: stop for good",
			with(runningFromStatus, func(l *lifecycle) { l.shutdown, l.persistent = shutdownState{due: true}, false }),
			decision{action: actStop, stopEvent: "ShutdownStop", stopWhy: "spec.shutdownTime has come",
				ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonShutdownTime,
					"Session sbx_sess1 stopped because spec.shutdownTime has come" + cannotRunAgain}}},
		{"running, spec.state Stopped, not persistent, recreatePolicy OnGone: stop, and say a new sandbox comes when it should run",
			with(running, func(l *lifecycle) { l.stopped, l.persistent, l.recreate = true, false, sandboxv1.RecreateOnGone }),
			decision{action: actStop, stopEvent: "Stopped", stopWhy: "spec.state is Stopped",
				ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonStopped,
					"Session sbx_sess1 stopped because spec.state is Stopped; spec.persistent is false, so it cannot resume: " +
						"spec.recreatePolicy OnGone creates a new Vercel sandbox from spec.source when it should run again"}}},

		// A stopped session, freshly looked at: why it stopped.
		{"stopped at its deadline without heartbeat: Idle, reported",
			with(stoppedAfter(300, nil), func(l *lifecycle) { l.now = at(310) }),
			decision{stoppedAt: stoppedAt(300), forgetPoll: true, warn: true,
				event: &event{corev1.EventTypeNormal, sandboxv1.ReasonIdleTimeout, idleMsg},
				ready: &readiness{sandboxv1.SandboxIdle, metav1.ConditionFalse, sandboxv1.ReasonIdleTimeout, idleMsg}}},
		{"stopped at its deadline, seen stopping before: Idle, not SessionStopped",
			with(stoppedAfter(300, nil), func(l *lifecycle) {
				l.now, l.phase, l.ready = at(310), sandboxv1.SandboxStopping, sandboxv1.ReasonSessionStopped
			}),
			decision{stoppedAt: stoppedAt(300), forgetPoll: true, warn: true,
				event: &event{corev1.EventTypeNormal, sandboxv1.ReasonIdleTimeout, idleMsg},
				ready: &readiness{sandboxv1.SandboxIdle, metav1.ConditionFalse, sandboxv1.ReasonIdleTimeout, idleMsg}}},
		{"stopped at its deadline, a heartbeat since: resume, reporting the stop first",
			with(stoppedAfter(300, nil), func(l *lifecycle) { l.now, l.activity = at(310), at(305) }),
			decision{action: actResume, stoppedAt: stoppedAt(300), event: &event{corev1.EventTypeNormal, sandboxv1.ReasonIdleTimeout, idleMsg}}},
		{"stopped at its deadline, with a changed spec: apply it",
			with(stoppedAfter(300, nil), func(l *lifecycle) { l.now, l.specChanged = at(310), true }),
			decision{update: true, stoppedAt: stoppedAt(300), forgetPoll: true, warn: true,
				event: &event{corev1.EventTypeNormal, sandboxv1.ReasonIdleTimeout, idleMsg},
				ready: &readiness{sandboxv1.SandboxIdle, metav1.ConditionFalse, sandboxv1.ReasonIdleTimeout, idleMsg}}},
		{"stopped at a deadline Vercel would not extend: MaxSessionLength",
			with(stoppedAfter(300, nil), func(l *lifecycle) { l.now, l.refused = at(310), true }),
			func() decision {
				msg := "Session sbx_sess1 stopped at the plan's maximum session length (24h0m0s); a newer sandbox.sentry.io/last-activity heartbeat resumes it in a new session"
				return decision{stoppedAt: stoppedAt(300), forgetPoll: true, warn: true,
					event: &event{corev1.EventTypeNormal, sandboxv1.ReasonMaxSessionLength, msg},
					ready: &readiness{sandboxv1.SandboxIdle, metav1.ConditionFalse, sandboxv1.ReasonMaxSessionLength, msg}}
			}()},
		{"stopped early by someone else: SessionStopped, a Warning",
			with(stoppedAfter(100, nil), func(l *lifecycle) { l.now = at(110) }),
			func() decision {
				msg := "Session sbx_sess1 was stopped outside the operator; a newer sandbox.sentry.io/last-activity heartbeat resumes it"
				return decision{stoppedAt: stoppedAt(100), forgetPoll: true, warn: true,
					event: &event{corev1.EventTypeWarning, sandboxv1.ReasonSessionStopped, msg},
					ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonSessionStopped, msg}}
			}()},
		{"stopped early by a snapshot, not persistent: Snapshotted, cannot run again even with a heartbeat",
			with(stoppedAfter(100, func(s *vercel.Session) { s.SnapshottedAt = ms(100) }), func(l *lifecycle) { l.now, l.persistent, l.activity = at(110), false, at(105) }),
			func() decision {
				msg := "Session sbx_sess1 stopped when a snapshot was taken of it; a newer sandbox.sentry.io/last-activity heartbeat resumes it" + cannotRunAgain
				return decision{stoppedAt: stoppedAt(100), forgetPoll: true, warn: true,
					event: &event{corev1.EventTypeNormal, sandboxv1.ReasonSnapshotted, msg},
					ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonSnapshotted, msg}}
			}()},
		{"stopped while spec.state is Stopped: Stopped, no event, the stop time from status kept",
			with(stoppedAfter(0, func(s *vercel.Session) { s.StoppedAt = 0 }), func(l *lifecycle) {
				l.now, l.stopped, l.stoppedAt, l.ready = at(110), true, at(90), sandboxv1.ReasonStopped
			}),
			decision{forgetPoll: true, warn: true,
				ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonStopped, "Session sbx_sess1 stopped because spec.state is Stopped"}}},
		{"stopped at shutdownTime (policy Stop), no stop time anywhere: now",
			with(stoppedAfter(0, func(s *vercel.Session) { s.StoppedAt = 0 }), func(l *lifecycle) { l.now, l.shutdown = at(110).Add(300*time.Millisecond), shutdownState{due: true} }),
			decision{stoppedAt: &metav1.Time{Time: at(110)}, forgetPoll: true, warn: true,
				ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonShutdownTime, "Session sbx_sess1 stopped at spec.shutdownTime"}}},
		{"stopped by this manager (a pause), status from a cache without that write, running wanted again: resume, no event",
			with(stoppedAfter(100, nil), func(l *lifecycle) { l.now, l.ownStop = at(101), sandboxv1.ReasonStopped }),
			decision{action: actResume, stoppedAt: stoppedAt(100)}},
		{"stopped by this manager at shutdownTime, now moved later: resume",
			with(stoppedAfter(100, nil), func(l *lifecycle) { l.now, l.ownStop = at(101), sandboxv1.ReasonShutdownTime }),
			decision{action: actResume, stoppedAt: stoppedAt(100)}},
		{"the same session, already classified: the reason stands",
			with(stoppedAfter(100, nil), func(l *lifecycle) {
				l.now, l.phase, l.ready = at(110), sandboxv1.SandboxIdle, sandboxv1.ReasonIdleTimeout
			}),
			decision{stoppedAt: stoppedAt(100), forgetPoll: true, warn: true,
				ready: &readiness{sandboxv1.SandboxIdle, metav1.ConditionFalse, sandboxv1.ReasonIdleTimeout, idleMsg}}},
		{"snapshot missing, looked at again while it should run: retry the resume",
			with(stoppedAfter(100, nil), func(l *lifecycle) {
				l.now, l.phase, l.ready = at(110), sandboxv1.SandboxFailed, sandboxv1.ReasonSnapshotMissing
			}),
			decision{action: actResume, stoppedAt: stoppedAt(100)}},
		{"snapshot missing, Vercel says not persistent: nothing to do, status and timers untouched",
			with(stoppedAfter(100, nil), func(l *lifecycle) {
				l.now, l.phase, l.ready, l.persistent, l.shutdownDelete, l.shutdown = at(110), sandboxv1.SandboxFailed, sandboxv1.ReasonSnapshotMissing, false, true, warnAt
			}),
			decision{stoppedAt: stoppedAt(100)}},

		// A stopped session between polls: what status recorded stands.
		{"resting, no heartbeat: wait, and warn of a coming shutdown that deletes",
			with(resting, func(l *lifecycle) {
				l.phase, l.ready, l.stoppedAt, l.shutdownDelete, l.shutdown = sandboxv1.SandboxIdle, sandboxv1.ReasonIdleTimeout, at(300), true, warnAt
			}),
			decision{action: actNone, warn: true, requeue: 100 * time.Second}},
		{"resting, a heartbeat newer than the stop: resume, no event",
			with(resting, func(l *lifecycle) {
				l.now, l.phase, l.ready, l.stoppedAt, l.activity = at(400), sandboxv1.SandboxIdle, sandboxv1.ReasonIdleTimeout, at(300), at(390)
			}),
			decision{action: actResume}},
		{"resting, a heartbeat older than the stop: stay",
			with(resting, func(l *lifecycle) {
				l.now, l.phase, l.ready, l.stoppedAt, l.activity = at(400), sandboxv1.SandboxIdle, sandboxv1.ReasonIdleTimeout, at(300), at(290)
			}),
			decision{warn: true}},
		{"resting after spec.state Stopped, and it says Running again: resume",
			with(resting, func(l *lifecycle) { l.phase, l.ready = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped }),
			decision{action: actResume}},
		{"resting, not persistent: never resumed",
			with(resting, func(l *lifecycle) {
				l.phase, l.ready, l.persistent = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped, false
			}),
			decision{warn: true}},
		{"resting with the snapshot missing: only a fresh look retries",
			with(resting, func(l *lifecycle) { l.phase, l.ready = sandboxv1.SandboxFailed, sandboxv1.ReasonSnapshotMissing }),
			decision{warn: true}},

		// spec.rewind (sandbox_rewind.go).
		{"rewind pending, session running: stop it as a pause, look again at once",
			with(running, func(l *lifecycle) { l.rewind = rewindPlan{pending: true, target: "snap_a"} }),
			decision{action: actStop, stopEvent: "Stopped", stopWhy: "spec.rewind asks to rewind to snapshot snap_a", requeue: minRequeue,
				ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonStopped,
					"Session sbx_sess1 stopped because spec.rewind asks to rewind to snapshot snap_a"}}},
		{"rewind pending, session stopped (fresh look): record the intent, PATCH, record it done",
			with(stoppedAfter(100, nil), func(l *lifecycle) {
				l.phase, l.ready, l.rewind = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped, rewindPlan{pending: true, target: "snap_a"}
			}),
			decision{action: actRewind, rewindStep: rewindApply}},
		{"rewind pending, Idle sandbox (fresh look): rewound without waking it",
			with(stoppedAfter(300, nil), func(l *lifecycle) {
				l.phase, l.ready, l.rewind = sandboxv1.SandboxIdle, sandboxv1.ReasonIdleTimeout, rewindPlan{pending: true, target: "snap_a"}
			}),
			decision{action: actRewind, rewindStep: rewindApply}},
		{"rewind pending, running between polls: look at Vercel first",
			with(runningFromStatus, func(l *lifecycle) { l.rewind = rewindPlan{pending: true, target: "snap_a"} }),
			decision{action: actRewind, rewindStep: rewindLook}},
		{"rewind pending, resting between polls: look at Vercel first (status may be behind a PATCH)",
			with(resting, func(l *lifecycle) {
				l.phase, l.ready, l.rewind = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped, rewindPlan{pending: true, inFlight: true, target: "snap_a"}
			}),
			decision{action: actRewind, rewindStep: rewindLook}},
		{"rewind to a snapshot it cannot use, session running: refused (Warning event), the session keeps running",
			with(running, func(l *lifecycle) {
				l.rewind = rewindPlan{pending: true, refused: "spec.rewind.snapshotID: Vercel snapshot snap_x does not exist in this Sandbox's Vercel project"}
			}),
			decision{action: actRewind, rewindStep: rewindRefuse, event: &event{corev1.EventTypeWarning, sandboxv1.ReasonRewindFailed,
				"spec.rewind.snapshotID: Vercel snapshot snap_x does not exist in this Sandbox's Vercel project"}}},
		{"rewind to a snapshot it cannot use, session stopped: refused, not applied",
			with(stoppedAfter(100, nil), func(l *lifecycle) {
				l.phase, l.ready, l.rewind = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped, rewindPlan{pending: true, refused: "spec.rewind.snapshotRef: SandboxSnapshot \"gone\" does not exist in namespace ns"}
			}),
			decision{action: actRewind, rewindStep: rewindRefuse, event: &event{corev1.EventTypeWarning, sandboxv1.ReasonRewindFailed,
				"spec.rewind.snapshotRef: SandboxSnapshot \"gone\" does not exist in namespace ns"}}},
		{"crash after the PATCH, Vercel shows it done (stopped): record it, send nothing again",
			with(stoppedAfter(100, nil), func(l *lifecycle) {
				l.phase, l.ready, l.rewind = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped, rewindPlan{pending: true, inFlight: true, applied: true, target: "snap_a"}
			}),
			decision{action: actRewind, rewindStep: rewindRecord}},
		{"crash after the PATCH and the resume, the new session runs: record it, do not stop it",
			with(running, func(l *lifecycle) {
				l.rewind = rewindPlan{pending: true, inFlight: true, applied: true, target: "snap_a"}
			}),
			decision{action: actRewind, rewindStep: rewindRecord}},
		{"crash after the intent, before the PATCH: Vercel shows the recorded snapshot, PATCH now",
			with(stoppedAfter(100, nil), func(l *lifecycle) {
				l.phase, l.ready, l.rewind = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped, rewindPlan{pending: true, inFlight: true, target: "snap_a"}
			}),
			decision{action: actRewind, rewindStep: rewindApply}},
		{"rewind waiting for its SandboxSnapshot, session running: it keeps running, Ready says why",
			with(running, func(l *lifecycle) { l.rewind = rewindPlan{pending: true, waiting: "waits"} }),
			decision{action: actRun, keep: keep, ready: runningReady,
				rewindReady: &readiness{ready: metav1.ConditionFalse, reason: sandboxv1.ReasonRewindWaiting, message: "waits"}}},
		{"rewind waiting for its SandboxSnapshot, resting: it rests, Ready says why",
			with(resting, func(l *lifecycle) {
				l.phase, l.ready, l.stopped, l.rewind = sandboxv1.SandboxStopped, sandboxv1.ReasonStopped, true, rewindPlan{pending: true, waiting: "waits"}
			}),
			decision{warn: true, rewindReady: &readiness{ready: metav1.ConditionFalse, reason: sandboxv1.ReasonRewindWaiting, message: "waits"}}},
		{"this token's rewind failed: the session goes on, Ready says why",
			with(running, func(l *lifecycle) { l.rewind = rewindPlan{failed: "failed"} }),
			decision{action: actRun, keep: keep, ready: runningReady,
				rewindReady: &readiness{ready: metav1.ConditionFalse, reason: sandboxv1.ReasonRewindFailed, message: "failed"}}},
		{"rewind pending while the session stops: wait for the stop",
			with(observation{state: sessionStopping, fromVercel: true, sessionID: id, session: &vercel.Session{ID: id, Status: vercel.SessionStopping}},
				func(l *lifecycle) { l.rewind = rewindPlan{pending: true, target: "snap_a"} }),
			decision{requeue: setupPoll,
				ready: &readiness{sandboxv1.SandboxStopping, metav1.ConditionFalse, sandboxv1.ReasonSessionStopped, "The session is stopping"}}},
		{"rewind pending, shutdown due with policy Delete: the deletion comes first",
			with(running, func(l *lifecycle) {
				l.shutdown, l.shutdownDelete, l.rewind = shutdownState{due: true}, true, rewindPlan{pending: true, target: "snap_a"}
			}),
			decision{action: actShutdownDelete}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.l); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decide() =\n  %s\nwant\n  %s", describe(got), describe(tc.want))
			}
		})
	}
}

// describe prints a decision with its pointers followed.
func describe(d decision) string {
	s := struct {
		decision
		Ready     any
		Event     any
		StoppedAt any
		Rewind    any
	}{decision: d}
	if d.rewindReady != nil {
		s.Rewind = *d.rewindReady
	}
	if d.ready != nil {
		s.Ready = *d.ready
	}
	if d.event != nil {
		s.Event = *d.event
	}
	if d.stoppedAt != nil {
		s.StoppedAt = d.stoppedAt.Time
	}
	return fmt.Sprintf("%+v", s)
}
