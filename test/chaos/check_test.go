package chaos

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

const testMaxSession = 24*3600*1000 - 1000

func readyCond(ok bool) []metav1.Condition {
	s := metav1.ConditionTrue
	if !ok {
		s = metav1.ConditionFalse
	}
	return []metav1.Condition{{Type: sandboxv1.ConditionReady, Status: s, Reason: "R"}, {Type: sandboxv1.ConditionSynced, Status: metav1.ConditionTrue, Reason: "Reconciled"}}
}

// runningSandbox is a Sandbox declared Running and its Vercel side, both in
// their declared state.
func runningSandbox(name string) (sandboxv1.Sandbox, vercel.Sandbox, vercel.Session) {
	uid := types.UID("uid-" + name)
	s := sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: "chaos-1", Name: name, UID: uid, Generation: 2},
		Spec:       sandboxv1.SandboxSpec{TimeoutSeconds: ptr.To[int64](60)},
		Status: sandboxv1.SandboxStatus{Phase: sandboxv1.SandboxRunning, ObservedGeneration: 2, VercelName: "v-" + name,
			SessionID: "sess-" + name, Conditions: readyCond(true)},
	}
	v := vercel.Sandbox{Name: "v-" + name, CurrentSessionID: "sess-" + name, Status: vercel.SessionRunning, Timeout: 60000,
		Tags: map[string]string{tagOwnerUID: string(uid)}, NetworkPolicy: &vercel.NetworkPolicy{Mode: vercel.NetworkAllowAll}}
	sess := vercel.Session{ID: "sess-" + name, Status: vercel.SessionRunning, SourceSandboxName: "v-" + name}
	return s, v, sess
}

func newCluster(sbxs []sandboxv1.Sandbox, snaps []sandboxv1.SandboxSnapshot, forks []sandboxv1.SandboxFork, vs []vercel.Sandbox, sessions []vercel.Session, vsnaps []vercel.Snapshot) *cluster {
	cl := &cluster{sandboxes: sbxs, snapshots: snaps, forks: forks, vercel: vs, vsnaps: vsnaps,
		namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "chaos-1", UID: "ns-uid"}}},
		sessions:   map[string]vercel.Session{}, vsnapByID: map[string]vercel.Snapshot{},
		byUID: map[types.UID][]vercel.Sandbox{}, uids: map[types.UID]string{}}
	for _, s := range sbxs {
		cl.uids[s.UID] = "Sandbox " + s.Namespace + "/" + s.Name
	}
	for _, s := range snaps {
		cl.uids[s.UID] = "SandboxSnapshot " + s.Namespace + "/" + s.Name
	}
	for _, f := range forks {
		cl.uids[f.UID] = "SandboxFork " + f.Namespace + "/" + f.Name
	}
	for _, s := range sessions {
		cl.sessions[s.ID] = s
	}
	for _, s := range vsnaps {
		cl.vsnapByID[s.ID] = s
	}
	for _, v := range vs {
		if uid := v.Tags[tagOwnerUID]; uid != "" {
			cl.byUID[types.UID(uid)] = append(cl.byUID[types.UID(uid)], v)
		}
	}
	return cl
}

func TestEvaluateSandboxes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(s *sandboxv1.Sandbox, v *vercel.Sandbox, sess *vercel.Session)
		want   string // substring of the problem; "" = converged
	}{
		{"in its declared state", func(*sandboxv1.Sandbox, *vercel.Sandbox, *vercel.Session) {}, ""},
		{"not Ready", func(s *sandboxv1.Sandbox, _ *vercel.Sandbox, _ *vercel.Session) {
			s.Status.Conditions = readyCond(false)
		}, "declared Running"},
		{"generation not applied", func(s *sandboxv1.Sandbox, _ *vercel.Sandbox, _ *vercel.Session) { s.Generation = 3 }, "observedGeneration 2 of generation 3"},
		{"Synced=False", func(s *sandboxv1.Sandbox, _ *vercel.Sandbox, _ *vercel.Session) {
			s.Status.Conditions[1].Status, s.Status.Conditions[1].Reason = metav1.ConditionFalse, "NotFound"
		}, "Synced=False NotFound"},
		{"another session runs", func(_ *sandboxv1.Sandbox, v *vercel.Sandbox, _ *vercel.Session) { v.CurrentSessionID = "other" }, "has session other"},
		{"timeout not applied", func(_ *sandboxv1.Sandbox, v *vercel.Sandbox, _ *vercel.Session) { v.Timeout = 300000 }, "timeout 300000 ms"},
		{"policy kept for next sessions", func(_ *sandboxv1.Sandbox, v *vercel.Sandbox, _ *vercel.Session) {
			v.NetworkPolicy = &vercel.NetworkPolicy{Mode: vercel.NetworkCustom}
		}, "has custom for its next sessions"},
		{"policy of the running session", func(_ *sandboxv1.Sandbox, _ *vercel.Sandbox, sess *vercel.Session) {
			sess.NetworkPolicy = &vercel.NetworkPolicy{Mode: vercel.NetworkDenyAll}
		}, "running session sess-a has deny-all"},
		{"injection means custom", func(s *sandboxv1.Sandbox, v *vercel.Sandbox, _ *vercel.Session) {
			s.Spec.NetworkPolicy = &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowAll, InjectHeaders: []sandboxv1.HeaderInjection{{Domain: "x.example"}}}
			v.NetworkPolicy = &vercel.NetworkPolicy{Mode: vercel.NetworkCustom}
		}, ""},
		{"declared Stopped and stopped", func(s *sandboxv1.Sandbox, v *vercel.Sandbox, _ *vercel.Session) {
			s.Spec.State, s.Status.Phase, s.Status.Conditions = sandboxv1.SandboxStateStopped, sandboxv1.SandboxStopped, readyCond(false)
			v.Status = vercel.SessionStopped
		}, ""},
		{"declared Stopped but running in Vercel", func(s *sandboxv1.Sandbox, _ *vercel.Sandbox, _ *vercel.Session) {
			s.Spec.State, s.Status.Phase, s.Status.Conditions = sandboxv1.SandboxStateStopped, sandboxv1.SandboxStopped, readyCond(false)
		}, "has a running session"},
		{"no Vercel sandbox", func(_ *sandboxv1.Sandbox, v *vercel.Sandbox, _ *vercel.Session) { v.Tags = nil }, "0 Vercel sandboxes tagged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, v, sess := runningSandbox("a")
			tc.mutate(&s, &v, &sess)
			got := evaluate(newCluster([]sandboxv1.Sandbox{s}, nil, nil, []vercel.Sandbox{v}, []vercel.Session{sess}, nil), nil, testMaxSession)
			switch {
			case tc.want == "" && got.converged != 1:
				t.Fatalf("not converged: %v", got.notConverged)
			case tc.want != "" && (got.converged != 0 || !strings.Contains(strings.Join(got.notConverged, "\n"), tc.want)):
				t.Fatalf("got %v, want a problem with %q", got.notConverged, tc.want)
			}
		})
	}
}

func TestEvaluateLeaksAndDeletions(t *testing.T) {
	a, va, sa := runningSandbox("a")
	stray := vercel.Sandbox{Name: "stray", Tags: map[string]string{tagOwnerUID: "gone"}}
	dup := va
	dup.Name = "v-a-again"
	builder := vercel.Sandbox{Name: "chaos-1-build-abc-0", Tags: map[string]string{tagContentHash: "abc", tagOwnerUID: "uid-r"}}
	building := sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos-1", Name: "r", UID: "uid-r",
		Labels: map[string]string{sandboxv1.LabelContentHash: "abc"}}}
	recorded := sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos-1", Name: "s", UID: "uid-s"},
		Status: sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap-rec", ReadyToUse: true, Phase: sandboxv1.SnapshotReady, Conditions: readyCond(true)}}
	vsnaps := []vercel.Snapshot{
		{ID: "snap-rec", Status: vercel.SnapshotCreated, CreationMethod: "manual"},
		{ID: "snap-auto", Status: vercel.SnapshotCreated, CreationMethod: "automatic", SourceSessionID: sa.ID},
		{ID: "snap-orphan-auto", Status: vercel.SnapshotCreated, CreationMethod: "automatic", SourceSessionID: "dead-session"},
		{ID: "snap-orphan-manual", Status: vercel.SnapshotCreated, CreationMethod: "manual", SourceSessionID: sa.ID},
		{ID: "snap-deleted", Status: vercel.SnapshotDeleted, CreationMethod: "manual"},
	}
	terminating := a
	terminating.Name, terminating.UID = "t", "uid-t"
	terminating.DeletionTimestamp = ptr.To(metav1.Now())
	cl := newCluster([]sandboxv1.Sandbox{a, terminating}, []sandboxv1.SandboxSnapshot{building, recorded}, nil,
		[]vercel.Sandbox{va, stray, dup, builder}, []vercel.Session{sa}, vsnaps)
	deleted := []deletedObject{
		{kind: "Sandbox", namespace: "chaos-1", name: "t", uid: "uid-t"},                                 // still Terminating
		{kind: "Sandbox", namespace: "chaos-1", name: "x", uid: "gone"},                                  // its Vercel sandbox is left
		{kind: "Sandbox", namespace: "chaos-1", name: "y", uid: "uid-y"},                                 // gone everywhere
		{kind: "Namespace", name: "chaos-1", uid: "ns-uid"},                                              // still there
		{kind: "SandboxSnapshot", namespace: "chaos-1", name: "z", uid: "uid-z", snapshotID: "snap-rec"}, // shared, kept
	}
	v := evaluate(cl, deleted, testMaxSession)
	if got := strings.Join(v.unownedSandboxes, "\n"); len(v.unownedSandboxes) != 1 || !strings.Contains(got, "stray") {
		t.Errorf("unowned sandboxes %v, want only stray (the builder's hash is building)", v.unownedSandboxes)
	}
	if got := strings.Join(v.unownedSnapshots, "\n"); len(v.unownedSnapshots) != 2 || !strings.Contains(got, "snap-orphan-auto") || !strings.Contains(got, "snap-orphan-manual") {
		t.Errorf("unowned snapshots %v, want snap-orphan-auto and snap-orphan-manual", v.unownedSnapshots)
	}
	if len(v.duplicates) != 1 || !strings.Contains(v.duplicates[0], "Sandbox chaos-1/a: 2 Vercel sandboxes") {
		t.Errorf("duplicates %v", v.duplicates)
	}
	if len(v.terminating) != 1 || !strings.Contains(v.terminating[0], "Sandbox chaos-1/t") {
		t.Errorf("terminating %v", v.terminating)
	}
	notConv := strings.Join(v.notConverged, "\n")
	for _, want := range []string{"deleted Sandbox chaos-1/t: still in Kubernetes", "deleted Sandbox chaos-1/x: 1 Vercel sandboxes still carry its UID",
		"deleted Namespace chaos-1: namespace still exists", "Sandbox chaos-1/a: 2 Vercel sandboxes tagged"} {
		if !strings.Contains(notConv, want) {
			t.Errorf("not converged:\n%s\nwant %q", notConv, want)
		}
	}
	for _, ok := range []string{"chaos-1/y", "chaos-1/z"} {
		if strings.Contains(notConv, ok) {
			t.Errorf("%s is reported not converged:\n%s", ok, notConv)
		}
	}

	// Once the recipe is ready, its builder has no owner.
	building.Status = sandboxv1.SandboxSnapshotStatus{ReadyToUse: true}
	cl = newCluster(nil, []sandboxv1.SandboxSnapshot{building}, nil, []vercel.Sandbox{builder}, nil, nil)
	if v := evaluate(cl, nil, testMaxSession); len(v.unownedSandboxes) != 1 {
		t.Errorf("a builder of a ready recipe: unowned %v", v.unownedSandboxes)
	}
}

func TestEvaluateFork(t *testing.T) {
	f := sandboxv1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos-1", Name: "f", UID: "uid-f", Generation: 1},
		Spec:   sandboxv1.SandboxForkSpec{Replicas: ptr.To[int32](1)},
		Status: sandboxv1.SandboxForkStatus{Phase: sandboxv1.ForkReady, Replicas: 1, ReadyReplicas: 1, ObservedGeneration: 1, Conditions: readyCond(true)}}
	child, vc, sc := runningSandbox("f-0")
	child.OwnerReferences = []metav1.OwnerReference{{UID: "uid-f", Controller: ptr.To(true), Kind: "SandboxFork", Name: "f"}}
	extra, ve, se := runningSandbox("f-1")
	extra.OwnerReferences = child.OwnerReferences
	cl := newCluster([]sandboxv1.Sandbox{child}, nil, []sandboxv1.SandboxFork{f}, []vercel.Sandbox{vc}, []vercel.Session{sc}, nil)
	if v := evaluate(cl, nil, testMaxSession); v.converged != v.objects || v.objects != 2 {
		t.Fatalf("fork with its child: %d/%d %v", v.converged, v.objects, v.notConverged)
	}
	cl = newCluster([]sandboxv1.Sandbox{child, extra}, nil, []sandboxv1.SandboxFork{f}, []vercel.Sandbox{vc, ve}, []vercel.Session{sc, se}, nil)
	if v := evaluate(cl, nil, testMaxSession); !strings.Contains(strings.Join(v.notConverged, "\n"), "2 child Sandboxes exist for replicas 1") {
		t.Fatalf("a surplus child: %v", v.notConverged)
	}
}

// A declaration the API server refuses is a missed target: the workload only
// declares what is valid (a cost-limited admission policy once refused every
// Sandbox with three Secret references, and the soak only listed them).
func TestRefusalsAreMissed(t *testing.T) {
	r := &Report{Verdict: &verdict{}}
	if m := r.Missed(); len(m) != 0 {
		t.Fatalf("empty report missed %v", m)
	}
	r.Refused = []string{"create Sandbox sbx-3: forbidden"}
	m := r.Missed()
	if len(m) != 1 || !strings.Contains(m[0], "1 workload declarations were refused") {
		t.Fatalf("Missed() = %v, want the refusal", m)
	}
}
