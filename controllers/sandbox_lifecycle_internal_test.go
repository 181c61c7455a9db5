package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func TestKeepAliveDesired(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    keepAlive
		want time.Time
	}{
		{"no heartbeat: idle window after the start", keepAlive{start: at(0), idle: 300 * time.Second, max: 24 * time.Hour}, at(300)},
		{"heartbeat: idle window after it", keepAlive{start: at(0), activity: at(100), idle: 300 * time.Second, max: 24 * time.Hour}, at(400)},
		{"heartbeat older than the start counts from the start", keepAlive{start: at(0), activity: at(-50), idle: 300 * time.Second, max: 24 * time.Hour}, at(300)},
		{"capped a second short of the plan maximum", keepAlive{start: at(0), activity: at(3500), idle: 300 * time.Second, max: time.Hour}, at(3599)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.k.desired(); !got.Equal(tc.want) {
				t.Errorf("desired() = %s, want %s", got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}

func TestKeepAliveExtension(t *testing.T) {
	const idle = 300 * time.Second // margin 60 s
	for _, tc := range []struct {
		name      string
		k         keepAlive
		now       time.Time
		want      time.Duration
		wantCheck time.Time
	}{
		{"no heartbeat: nothing to extend; look after the deadline",
			keepAlive{start: at(0), deadline: at(300), idle: idle, max: 24 * time.Hour}, at(250), 0, at(301)},
		{"heartbeat far from the deadline: not yet; check at deadline-margin",
			keepAlive{start: at(0), deadline: at(300), activity: at(100), idle: idle, max: 24 * time.Hour}, at(100), 0, at(240)},
		{"heartbeat within the margin: extend to activity+idle",
			keepAlive{start: at(0), deadline: at(300), activity: at(230), idle: idle, max: 24 * time.Hour}, at(245), 230 * time.Second, at(240)},
		{"sub-second shortfall rounds up to one second",
			keepAlive{start: at(0), deadline: at(300), activity: t0.Add(300*time.Second + 300*time.Millisecond - idle), idle: idle, max: 24 * time.Hour}, at(290), time.Second, at(240)},
		{"extension stops at the plan maximum",
			keepAlive{start: at(0), deadline: at(3500), activity: at(3450), idle: idle, max: time.Hour}, at(3460), 99 * time.Second, at(3440)},
		{"at the plan maximum: no extension, look after the deadline",
			keepAlive{start: at(0), deadline: at(3599), activity: at(3590), idle: idle, max: time.Hour}, at(3590), 0, at(3600)},
		{"short window: margin is at least one second",
			keepAlive{start: at(0), deadline: at(3), activity: at(2), idle: 3 * time.Second, max: time.Hour}, at(2), 2 * time.Second, at(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.k.extension(tc.now); got != tc.want {
				t.Errorf("extension() = %s, want %s", got, tc.want)
			}
			if got := tc.k.nextCheck(); !got.Equal(tc.wantCheck) {
				t.Errorf("nextCheck() = %s, want %s", got.Sub(t0), tc.wantCheck.Sub(t0))
			}
		})
	}
}

func TestKeepAliveDuringSetup(t *testing.T) {
	const poll = 2 * time.Second
	for _, tc := range []struct {
		name      string
		k         keepAlive
		now       time.Time
		want      time.Duration
		wantCheck time.Time
	}{
		{"long window, far from the deadline: no extension yet; check at deadline-margin",
			keepAlive{start: at(0), deadline: at(300), idle: 300 * time.Second, max: 24 * time.Hour}, at(200), 0, at(240)},
		{"long window, a poll before the margin: extend to the next look plus the window",
			keepAlive{start: at(0), deadline: at(300), idle: 300 * time.Second, max: 24 * time.Hour}, at(238), 240 * time.Second, at(240)},
		{"a heartbeat further out than the next look stands",
			keepAlive{start: at(0), deadline: at(300), activity: at(260), idle: 300 * time.Second, max: 24 * time.Hour}, at(250), 260 * time.Second, at(240)},
		{"window shorter than a poll: extended at every look, a window past the next one",
			keepAlive{start: at(0), deadline: at(3), idle: 3 * time.Second, max: time.Hour}, at(0), 2 * time.Second, at(2)},
		{"at the plan maximum: no extension",
			keepAlive{start: at(0), deadline: at(3599), idle: 300 * time.Second, max: time.Hour}, at(3590), 0, at(3600)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, got := tc.k.duringSetup(tc.now, poll)
			if got != tc.want {
				t.Errorf("duringSetup() extends by %s, want %s", got, tc.want)
			}
			if got := k.nextCheck(); !got.Equal(tc.wantCheck) {
				t.Errorf("nextCheck() = %s, want %s", got.Sub(t0), tc.wantCheck.Sub(t0))
			}
		})
	}
}

func TestExtendMargin(t *testing.T) {
	for idle, want := range map[time.Duration]time.Duration{
		time.Second:       time.Second,
		6 * time.Second:   2 * time.Second,
		300 * time.Second: time.Minute,
		time.Hour:         time.Minute,
	} {
		if got := extendMargin(idle); got != want {
			t.Errorf("extendMargin(%s) = %s, want %s", idle, got, want)
		}
	}
}

func TestStopCause(t *testing.T) {
	ms := func(s int) int64 { return at(s).UnixMilli() }
	for _, tc := range []struct {
		name string
		s    vercel.Session
		want string
	}{
		{"timed out at its deadline", vercel.Session{StartedAt: ms(0), Timeout: 300_000, RequestedStopAt: ms(300), StoppedAt: ms(301)}, sandboxv1.ReasonIdleTimeout},
		{"timed out after extensions", vercel.Session{StartedAt: ms(0), Timeout: 900_000, RequestedStopAt: ms(900)}, sandboxv1.ReasonIdleTimeout},
		{"timed out at the plan maximum", vercel.Session{StartedAt: ms(0), Timeout: 3_599_000, RequestedStopAt: ms(3599)}, sandboxv1.ReasonMaxSessionLength},
		{"stopped early by someone", vercel.Session{StartedAt: ms(0), Timeout: 300_000, RequestedStopAt: ms(120), StoppedAt: ms(121)}, sandboxv1.ReasonSessionStopped},
		{"stopped early by a snapshot", vercel.Session{StartedAt: ms(0), Timeout: 300_000, RequestedStopAt: ms(120), SnapshottedAt: ms(120)}, sandboxv1.ReasonSnapshotted},
		{"only stoppedAt known", vercel.Session{StartedAt: ms(0), Timeout: 300_000, StoppedAt: ms(300)}, sandboxv1.ReasonIdleTimeout},
		{"no times", vercel.Session{Timeout: 300_000}, sandboxv1.ReasonSessionStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stopCause(&tc.s, time.Hour); got != tc.want {
				t.Errorf("stopCause() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestShutdownSchedule(t *testing.T) {
	shutdown := &metav1.Time{Time: at(600)}
	for _, tc := range []struct {
		name string
		now  time.Time
		at   *metav1.Time
		want shutdownState
	}{
		{"none", at(0), nil, shutdownState{}},
		{"before the warning", at(0), shutdown, shutdownState{next: at(300)}},
		{"within the warning", at(300), shutdown, shutdownState{warn: true, next: at(600)}},
		{"due", at(600), shutdown, shutdownState{due: true}},
		{"long past", at(9000), shutdown, shutdownState{due: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shutdownSchedule(tc.now, tc.at, 5*time.Minute); got != tc.want {
				t.Errorf("shutdownSchedule() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestShouldResume(t *testing.T) {
	stopped := at(100)
	for _, tc := range []struct {
		reason   string
		want     bool
		activity time.Time
		resume   bool
	}{
		{sandboxv1.ReasonStopped, true, time.Time{}, true},
		{sandboxv1.ReasonStopped, false, at(200), false},
		{sandboxv1.ReasonShutdownTime, true, time.Time{}, true},
		{sandboxv1.ReasonIdleTimeout, true, time.Time{}, false},
		{sandboxv1.ReasonIdleTimeout, true, at(50), false},
		{sandboxv1.ReasonIdleTimeout, true, at(100), true}, // same second as the stop
		{sandboxv1.ReasonIdleTimeout, true, at(100).Add(-time.Millisecond), false},
		{sandboxv1.ReasonIdleTimeout, true, at(101), true},
		{sandboxv1.ReasonMaxSessionLength, true, at(101), true},
		{sandboxv1.ReasonSessionStopped, true, at(101), true},
		{sandboxv1.ReasonSessionStopped, false, at(101), false},
		{sandboxv1.ReasonSnapshotted, true, at(99), false},
		{sandboxv1.ReasonSnapshotted, true, at(101), true},
		{sandboxv1.ReasonSnapshotMissing, true, at(101), false},
	} {
		if got := shouldResume(tc.reason, tc.want, stopped, tc.activity); got != tc.resume {
			t.Errorf("shouldResume(%s, want=%v, activity=%s) = %v, want %v", tc.reason, tc.want, tc.activity.Sub(t0), got, tc.resume)
		}
	}
}

func TestRequeueAt(t *testing.T) {
	if got := requeueAt(at(0)); got != 0 {
		t.Errorf("no times: %s, want 0", got)
	}
	if got := requeueAt(at(0), time.Time{}, at(30), at(10)); got != 10*time.Second {
		t.Errorf("earliest: %s, want 10s", got)
	}
	if got := requeueAt(at(0), at(-5)); got != minRequeue {
		t.Errorf("past: %s, want %s", got, minRequeue)
	}
}

func TestLastActivity(t *testing.T) {
	now := t0.Add(time.Hour)
	sbx := &sandboxv1.Sandbox{}
	if !lastActivity(sbx, now).IsZero() {
		t.Error("no annotation must be no activity")
	}
	sbx.Annotations = map[string]string{sandboxv1.AnnotationLastActivity: "not a time"}
	if !lastActivity(sbx, now).IsZero() {
		t.Error("a malformed heartbeat must count as no activity")
	}
	sbx.Annotations[sandboxv1.AnnotationLastActivity] = "2026-11-29T12:00:05.5Z"
	if got := lastActivity(sbx, now); !got.Equal(t0.Add(5500 * time.Millisecond)) {
		t.Errorf("lastActivity = %s", got)
	}
	if _, future := futureHeartbeat(sbx, now); future {
		t.Error("a past heartbeat is not in the future")
	}
	for _, tc := range []struct {
		ahead  time.Duration
		future bool // rewritten by the controller
	}{{time.Second, false}, {heartbeatSkew, false}, {heartbeatSkew + time.Second, true}, {100 * 365 * 24 * time.Hour, true}} {
		sbx.Annotations[sandboxv1.AnnotationLastActivity] = now.Add(tc.ahead).Format(time.RFC3339)
		if got := lastActivity(sbx, now); !got.Equal(now) {
			t.Errorf("a heartbeat %s ahead: lastActivity = %s, want now (%s)", tc.ahead, got, now)
		}
		if _, future := futureHeartbeat(sbx, now); future != tc.future {
			t.Errorf("a heartbeat %s ahead: futureHeartbeat = %t, want %t", tc.ahead, future, tc.future)
		}
	}
}

// A far-future heartbeat must not keep a session past its idle window, nor
// wake it after an idle stop: read as now, it is as old as the reconcile.
func TestFutureHeartbeatIdles(t *testing.T) {
	sbx := &sandboxv1.Sandbox{}
	sbx.Annotations = map[string]string{sandboxv1.AnnotationLastActivity: "2999-01-01T00:00:00Z"}
	start, idle := t0, 5*time.Minute
	now := start.Add(time.Minute)
	k := keepAlive{start: start, deadline: start.Add(idle), activity: lastActivity(sbx, now), idle: idle, max: 24 * time.Hour}
	if got, want := k.desired(), now.Add(idle); !got.Equal(want) {
		t.Errorf("desired deadline = %s, want %s (idle window after now)", got, want)
	}
	// The controller rewrites it to the time it saw it (clampHeartbeat); a
	// reconcile after the idle stop then finds an old heartbeat.
	if _, future := futureHeartbeat(sbx, now); !future {
		t.Fatal("a heartbeat in 2999 must be rewritten")
	}
	sbx.Annotations[sandboxv1.AnnotationLastActivity] = now.Format(time.RFC3339)
	stoppedAt := now.Add(idle)
	later := stoppedAt.Add(time.Hour)
	if shouldResume(sandboxv1.ReasonIdleTimeout, true, stoppedAt, lastActivity(sbx, later)) {
		t.Error("the rewritten heartbeat must not resume the sandbox after its idle stop")
	}
}
