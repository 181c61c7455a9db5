package controllers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// This file holds the pure decisions of a Sandbox's lifecycle: how long its
// session should live, when to extend it, why it stopped, when to wake it and
// when to look again: the pieces decide (sandbox_decide.go) is built from.
// The table tests in sandbox_lifecycle_internal_test.go pin them down.

// Defaults for the manager flags of the same meaning.
const (
	// DefaultMaxSessionLength is Vercel's maximum session length on the Pro
	// and Enterprise plans (24 h; Hobby allows 45 min).
	DefaultMaxSessionLength = 24 * time.Hour
	// DefaultShutdownWarning is how long before spec.shutdownTime the
	// ShutdownWarning event is emitted.
	DefaultShutdownWarning = 5 * time.Minute
)

const (
	// expiryGrace is how long after a session's deadline the controller looks
	// at it again to report it Idle.
	expiryGrace = time.Second
	// capSafety keeps extensions a second short of the plan maximum: status
	// times are second-truncated, and Vercel refuses any excess.
	capSafety = time.Second
	// minRequeue is the shortest timed requeue, so that a deadline that has
	// just passed does not spin.
	minRequeue = 100 * time.Millisecond
)

// keepAlive is what decides a running session's deadline.
type keepAlive struct {
	start    time.Time     // when the session started
	deadline time.Time     // its current Vercel deadline
	activity time.Time     // the client's latest heartbeat; zero when none
	idle     time.Duration // spec.timeoutSeconds
	max      time.Duration // the plan's maximum session length
}

// desired is the deadline the session should have: timeoutSeconds past the
// latest of its start and the last heartbeat, but never past the plan maximum.
func (k keepAlive) desired() time.Time {
	from := k.start
	if k.activity.After(from) {
		from = k.activity
	}
	d := from.Add(k.idle)
	if limit := k.limit(); k.max > 0 && d.After(limit) {
		d = limit
	}
	return d
}

// capped is k with the current deadline as the limit: Vercel refused to move
// it further.
func (k keepAlive) capped() keepAlive {
	k.max = k.deadline.Sub(k.start) + capSafety
	return k
}

// limit is the latest deadline the plan allows.
func (k keepAlive) limit() time.Time { return k.start.Add(k.max - capSafety) }

// wanted is how much the deadline still has to grow, in whole seconds (Vercel
// extends by at least one second); 0 when it is far enough already.
func (k keepAlive) wanted() time.Duration {
	want := k.desired().Sub(k.deadline)
	if want <= 0 {
		return 0
	}
	want = (want + time.Second - 1).Truncate(time.Second)
	if k.max > 0 {
		room := k.limit().Sub(k.deadline).Truncate(time.Second)
		want = min(want, room)
	}
	if want < time.Second {
		return 0
	}
	return want
}

// extendMargin is how long before the deadline an extension is made. Making it
// late (rather than on every heartbeat) folds all heartbeats of one window
// into one extend call.
func extendMargin(idle time.Duration) time.Duration {
	return min(max(idle/3, time.Second), time.Minute)
}

// extension is how much to extend the session by now; 0 means not now.
func (k keepAlive) extension(now time.Time) time.Duration {
	if now.Before(k.deadline.Add(-extendMargin(k.idle))) {
		return 0
	}
	return k.wanted()
}

// duringSetup is k while a setup command runs, and how much to extend the
// session by now. The command counts as activity until the controller looks
// at it again, poll from now, so the deadline stays an idle window past that
// look; the extension is made a poll earlier than for a heartbeat, because
// the look that would make it comes only every poll.
func (k keepAlive) duringSetup(now time.Time, poll time.Duration) (keepAlive, time.Duration) {
	if at := now.Add(poll); at.After(k.activity) {
		k.activity = at
	}
	if now.Before(k.deadline.Add(-extendMargin(k.idle) - poll)) {
		return k, 0
	}
	return k, k.wanted()
}

// nextCheck is when the session needs attention next: shortly before its
// deadline when it is to be extended, else shortly after it, to report it Idle.
func (k keepAlive) nextCheck() time.Time {
	if k.wanted() > 0 {
		return k.deadline.Add(-extendMargin(k.idle))
	}
	return k.deadline.Add(expiryGrace)
}

// heartbeatSkew is how far ahead of the controller's clock a heartbeat may
// be before the controller rewrites it (see clampHeartbeat): clients' clocks
// drift a little, and rewriting every slightly early heartbeat would be noise.
const heartbeatSkew = time.Minute

// lastActivity parses the heartbeat annotation; a missing or malformed value
// counts as no activity, and a time after now counts as now: activity cannot
// have happened in the future, and a far-future heartbeat must not keep a
// session running (or wake it after every stop) until then.
func lastActivity(sbx *sandboxv1.Sandbox, now time.Time) time.Time {
	t, ok := parseHeartbeat(sbx)
	if !ok {
		return time.Time{}
	}
	if t.After(now) {
		return now
	}
	return t
}

func parseHeartbeat(sbx *sandboxv1.Sandbox) (time.Time, bool) {
	v, ok := sbx.Annotations[sandboxv1.AnnotationLastActivity]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// futureHeartbeat reports whether the heartbeat is more than heartbeatSkew
// ahead of now: read as now at every reconcile, it would keep the sandbox
// awake until that time, so the controller records it as now instead.
func futureHeartbeat(sbx *sandboxv1.Sandbox, now time.Time) (time.Time, bool) {
	t, ok := parseHeartbeat(sbx)
	return t, ok && t.After(now.Add(heartbeatSkew))
}

// idleWindow is spec.timeoutSeconds (300 when unset, as the CRD defaults it).
func idleWindow(sbx *sandboxv1.Sandbox) time.Duration {
	if sbx.Spec.TimeoutSeconds == nil {
		return 300 * time.Second
	}
	return time.Duration(*sbx.Spec.TimeoutSeconds) * time.Second
}

// shutdownState says where a Sandbox stands with spec.shutdownTime.
type shutdownState struct {
	due  bool      // the time has come
	warn bool      // within the warning lead time before it
	next time.Time // when either changes next; zero when never
}

func shutdownSchedule(now time.Time, at *metav1.Time, lead time.Duration) shutdownState {
	if at == nil {
		return shutdownState{}
	}
	switch warnAt := at.Add(-lead); {
	case !now.Before(at.Time):
		return shutdownState{due: true}
	case !now.Before(warnAt):
		return shutdownState{warn: true, next: at.Time}
	default:
		return shutdownState{next: warnAt}
	}
}

// stopCause classifies a session that stopped without the controller asking:
// at its deadline (IdleTimeout, or MaxSessionLength when the deadline was the
// plan maximum) or before it, which only someone else can have done: by
// taking a snapshot of it (Snapshotted) or by stopping it (SessionStopped).
func stopCause(s *vercel.Session, maxSession time.Duration) string {
	start := sessionStart(s)
	at := s.RequestedStopAt
	if at == 0 {
		at = s.StoppedAt
	}
	if start == 0 || at == 0 || at < start+s.Timeout-1000 {
		if s.SnapshottedAt > 0 {
			return sandboxv1.ReasonSnapshotted
		}
		return sandboxv1.ReasonSessionStopped
	}
	if maxSession > 0 && s.Timeout >= (maxSession-2*capSafety).Milliseconds() {
		return sandboxv1.ReasonMaxSessionLength
	}
	return sandboxv1.ReasonIdleTimeout
}

// restingReasons are the Ready reasons of a Sandbox whose session has stopped
// and which is not polled.
var restingReasons = map[string]sandboxv1.SandboxPhase{
	sandboxv1.ReasonStopped:          sandboxv1.SandboxStopped,
	sandboxv1.ReasonShutdownTime:     sandboxv1.SandboxStopped,
	sandboxv1.ReasonSessionStopped:   sandboxv1.SandboxStopped,
	sandboxv1.ReasonSnapshotted:      sandboxv1.SandboxStopped,
	sandboxv1.ReasonIdleTimeout:      sandboxv1.SandboxIdle,
	sandboxv1.ReasonMaxSessionLength: sandboxv1.SandboxIdle,
	sandboxv1.ReasonSnapshotMissing:  sandboxv1.SandboxFailed,
}

// shouldResume decides whether a stopped persistent sandbox gets a new
// session: a pause or shutdown that is lifted resumes it, an idle or outside
// stop needs a heartbeat not older than the stop.
func shouldResume(reason string, want bool, stoppedAt, activity time.Time) bool {
	if !want {
		return false
	}
	switch reason {
	case sandboxv1.ReasonStopped, sandboxv1.ReasonShutdownTime, sandboxv1.ReasonQuotaExceeded:
		return true
	case sandboxv1.ReasonIdleTimeout, sandboxv1.ReasonMaxSessionLength, sandboxv1.ReasonSessionStopped, sandboxv1.ReasonSnapshotted:
		// stoppedAt has second precision (status round-trips seconds) and a
		// heartbeat may too (`date +%FT%TZ`): one in the same second as the
		// stop counts, or a client's whole-second heartbeat right after an
		// idle stop would be ignored until the next second.
		return !activity.IsZero() && !activity.Before(stoppedAt)
	}
	return false
}

// requeueAt turns the earliest of the given times (zero ones ignored) into a
// requeue delay; no requeue when all are zero.
func requeueAt(now time.Time, times ...time.Time) time.Duration {
	var first time.Time
	for _, t := range times {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	if first.IsZero() {
		return 0
	}
	return max(first.Sub(now), minRequeue)
}

// sessionStart is when a session started in ms, or its creation while it
// has not.
func sessionStart(s *vercel.Session) int64 {
	if s.StartedAt != 0 {
		return s.StartedAt
	}
	return s.CreatedAt
}

// sessionDeadline is a session's deadline in ms: its start plus its timeout.
func sessionDeadline(s *vercel.Session) int64 {
	return sessionStart(s) + s.Timeout
}
