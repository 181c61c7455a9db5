package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func TestRefusal(t *testing.T) {
	quota := func(name string, hard sandboxv1.SandboxQuotaResources) sandboxv1.SandboxQuota {
		return sandboxv1.SandboxQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: sandboxv1.SandboxQuotaSpec{Hard: hard}}
	}
	running5 := quota("running", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](5)})
	vcpus8 := quota("vcpus", sandboxv1.SandboxQuotaResources{RunningVCPUs: ptr.To[int64](8)})
	objects3 := quota("objects", sandboxv1.SandboxQuotaResources{Sandboxes: ptr.To[int64](3)})
	create := usage{sandboxes: 1, running: 1, vcpus: 2}
	resume := usage{running: 1, vcpus: 2}
	for _, tc := range []struct {
		name              string
		quotas            []sandboxv1.SandboxQuota
		used, ahead, need usage
		want              string // substring of the refusal; "" admits
	}{
		{name: "no quota", need: create},
		{name: "room", quotas: []sandboxv1.SandboxQuota{running5}, used: usage{running: 4}, need: create},
		{name: "full", quotas: []sandboxv1.SandboxQuota{running5}, used: usage{running: 5}, need: create, want: "SandboxQuota running allows runningSandboxes 5"},
		{name: "room owed to earlier waiters", quotas: []sandboxv1.SandboxQuota{running5}, used: usage{running: 3}, ahead: usage{running: 2}, need: create, want: "runningSandboxes 5"},
		{name: "room beyond earlier waiters", quotas: []sandboxv1.SandboxQuota{running5}, used: usage{running: 2}, ahead: usage{running: 2}, need: create},
		{name: "vCPUs", quotas: []sandboxv1.SandboxQuota{vcpus8}, used: usage{vcpus: 8}, need: resume, want: "SandboxQuota vcpus allows runningVCPUs 8"},
		{name: "a resume needs no new sandbox", quotas: []sandboxv1.SandboxQuota{objects3}, used: usage{sandboxes: 3}, need: resume},
		{name: "a create does", quotas: []sandboxv1.SandboxQuota{objects3}, used: usage{sandboxes: 3}, need: create, want: "allows sandboxes 3"},
		{name: "every quota applies", quotas: []sandboxv1.SandboxQuota{running5, vcpus8}, used: usage{running: 1, vcpus: 8}, need: create, want: "runningVCPUs 8"},
		{name: "a zero limit refuses", quotas: []sandboxv1.SandboxQuota{quota("none", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](0)})}, need: create, want: "runningSandboxes 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := refusal(tc.quotas, tc.used, tc.ahead, tc.need, "Sandbox")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("refusal = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHoldingOf(t *testing.T) {
	sbx := func(session string, phase sandboxv1.SandboxPhase) *sandboxv1.Sandbox {
		return &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: "u"},
			Spec:   sandboxv1.SandboxSpec{Resources: &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](4)}},
			Status: sandboxv1.SandboxStatus{SessionID: session, Phase: phase}}
	}
	for _, tc := range []struct {
		s                   *sandboxv1.Sandbox
		holds, remote, runs bool
	}{
		{s: sbx("", sandboxv1.SandboxPending)},
		{s: sbx("sess", sandboxv1.SandboxCreating), holds: true, remote: true, runs: true},
		{s: sbx("sess", sandboxv1.SandboxRunning), holds: true, remote: true, runs: true},
		{s: sbx("sess", sandboxv1.SandboxStopping), holds: true, remote: true, runs: true},
		{s: sbx("sess", sandboxv1.SandboxStopped), holds: true, remote: true},
		{s: sbx("sess", sandboxv1.SandboxIdle), holds: true, remote: true},
		{s: sbx("sess", sandboxv1.SandboxFailed), holds: true, remote: true},
	} {
		h, ok := holdingOf(tc.s)
		if ok != tc.holds || h.remote != tc.remote || h.running != tc.runs || ok && h.vcpus != 4 {
			t.Errorf("holdingOf(session %q, phase %s) = %+v, %v", tc.s.Status.SessionID, tc.s.Status.Phase, h, ok)
		}
	}
}

// A session counts the vCPUs it was started with, not the spec's next ones.
func TestHoldingOfCountsTheSessionsVCPUs(t *testing.T) {
	sbx := func(spec int32, session int32) *sandboxv1.Sandbox {
		return &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: "u"},
			Spec:   sandboxv1.SandboxSpec{Resources: &sandboxv1.SandboxResources{VCPUs: ptr.To(spec)}},
			Status: sandboxv1.SandboxStatus{SessionID: "sess", Phase: sandboxv1.SandboxRunning, SessionVCPUs: session}}
	}
	for _, tc := range []struct {
		name          string
		spec, session int32
		want          int64
	}{
		{"spec lowered while it runs", 1, 4, 4},
		{"spec raised while it runs", 8, 2, 2},
		{"unchanged", 4, 4, 4},
		{"not recorded (adopted, or started before the field): the spec", 4, 0, 4},
	} {
		if h, _ := holdingOf(sbx(tc.spec, tc.session)); h.vcpus != tc.want {
			t.Errorf("%s: vcpus %d, want %d", tc.name, h.vcpus, tc.want)
		}
	}
}

func TestBuilderHeld(t *testing.T) {
	snap := func(b *sandboxv1.SnapshotBuildStatus, reason string) *sandboxv1.SandboxSnapshot {
		s := &sandboxv1.SandboxSnapshot{Status: sandboxv1.SandboxSnapshotStatus{Build: b}}
		if reason != "" {
			s.Status.Conditions = []metav1.Condition{{Type: sandboxv1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason}}
		}
		return s
	}
	for _, tc := range []struct {
		name string
		s    *sandboxv1.SandboxSnapshot
		want string
	}{
		{"no build", snap(nil, ""), ""},
		{"building", snap(&sandboxv1.SnapshotBuildStatus{BuilderName: "ns-build-x"}, sandboxv1.ReasonBuilding), "ns-build-x"},
		{"waiting for quota still names it", snap(&sandboxv1.SnapshotBuildStatus{BuilderName: "ns-build-x"}, sandboxv1.ReasonQuotaExceeded), "ns-build-x"},
		{"failed: its builder is deleted", snap(&sandboxv1.SnapshotBuildStatus{BuilderName: "ns-build-x", Failed: true}, sandboxv1.ReasonBuildFailed), ""},
		{"a follower", snap(&sandboxv1.SnapshotBuildStatus{BuilderName: "ns-build-x", SharedWith: "other"}, sandboxv1.ReasonBuilding), ""},
		{"a foreign sandbox holds the name", snap(&sandboxv1.SnapshotBuildStatus{BuilderName: "ns-build-x"}, sandboxv1.ReasonNameConflict), ""},
		{"built: the builder is deleted", snap(&sandboxv1.SnapshotBuildStatus{}, ""), ""},
	} {
		if got := builderHeld(tc.s); got != tc.want {
			t.Errorf("%s: builderHeld = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestBefore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := claim{name: "b", created: t0}
	if !before(t0.Add(-time.Second), "z", b) || before(t0.Add(time.Second), "a", b) {
		t.Error("creation time must decide first")
	}
	if !before(t0, "a", b) || before(t0, "c", b) {
		t.Error("the name must break ties")
	}
}

// A resume the quota refused stays wanted: the next decision, from status or
// from a fresh look at the same stopped session, resumes again, unless the
// spec no longer wants it running.
func TestDecideResumesAfterQuota(t *testing.T) {
	const id = "sbx_sess1"
	now := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	waiting := lifecycle{now: now, idle: 300 * time.Second, maxSession: 24 * time.Hour, name: "ns-box", phase: sandboxv1.SandboxIdle,
		hadSession: true, ready: sandboxv1.ReasonQuotaExceeded, persistent: true, stoppedAt: now.Add(-5 * time.Minute)}
	fromStatus := waiting
	fromStatus.obs = observation{state: sessionStopped, sessionID: id, sameSession: true}
	fresh := waiting
	fresh.obs = observation{state: sessionStopped, fromVercel: true, sessionID: id, sameSession: true,
		session: &vercel.Session{ID: id, Status: vercel.SessionStopped, StartedAt: now.Add(-10 * time.Minute).UnixMilli(), Timeout: 300_000,
			StoppedAt: now.Add(-5 * time.Minute).UnixMilli()}}
	stopped := fresh
	stopped.stopped = true
	for name, tc := range map[string]struct {
		l    lifecycle
		want action
	}{
		"from status":        {fromStatus, actResume},
		"fresh look":         {fresh, actResume},
		"spec.state Stopped": {stopped, actNone},
	} {
		if got := decide(tc.l); got.action != tc.want {
			t.Errorf("%s: action %v, want %v (%+v)", name, got.action, tc.want, got)
		}
	}
}
