package chaos

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// poolFixture is a pool of one ready member and a Sandbox that claimed an
// earlier member (gone, its Vercel sandbox now the claimant's), all in
// their declared state; rows break one thing each.
type poolFixture struct {
	pool     sandboxv1.SandboxPool
	sbxs     []sandboxv1.Sandbox // [0] the member, [1] the claimant
	vercel   []vercel.Sandbox
	sessions []vercel.Session
	snaps    []sandboxv1.SandboxSnapshot
	deleted  []deletedObject
	ledger   poolLedger
}

func controlledBy(p *sandboxv1.SandboxPool) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: sandboxv1.GroupVersion.String(), Kind: "SandboxPool", Name: p.Name, UID: p.UID, Controller: ptr.To(true)}}
}

func newPoolFixture() *poolFixture {
	f := &poolFixture{pool: sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "chaos-1", Name: "p", UID: "uid-p", Generation: 1},
		Spec:       sandboxv1.SandboxPoolSpec{Replicas: ptr.To[int32](1)},
		Status: sandboxv1.SandboxPoolStatus{Replicas: 1, ReadyReplicas: 1, TargetReplicas: 1, ObservedGeneration: 1,
			Conditions: readyCond(true)},
	}}
	m, vm, sm := runningSandbox("p-abcde")
	m.Labels = map[string]string{sandboxv1.LabelPool: "p"}
	m.OwnerReferences = controlledBy(&f.pool)
	c, vc, sc := runningSandbox("c")
	c.Spec.PoolRef = &sandboxv1.PoolRef{Name: "p"}
	c.Status.Claim = &sandboxv1.ClaimStatus{Pool: "p", Member: "p-old", MemberUID: "uid-p-old"}
	c.Status.VercelName, vc.Name = "v-p-old", "v-p-old"
	c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: sandboxv1.ConditionClaimed, Status: metav1.ConditionTrue, Reason: sandboxv1.ReasonClaimed})
	f.sbxs = []sandboxv1.Sandbox{m, c}
	f.vercel = []vercel.Sandbox{vm, vc}
	f.sessions = []vercel.Session{sm, sc}
	return f
}

func (f *poolFixture) evaluate() *verdict {
	cl := newCluster(f.sbxs, f.snaps, nil, f.vercel, f.sessions, nil)
	cl.pools = []sandboxv1.SandboxPool{f.pool}
	for _, p := range cl.pools {
		cl.uids[p.UID] = "SandboxPool " + p.Namespace + "/" + p.Name
	}
	cl.seenMembers, cl.claimConflicts = f.ledger.snapshot()
	return evaluate(cl, f.deleted, testMaxSession)
}

func TestEvaluatePools(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(f *poolFixture)
		want   string // substring of a problem or a shared holding; "" = every target met
	}{
		{"in their declared state", func(*poolFixture) {}, ""},
		{"a pool short of its target", func(f *poolFixture) {
			f.pool.Spec.Replicas = ptr.To[int32](2)
			f.pool.Status.Conditions = readyCond(false)
		}, "SandboxPool chaos-1/p: replicas 2, status replicas 1 ready 1"},
		{"a pool short of its target says a quota caps it", func(f *poolFixture) {
			f.pool.Spec.Replicas = ptr.To[int32](2)
			f.pool.Status.Conditions = []metav1.Condition{{Type: sandboxv1.ConditionReady, Status: metav1.ConditionFalse, Reason: sandboxv1.ReasonQuotaExceeded}}
		}, ""},
		{"a pool reports ready with a surplus member", func(f *poolFixture) {
			extra, ve, se := runningSandbox("p-fghij")
			extra.Labels, extra.OwnerReferences = f.sbxs[0].Labels, f.sbxs[0].OwnerReferences
			f.sbxs, f.vercel, f.sessions = append(f.sbxs, extra), append(f.vercel, ve), append(f.sessions, se)
		}, "2 unclaimed members exist for replicas 1"},
		{"a pool's generation not observed", func(f *poolFixture) { f.pool.Generation = 2 }, "observedGeneration 1 of generation 2"},
		{"a member from an old snapshot", func(f *poolFixture) {
			f.snaps = []sandboxv1.SandboxSnapshot{{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos-1", Name: "s", UID: "uid-s"},
				Status: sandboxv1.SandboxSnapshotStatus{SnapshotID: "snap-new", ReadyToUse: true, Phase: sandboxv1.SnapshotReady, Conditions: readyCond(true)}}}
			f.pool.Spec.Template.Spec.Source.SnapshotRef = &sandboxv1.LocalObjectReference{Name: "s"}
			f.pool.Status.SnapshotID = "snap-new"
			f.sbxs[0].Status.BootedFrom = &sandboxv1.BootedFrom{SnapshotID: "snap-old"}
		}, "did not boot from the template's snapshot snap-new"},
		{"a member marked by a claimant and not handed over", func(f *poolFixture) {
			f.sbxs[0].Labels[sandboxv1.LabelClaimedBy] = "uid-x"
			f.sbxs[0].Annotations = map[string]string{sandboxv1.AnnotationClaimant: "x"}
		}, "marked for claimant x (UID uid-x), hand-over not finished"},
		{"a member whose pool is gone", func(f *poolFixture) { f.sbxs[0].OwnerReferences[0].UID = "uid-gone" }, "is gone, the member is left"},
		{"a claim that never settled", func(f *poolFixture) {
			f.sbxs[1].Status.Conditions = readyCond(true)
		}, "no Claimed condition: the claim never settled"},
		{"Claimed=True without the member recorded", func(f *poolFixture) { f.sbxs[1].Status.Claim = nil }, "Claimed=True without status.claim"},
		{"a claimed member still live and unmarked", func(f *poolFixture) {
			f.sbxs[1].Status.Claim.Member, f.sbxs[1].Status.Claim.MemberUID = f.sbxs[0].Name, string(f.sbxs[0].UID)
		}, `taken by Sandbox chaos-1/c, is live and marked claimed-by ""`},
		{"two Sandboxes name one Vercel sandbox", func(f *poolFixture) { f.sbxs[0].Status.VercelName = "v-p-old" }, "Vercel sandbox v-p-old is status.vercelName of 2 Sandboxes"},
		{"two claimants record one member", func(f *poolFixture) {
			d, vd, sd := runningSandbox("d")
			d.Spec.PoolRef, d.Status.Claim, d.Status.Conditions = f.sbxs[1].Spec.PoolRef, f.sbxs[1].Status.Claim, f.sbxs[1].Status.Conditions
			f.sbxs, f.vercel, f.sessions = append(f.sbxs, d), append(f.vercel, vd), append(f.sessions, sd)
		}, "member UID uid-p-old is in status.claim of 2 Sandboxes [chaos-1/c chaos-1/d]"},
		{"a member claimed by one Sandbox, later by another", func(f *poolFixture) {
			f.ledger.record(f.sbxs)
			other := f.sbxs[1]
			other.UID = "uid-c-2"
			f.ledger.record([]sandboxv1.Sandbox{other})
		}, "member chaos-1/p-old (UID uid-p-old) was recorded in status.claim of Sandbox chaos-1/c (UID uid-c) and of Sandbox chaos-1/c (UID uid-c-2)"},
		{"a claimed member's sandbox lives on as the claimant's", func(f *poolFixture) {
			f.deleted = []deletedObject{{kind: kindMember, namespace: "chaos-1", name: "p-old", uid: "uid-p-old", vercelName: "v-p-old"}}
		}, ""},
		{"a deleted member's sandbox left untaken", func(f *poolFixture) {
			f.deleted = []deletedObject{{kind: kindMember, namespace: "chaos-1", name: "p-old", uid: "uid-p-old", vercelName: "v-p-old"}}
			f.sbxs[1].Status.Claim.MemberUID = "uid-other"
		}, "deleted Sandbox (pool member) chaos-1/p-old: its Vercel sandbox v-p-old still exists"},
		{"a member seen during the run, gone, its sandbox still its own", func(f *poolFixture) {
			gone, vg, sg := runningSandbox("p-gone")
			gone.Labels, gone.OwnerReferences = f.sbxs[0].Labels, f.sbxs[0].OwnerReferences
			f.ledger.record([]sandboxv1.Sandbox{gone})
			f.vercel, f.sessions = append(f.vercel, vg), append(f.sessions, sg)
		}, "deleted Sandbox (pool member) chaos-1/p-gone: 1 Vercel sandboxes still carry its UID"},
		{"a deleted pool leaves a member", func(f *poolFixture) {
			f.deleted = []deletedObject{{kind: "SandboxPool", namespace: "chaos-1", name: "p", uid: "uid-p"}}
			f.pool.UID = "uid-p-2" // a new pool of the same name: the old one is gone
		}, "deleted SandboxPool chaos-1/p: its member p-abcde still exists"},
		{"a deleted pool released everything", func(f *poolFixture) {
			f.deleted = []deletedObject{{kind: "SandboxPool", namespace: "chaos-1", name: "p-old-pool", uid: "uid-old-pool"}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPoolFixture()
			tc.mutate(f)
			v := f.evaluate()
			problems := strings.Join(append(append(append([]string{}, v.notConverged...), v.shared...), v.unownedSandboxes...), "\n")
			switch {
			case tc.want == "" && !v.ok():
				t.Fatalf("targets missed:\n%s", problems)
			case tc.want != "" && (v.ok() || !strings.Contains(problems, tc.want)):
				t.Fatalf("got:\n%s\nwant a problem with %q", problems, tc.want)
			}
		})
	}
}

// Members and claimants get rows of their own in the table.
func TestEvaluatePoolKinds(t *testing.T) {
	v := newPoolFixture().evaluate()
	for _, k := range []string{kindMember, kindClaim, "SandboxPool"} {
		if c := v.perKind[k]; c != [2]int{1, 1} {
			t.Errorf("%s: %v, want 1/1 (%v)", k, c, v.perKind)
		}
	}
	if _, ok := v.perKind["Sandbox"]; ok {
		t.Errorf("a pool Sandbox counted as a plain Sandbox: %v", v.perKind)
	}
}

// The ledger keeps a member's Vercel name once seen, also when a later
// observation (a member being deleted) no longer shows it.
func TestPoolLedgerKeepsVercelName(t *testing.T) {
	f := newPoolFixture()
	var l poolLedger
	l.record(f.sbxs)
	m := f.sbxs[0]
	m.Status.VercelName = ""
	l.record([]sandboxv1.Sandbox{m})
	members, conflicts := l.snapshot()
	if len(members) != 1 || members[0].vercelName != "v-p-abcde" || members[0].kind != kindMember || members[0].uid != types.UID("uid-p-abcde") {
		t.Fatalf("members %+v", members)
	}
	if len(conflicts) != 0 {
		t.Fatalf("conflicts %v", conflicts)
	}
}
