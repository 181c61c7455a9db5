package chaos

// The checks of warm pools (issue 32 item 7): members never leak, never go
// to two claimants, and a deleted pool releases what it holds. They judge
// the same single observation as check.go, plus what the harness saw of
// members and claims during the run (poolLedger): members come and go
// between two observations, a claim that moved a member twice would leave
// no trace in the last one.

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Kinds of the table's rows for pool Sandboxes.
const (
	kindMember = "Sandbox (pool member)"
	kindClaim  = "Sandbox (claim)"
)

// sandboxKind is a Sandbox's row in the table, with what the pool checks
// find wrong with a member or a claim.
func sandboxKind(cl *cluster, s *sandboxv1.Sandbox) (kind, problem string) {
	switch {
	case s.Labels[sandboxv1.LabelFork] != "":
		return "Sandbox (fork child)", ""
	case poolOf(s) != "":
		return kindMember, memberProblem(cl, s)
	case s.Spec.PoolRef != nil:
		return kindClaim, claimProblem(cl, s)
	}
	return "Sandbox", ""
}

// poolOf is the name of the SandboxPool that controls s ("" for none).
func poolOf(s *sandboxv1.Sandbox) string {
	if ref := metav1.GetControllerOf(s); ref != nil && ref.Kind == "SandboxPool" {
		return ref.Name
	}
	return ""
}

// poolLedger is what the harness saw of pools over the run: every member
// (its last record, for the deletion checks) and, for every member a
// claimant recorded in status.claim, the first claimant; a second claimant
// of the same member is a conflict. Zero value ready to use.
type poolLedger struct {
	mu        sync.Mutex
	members   map[types.UID]deletedObject
	claims    map[string]claimSeen // member UID -> first claimant
	conflicts map[string]bool
}

type claimSeen struct {
	uid  types.UID
	name string // ns/name
}

// record notes the members and claims of one observation.
func (l *poolLedger) record(sbxs []sandboxv1.Sandbox) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.members == nil {
		l.members, l.claims, l.conflicts = map[types.UID]deletedObject{}, map[string]claimSeen{}, map[string]bool{}
	}
	for i := range sbxs {
		s := &sbxs[i]
		if !isChaosNS(s.Namespace) {
			continue
		}
		if poolOf(s) != "" {
			rec := recordOf(s)
			if rec.vercelName == "" {
				rec.vercelName = l.members[s.UID].vercelName
			}
			l.members[s.UID] = rec
		}
		c := s.Status.Claim
		if c == nil || c.MemberUID == "" {
			continue
		}
		key := s.Namespace + "/" + s.Name
		switch first, ok := l.claims[c.MemberUID]; {
		case !ok:
			l.claims[c.MemberUID] = claimSeen{uid: s.UID, name: key}
		case first.uid != s.UID:
			l.conflicts[fmt.Sprintf("member %s/%s (UID %s) was recorded in status.claim of Sandbox %s (UID %s) and of Sandbox %s (UID %s)",
				s.Namespace, c.Member, c.MemberUID, first.name, first.uid, key, s.UID)] = true
		}
	}
}

// snapshot is the members seen and the claim conflicts, in a stable order.
func (l *poolLedger) snapshot() ([]deletedObject, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	members := make([]deletedObject, 0, len(l.members))
	for _, m := range l.members {
		members = append(members, m)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key() < members[j].key() })
	conflicts := make([]string, 0, len(l.conflicts))
	for c := range l.conflicts {
		conflicts = append(conflicts, c)
	}
	sort.Strings(conflicts)
	return members, conflicts
}

// evaluatePools adds the pools, the members seen during the run and gone
// since (not deleted by the workload: claimed, scaled down, replaced), and
// whatever two Sandboxes hold at once.
func evaluatePools(cl *cluster, v *verdict, deleted []deletedObject) {
	for i := range cl.pools {
		p := &cl.pools[i]
		if !p.DeletionTimestamp.IsZero() {
			v.terminating = append(v.terminating, "SandboxPool "+p.Namespace+"/"+p.Name+phaseNote("-", p.DeletionTimestamp)+conditionNote(p.Status.Conditions))
			continue
		}
		if !isChaosNS(p.Namespace) {
			continue
		}
		v.add("SandboxPool", p.Namespace+"/"+p.Name, firstProblem(poolProblem(cl, p), syncedProblem(p.Status.Conditions)))
	}
	recorded := map[types.UID]bool{}
	for _, d := range deleted {
		recorded[d.uid] = true
	}
	for _, m := range cl.seenMembers {
		if _, live := cl.uids[m.uid]; !live && !recorded[m.uid] {
			v.add("deleted "+m.kind, m.namespace+"/"+m.name, deletedProblem(cl, m))
		}
	}
	v.shared = append(v.shared, sharedHoldings(cl)...)
	v.shared = append(v.shared, cl.claimConflicts...)
}

// poolProblem: a pool holds spec.replicas (the policy's target when it has
// one) unclaimed members, all claimable, and reports so (status replicas and
// readyReplicas, Ready=True, the current generation observed); members of a
// snapshotRef template boot from the snapshot's current Vercel id. A pool
// short of its target has converged only when its Ready condition says why
// with QuotaExceeded (a SandboxQuota caps it, docs/sandboxpool.md).
func poolProblem(cl *cluster, p *sandboxv1.SandboxPool) string {
	st := &p.Status
	want := poolWant(p)
	ready := meta.FindStatusCondition(st.Conditions, sandboxv1.ConditionReady)
	if st.ReadyReplicas != want || st.Replicas != want || ready == nil || ready.Status != metav1.ConditionTrue {
		if ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == sandboxv1.ReasonQuotaExceeded {
			return ""
		}
		return fmt.Sprintf("replicas %d, status replicas %d ready %d target %d%s", want, st.Replicas, st.ReadyReplicas, st.TargetReplicas, conditionNote(st.Conditions))
	}
	if st.ObservedGeneration != p.Generation {
		return fmt.Sprintf("ready, but observedGeneration %d of generation %d", st.ObservedGeneration, p.Generation)
	}
	snapshotID := templateSnapshotID(cl, p)
	if ref := p.Spec.Template.Spec.Source.SnapshotRef; ref != nil && st.SnapshotID != snapshotID {
		return fmt.Sprintf("status.snapshotID %q, but SandboxSnapshot %s is %q", st.SnapshotID, ref.Name, snapshotID)
	}
	return poolMembersProblem(cl, p, want, snapshotID)
}

// poolWant is the number of members a pool keeps: spec.replicas (default
// 1), or the policy's target when it has one.
func poolWant(p *sandboxv1.SandboxPool) int32 {
	switch {
	case p.Spec.Policy != nil:
		return p.Status.TargetReplicas
	case p.Spec.Replicas != nil:
		return *p.Spec.Replicas
	}
	return 1
}

// templateSnapshotID is the current Vercel id of the SandboxSnapshot the
// pool's template boots from ("" for another source or none).
func templateSnapshotID(cl *cluster, p *sandboxv1.SandboxPool) string {
	ref := p.Spec.Template.Spec.Source.SnapshotRef
	if ref == nil {
		return ""
	}
	for _, s := range cl.snapshots {
		if s.Namespace == p.Namespace && s.Name == ref.Name {
			return s.Status.SnapshotID
		}
	}
	return ""
}

// poolMembersProblem: the pool's live members are want unclaimed ones, none
// marked by a claimant, each booted from snapshotID (when not "").
func poolMembersProblem(cl *cluster, p *sandboxv1.SandboxPool, want int32, snapshotID string) string {
	unclaimed := 0
	for i := range cl.sandboxes {
		m := &cl.sandboxes[i]
		if !metav1.IsControlledBy(m, p) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		if by := m.Labels[sandboxv1.LabelClaimedBy]; by != "" {
			return fmt.Sprintf("member %s is marked for claimant UID %s but was not handed over", m.Name, by)
		}
		if b := m.Status.BootedFrom; snapshotID != "" && (b == nil || b.SnapshotID != snapshotID) {
			return fmt.Sprintf("member %s did not boot from the template's snapshot %s (%+v)", m.Name, snapshotID, b)
		}
		unclaimed++
	}
	if unclaimed != int(want) {
		return fmt.Sprintf("status ready, but %d unclaimed members exist for replicas %d", unclaimed, want)
	}
	return ""
}

// memberProblem: a member exists only while its pool does, and no member
// stays marked by a claimant (a finished hand-over deletes it).
func memberProblem(cl *cluster, s *sandboxv1.Sandbox) string {
	ref := metav1.GetControllerOf(s)
	if o, ok := cl.uids[ref.UID]; !ok || !strings.HasPrefix(o, "SandboxPool ") {
		return fmt.Sprintf("its SandboxPool %s (UID %s) is gone, the member is left", ref.Name, ref.UID)
	}
	if by := s.Labels[sandboxv1.LabelClaimedBy]; by != "" {
		return fmt.Sprintf("marked for claimant %s (UID %s), hand-over not finished", s.Annotations[sandboxv1.AnnotationClaimant], by)
	}
	return ""
}

// claimProblem: a Sandbox with spec.poolRef has settled its claim (a
// Claimed condition); Claimed=True records the member in status.claim, and
// that member object is gone (its Vercel sandbox is the claimant's).
func claimProblem(cl *cluster, s *sandboxv1.Sandbox) string {
	c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionClaimed)
	claim := s.Status.Claim
	switch {
	case c == nil:
		return fmt.Sprintf("spec.poolRef %s, but no Claimed condition: the claim never settled (status.claim %+v)", s.Spec.PoolRef.Name, claim)
	case c.Status == metav1.ConditionTrue && claim == nil:
		return "Claimed=True without status.claim"
	case claim == nil:
		return ""
	}
	if o, live := cl.uids[types.UID(claim.MemberUID)]; live {
		return fmt.Sprintf("took member %s (UID %s), which still exists as %s", claim.Member, claim.MemberUID, o)
	}
	return ""
}

// sharedHoldings: no two Sandboxes (claimants or members, live or
// terminating) name the same Vercel sandbox in status.vercelName or the
// same member in status.claim, and no member a Sandbox took is live and
// unmarked (claimable again) or marked for someone else.
func sharedHoldings(cl *cluster) []string {
	byName := map[string][]string{}
	byMember := map[string][]string{}
	live := map[types.UID]*sandboxv1.Sandbox{}
	for i := range cl.sandboxes {
		live[cl.sandboxes[i].UID] = &cl.sandboxes[i]
	}
	var out []string
	for i := range cl.sandboxes {
		s := &cl.sandboxes[i]
		key := s.Namespace + "/" + s.Name
		if n := s.Status.VercelName; n != "" {
			byName[n] = append(byName[n], key)
		}
		c := s.Status.Claim
		if c == nil {
			continue
		}
		byMember[c.MemberUID] = append(byMember[c.MemberUID], key)
		if m, ok := live[types.UID(c.MemberUID)]; ok && m.Labels[sandboxv1.LabelClaimedBy] != string(s.UID) {
			out = append(out, fmt.Sprintf("member %s/%s, taken by Sandbox %s, is live and marked claimed-by %q", m.Namespace, m.Name, key, m.Labels[sandboxv1.LabelClaimedBy]))
		}
	}
	out = append(out, several("Vercel sandbox %s is status.vercelName of %d Sandboxes %v", byName)...)
	out = append(out, several("member UID %s is in status.claim of %d Sandboxes %v", byMember)...)
	return out
}

// several formats each key of m held by more than one object.
func several(format string, m map[string][]string) []string {
	var out []string
	for k, holders := range m {
		if len(holders) > 1 {
			sort.Strings(holders)
			out = append(out, fmt.Sprintf(format, k, len(holders), holders))
		}
	}
	sort.Strings(out)
	return out
}

// handedOver is the live Sandbox that took member uid's Vercel sandbox
// named name: tagged with its UID, and its status.claim naming the member.
func handedOver(cl *cluster, uid types.UID, name string) string {
	for _, vs := range cl.vercel {
		if vs.Name != name {
			continue
		}
		for i := range cl.sandboxes {
			s := &cl.sandboxes[i]
			if c := s.Status.Claim; c != nil && types.UID(c.MemberUID) == uid && string(s.UID) == vs.Tags[tagOwnerUID] {
				return s.Namespace + "/" + s.Name
			}
		}
	}
	return ""
}

// vercelNameLeft: no live Vercel sandbox has the name a deleted Sandbox
// had, unless a pool member's was handed over to a live claimant.
func vercelNameLeft(cl *cluster, d deletedObject) string {
	if d.vercelName == "" || handedOver(cl, d.uid, d.vercelName) != "" {
		return ""
	}
	for _, vs := range cl.vercel {
		if vs.Name == d.vercelName {
			return "its Vercel sandbox " + d.vercelName + " still exists"
		}
	}
	return ""
}

// poolLeftovers: a deleted pool leaves no Sandbox it controls.
func poolLeftovers(cl *cluster, d deletedObject) string {
	for i := range cl.sandboxes {
		s := &cl.sandboxes[i]
		if ref := metav1.GetControllerOf(s); ref != nil && ref.UID == d.uid {
			return fmt.Sprintf("its member %s still exists (phase %s)", s.Name, s.Status.Phase)
		}
	}
	return ""
}
