package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Tags the controllers put on Vercel sandboxes (controllers/sandbox_request.go,
// controllers/sandboxsnapshot_build.go).
const (
	tagOwnerUID    = "k8s-uid"
	tagContentHash = "k8s-content-hash"
)

// verdict is the evaluation of the system at one instant.
type verdict struct {
	objects, converged int
	notConverged       []string // "kind ns/name: why"
	unownedSandboxes   []string
	unownedSnapshots   []string
	duplicates         []string // objects with more than one Vercel sandbox
	terminating        []string
	shared             []string          // pool members or Vercel sandboxes held by two Sandboxes (check_pool.go)
	perKind            map[string][2]int // converged, total
}

func (v *verdict) ok() bool {
	return v.converged == v.objects && len(v.unownedSandboxes) == 0 && len(v.unownedSnapshots) == 0 &&
		len(v.duplicates) == 0 && len(v.terminating) == 0 && len(v.shared) == 0
}

func (v *verdict) add(kind, key string, why string) {
	v.objects++
	c := v.perKind[kind]
	c[1]++
	if why == "" {
		v.converged++
		c[0]++
	} else {
		v.notConverged = append(v.notConverged, kind+" "+key+": "+why)
	}
	v.perKind[kind] = c
}

// cluster is one observation of Kubernetes and of the emulator.
type cluster struct {
	sandboxes  []sandboxv1.Sandbox
	snapshots  []sandboxv1.SandboxSnapshot
	forks      []sandboxv1.SandboxFork
	pools      []sandboxv1.SandboxPool
	namespaces []corev1.Namespace
	// What the harness saw of pools during the run (poolLedger): every
	// member, and claims of one member by two Sandboxes.
	seenMembers    []deletedObject
	claimConflicts []string

	vercel    []vercel.Sandbox
	sessions  map[string]vercel.Session // by id, of live Vercel sandboxes
	vsnaps    []vercel.Snapshot
	vsnapByID map[string]vercel.Snapshot
	byUID     map[types.UID][]vercel.Sandbox
	uids      map[types.UID]string // every object's UID -> "kind ns/name"
}

func observe(ctx context.Context, c client.Client, h *harness) (*cluster, error) {
	cl := &cluster{sessions: map[string]vercel.Session{}, vsnapByID: map[string]vercel.Snapshot{},
		byUID: map[types.UID][]vercel.Sandbox{}, uids: map[types.UID]string{}}
	sbxs := &sandboxv1.SandboxList{}
	snaps := &sandboxv1.SandboxSnapshotList{}
	forks := &sandboxv1.SandboxForkList{}
	pools := &sandboxv1.SandboxPoolList{}
	nss := &corev1.NamespaceList{}
	for _, l := range []client.ObjectList{sbxs, snaps, forks, pools, nss} {
		if err := c.List(ctx, l); err != nil {
			return nil, err
		}
	}
	cl.sandboxes, cl.snapshots, cl.forks, cl.pools, cl.namespaces = sbxs.Items, snaps.Items, forks.Items, pools.Items, nss.Items
	h.ledger.record(cl.sandboxes)
	cl.seenMembers, cl.claimConflicts = h.ledger.snapshot()
	for _, s := range cl.sandboxes {
		cl.uids[s.UID] = "Sandbox " + s.Namespace + "/" + s.Name
	}
	for _, s := range cl.snapshots {
		cl.uids[s.UID] = "SandboxSnapshot " + s.Namespace + "/" + s.Name
	}
	for _, f := range cl.forks {
		cl.uids[f.UID] = "SandboxFork " + f.Namespace + "/" + f.Name
	}
	for _, p := range cl.pools {
		cl.uids[p.UID] = "SandboxPool " + p.Namespace + "/" + p.Name
	}
	emu := h.stack.Emulator
	cl.vercel = emu.LiveSandboxes()
	for _, s := range emu.Sessions() {
		cl.sessions[s.ID] = s
	}
	cl.vsnaps = emu.Snapshots()
	for _, s := range cl.vsnaps {
		cl.vsnapByID[s.ID] = s
	}
	for _, v := range cl.vercel {
		if uid := v.Tags[tagOwnerUID]; uid != "" {
			cl.byUID[types.UID(uid)] = append(cl.byUID[types.UID(uid)], v)
		}
	}
	return cl, nil
}

// evaluate judges every object against its declared state (docs/dev/chaos.md
// defines each case) and looks for leaks, duplicates and stuck deletions.
func evaluate(cl *cluster, deleted []deletedObject, maxSession int64) *verdict {
	v := &verdict{perKind: map[string][2]int{}}
	liveNS := map[string]bool{}
	for _, ns := range cl.namespaces {
		if ns.DeletionTimestamp.IsZero() {
			liveNS[ns.Name] = true
		} else {
			v.terminating = append(v.terminating, "Namespace "+ns.Name+phaseNote(string(ns.Status.Phase), ns.DeletionTimestamp))
		}
	}

	for i := range cl.sandboxes {
		s := &cl.sandboxes[i]
		if !s.DeletionTimestamp.IsZero() {
			v.terminating = append(v.terminating, "Sandbox "+s.Namespace+"/"+s.Name+phaseNote(string(s.Status.Phase), s.DeletionTimestamp)+conditionNote(s.Status.Conditions))
			continue
		}
		if !isChaosNS(s.Namespace) {
			continue
		}
		kind, poolIssue := sandboxKind(cl, s)
		v.add(kind, s.Namespace+"/"+s.Name, firstProblem(poolIssue, sandboxProblem(cl, s, maxSession), syncedProblem(s.Status.Conditions)))
	}
	for i := range cl.snapshots {
		s := &cl.snapshots[i]
		if !s.DeletionTimestamp.IsZero() {
			v.terminating = append(v.terminating, "SandboxSnapshot "+s.Namespace+"/"+s.Name+phaseNote(string(s.Status.Phase), s.DeletionTimestamp)+conditionNote(s.Status.Conditions))
			continue
		}
		if !isChaosNS(s.Namespace) {
			continue
		}
		kind := "SandboxSnapshot"
		if s.Labels[sandboxv1.LabelFork] != "" {
			kind = "SandboxSnapshot (fork capture)"
		}
		v.add(kind, s.Namespace+"/"+s.Name, firstProblem(snapshotProblem(cl, s), syncedProblem(s.Status.Conditions)))
	}
	for i := range cl.forks {
		f := &cl.forks[i]
		if !f.DeletionTimestamp.IsZero() {
			v.terminating = append(v.terminating, "SandboxFork "+f.Namespace+"/"+f.Name+phaseNote(string(f.Status.Phase), f.DeletionTimestamp)+conditionNote(f.Status.Conditions))
			continue
		}
		if !isChaosNS(f.Namespace) {
			continue
		}
		v.add("SandboxFork", f.Namespace+"/"+f.Name, firstProblem(forkProblem(cl, f), syncedProblem(f.Status.Conditions)))
	}

	evaluatePools(cl, v, deleted)

	// Deleted objects: gone from Kubernetes and from Vercel.
	for _, d := range deleted {
		key := d.namespace + "/" + d.name
		if d.namespace == "" {
			key = d.name
		}
		v.add("deleted "+d.kind, key, deletedProblem(cl, d))
	}

	// Vercel sandboxes without an owner, and owners with several.
	building := map[string][]string{} // content hash -> namespaces where a SandboxSnapshot of it is building
	for _, s := range cl.snapshots {
		if h := s.Labels[sandboxv1.LabelContentHash]; h != "" && s.DeletionTimestamp.IsZero() && !s.Status.ReadyToUse {
			building[h] = append(building[h], s.Namespace)
		}
	}
	for _, vs := range cl.vercel {
		uid := types.UID(vs.Tags[tagOwnerUID])
		owner, ok := cl.uids[uid]
		switch {
		case vs.Tags[tagContentHash] != "":
			// A recipe builder (named <namespace>-build-<hash>-…): owned while
			// a SandboxSnapshot of its namespace with its hash is building.
			owned := false
			for _, ns := range building[vs.Tags[tagContentHash]] {
				owned = owned || strings.HasPrefix(vs.Name, ns+"-build-")
			}
			if !owned {
				v.unownedSandboxes = append(v.unownedSandboxes, fmt.Sprintf("%s (builder of content hash %s: no SandboxSnapshot of that hash is building in its namespace)", vs.Name, vs.Tags[tagContentHash]))
			}
		case !ok || !strings.HasPrefix(owner, "Sandbox "):
			v.unownedSandboxes = append(v.unownedSandboxes, fmt.Sprintf("%s (tag k8s-uid %q names no Sandbox; session %s %s)", vs.Name, uid, vs.CurrentSessionID, vs.Status))
		}
	}
	uids := make([]string, 0, len(cl.byUID))
	for uid := range cl.byUID {
		uids = append(uids, string(uid))
	}
	sort.Strings(uids)
	for _, uid := range uids {
		if list := cl.byUID[types.UID(uid)]; len(list) > 1 {
			names := make([]string, 0, len(list))
			for _, s := range list {
				names = append(names, s.Name)
			}
			owner := cl.uids[types.UID(uid)]
			if owner == "" {
				owner = "deleted object " + uid
			}
			v.duplicates = append(v.duplicates, fmt.Sprintf("%s: %d Vercel sandboxes %v", owner, len(list), names))
		}
	}

	// Vercel snapshots without an owner: not recorded by any SandboxSnapshot,
	// and not an automatic snapshot of a live, owned Vercel sandbox.
	recorded := map[string]bool{}
	for _, s := range cl.snapshots {
		if s.Status.SnapshotID != "" {
			recorded[s.Status.SnapshotID] = true
		}
	}
	ownedVercel := map[string]bool{}
	for _, vs := range cl.vercel {
		if o := cl.uids[types.UID(vs.Tags[tagOwnerUID])]; strings.HasPrefix(o, "Sandbox ") {
			ownedVercel[vs.Name] = true
		}
	}
	for _, sn := range cl.vsnaps {
		if sn.Status != vercel.SnapshotCreated || recorded[sn.ID] {
			continue
		}
		src, live := cl.sessions[sn.SourceSessionID]
		if sn.CreationMethod == "automatic" && live && ownedVercel[src.SourceSandboxName] {
			continue
		}
		from := "a deleted Vercel sandbox"
		if live {
			from = "Vercel sandbox " + src.SourceSandboxName
		}
		v.unownedSnapshots = append(v.unownedSnapshots, fmt.Sprintf("%s (%s, of session %s of %s)", sn.ID, sn.CreationMethod, sn.SourceSessionID, from))
	}
	return v
}

func isChaosNS(ns string) bool { return strings.HasPrefix(ns, "chaos-") }

func phaseNote(phase string, since *metav1.Time) string {
	return fmt.Sprintf(" (phase %s, deleting since %s)", phase, since.UTC().Format("15:04:05"))
}

func conditionNote(conds []metav1.Condition) string {
	var parts []string
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, "; ") + "]"
}

// sandboxProblem says why a Sandbox is not in its declared state ("" when
// it is). Declared Running: Ready, phase Running, the current generation
// applied, exactly one Vercel sandbox (tagged with its UID, the name in
// status) whose running session is the one in status, with the spec's
// timeout. Declared Stopped: phase Stopped, its Vercel sandbox without a
// running session.
func sandboxProblem(cl *cluster, s *sandboxv1.Sandbox, maxSession int64) string {
	st := &s.Status
	mine := cl.byUID[s.UID]
	if len(mine) != 1 {
		return fmt.Sprintf("%d Vercel sandboxes tagged with its UID, want 1 (phase %s)%s", len(mine), st.Phase, conditionNote(st.Conditions))
	}
	vs := mine[0]
	if vs.Name != st.VercelName {
		return fmt.Sprintf("status.vercelName %q, but its Vercel sandbox is %q", st.VercelName, vs.Name)
	}
	if s.Spec.State == sandboxv1.SandboxStateStopped {
		if st.Phase != sandboxv1.SandboxStopped {
			return fmt.Sprintf("declared Stopped, phase %s%s", st.Phase, conditionNote(st.Conditions))
		}
		if vs.Status == vercel.SessionRunning || vs.Status == vercel.SessionPending {
			return fmt.Sprintf("declared Stopped, phase Stopped, but Vercel sandbox %s has a %s session %s", vs.Name, vs.Status, vs.CurrentSessionID)
		}
		return ""
	}
	if !meta.IsStatusConditionTrue(st.Conditions, sandboxv1.ConditionReady) || st.Phase != sandboxv1.SandboxRunning {
		return fmt.Sprintf("declared Running, phase %s%s", st.Phase, conditionNote(st.Conditions))
	}
	if st.ObservedGeneration != s.Generation {
		return fmt.Sprintf("Ready, but observedGeneration %d of generation %d", st.ObservedGeneration, s.Generation)
	}
	if vs.CurrentSessionID != st.SessionID || vs.Status != vercel.SessionRunning {
		return fmt.Sprintf("Ready with session %s, but Vercel sandbox %s has session %s %s", st.SessionID, vs.Name, vs.CurrentSessionID, vs.Status)
	}
	want := expectedPolicyMode(s.Spec.NetworkPolicy)
	if got := policyMode(vs.NetworkPolicy); got != want {
		return fmt.Sprintf("spec.networkPolicy means %s, but Vercel sandbox %s has %s for its next sessions", want, vs.Name, got)
	}
	if ss, ok := cl.sessions[vs.CurrentSessionID]; ok && ss.NetworkPolicy != nil {
		if got := policyMode(ss.NetworkPolicy); got != want {
			return fmt.Sprintf("spec.networkPolicy means %s, but running session %s has %s", want, ss.ID, got)
		}
	}
	if t := s.Spec.TimeoutSeconds; t != nil {
		want := min(*t*1000, maxSession)
		if vs.Timeout != want {
			return fmt.Sprintf("spec.timeoutSeconds %d, but Vercel sandbox %s has timeout %d ms", *t, vs.Name, vs.Timeout)
		}
	}
	return ""
}

// snapshotProblem: declared state of every SandboxSnapshot is readyToUse,
// phase Ready, the current generation observed, and its snapshot existing
// in Vercel.
func snapshotProblem(cl *cluster, s *sandboxv1.SandboxSnapshot) string {
	st := &s.Status
	if !st.ReadyToUse || st.Phase != sandboxv1.SnapshotReady {
		return fmt.Sprintf("readyToUse %v, phase %s%s", st.ReadyToUse, st.Phase, conditionNote(st.Conditions))
	}
	if st.ObservedGeneration != s.Generation {
		return fmt.Sprintf("ready, but observedGeneration %d of generation %d", st.ObservedGeneration, s.Generation)
	}
	vs, ok := cl.vsnapByID[st.SnapshotID]
	if !ok || vs.Status != vercel.SnapshotCreated {
		return fmt.Sprintf("ready with snapshot %q, which Vercel has as %q", st.SnapshotID, vs.Status)
	}
	return ""
}

// forkProblem: declared state of a fork is spec.replicas children (default
// 1), all Ready, reported in status (replicas and readyReplicas equal to
// spec.replicas, phase Ready, the current generation observed), and no
// other child left.
func forkProblem(cl *cluster, f *sandboxv1.SandboxFork) string {
	want := int32(1)
	if f.Spec.Replicas != nil {
		want = *f.Spec.Replicas
	}
	st := &f.Status
	if st.ReadyReplicas != want || st.Replicas != want || st.Phase != sandboxv1.ForkReady {
		return fmt.Sprintf("replicas %d, status replicas %d ready %d, phase %s%s", want, st.Replicas, st.ReadyReplicas, st.Phase, conditionNote(st.Conditions))
	}
	if st.ObservedGeneration != f.Generation {
		return fmt.Sprintf("ready, but observedGeneration %d of generation %d", st.ObservedGeneration, f.Generation)
	}
	children := 0
	for _, s := range cl.sandboxes {
		if metav1.IsControlledBy(&s, f) {
			children++
		}
	}
	if children != int(want) {
		return fmt.Sprintf("status ready, but %d child Sandboxes exist for replicas %d", children, want)
	}
	return ""
}

// deletedProblem: a deleted object is gone from Kubernetes (no object with
// its UID), no live Vercel sandbox carries its UID (nor, for a Sandbox, the
// name it had, unless it was a pool member's handed over to a live claimant),
// a deleted SandboxPool leaves no member, and, for a SandboxSnapshot, its Vercel snapshot is deleted
// unless an existing SandboxSnapshot still records it (shared recipe builds).
func deletedProblem(cl *cluster, d deletedObject) string {
	if d.kind == "Namespace" {
		for _, ns := range cl.namespaces {
			if ns.UID == d.uid {
				return fmt.Sprintf("namespace still exists (phase %s)", ns.Status.Phase)
			}
		}
		return ""
	}
	if o, ok := cl.uids[d.uid]; ok {
		return "still in Kubernetes as " + o
	}
	if n := len(cl.byUID[d.uid]); n > 0 {
		return fmt.Sprintf("%d Vercel sandboxes still carry its UID (%s)", n, cl.byUID[d.uid][0].Name)
	}
	if p := vercelNameLeft(cl, d); p != "" {
		return p
	}
	if d.kind == "SandboxPool" {
		return poolLeftovers(cl, d)
	}
	if d.snapshotID != "" {
		if sn, ok := cl.vsnapByID[d.snapshotID]; ok && sn.Status == vercel.SnapshotCreated {
			for _, s := range cl.snapshots {
				if s.Status.SnapshotID == d.snapshotID {
					return ""
				}
			}
			return "its Vercel snapshot " + d.snapshotID + " still exists"
		}
	}
	return ""
}

// expectedPolicyMode is the Vercel policy mode a spec.networkPolicy
// translates to (controllers/sandbox_request.go: header injection needs the
// custom mode).
func expectedPolicyMode(np *sandboxv1.NetworkPolicy) string {
	switch {
	case np == nil:
		return vercel.NetworkAllowAll
	case np.Mode == sandboxv1.NetworkAllowlist || len(np.InjectHeaders) > 0:
		return vercel.NetworkCustom
	case np.Mode == sandboxv1.NetworkDenyAll:
		return vercel.NetworkDenyAll
	default:
		return vercel.NetworkAllowAll
	}
}

func policyMode(np *vercel.NetworkPolicy) string {
	if np == nil || np.Mode == "" {
		return vercel.NetworkAllowAll
	}
	return np.Mode
}

// syncedProblem: an object in its declared state also had its last
// reconcile succeed; Synced=False means the controller still retries
// something (and calls Vercel for it).
func syncedProblem(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, sandboxv1.ConditionSynced); c != nil && c.Status == metav1.ConditionFalse {
		return fmt.Sprintf("in its declared state, but Synced=False %s: %s", c.Reason, c.Message)
	}
	return ""
}

func firstProblem(problems ...string) string {
	for _, p := range problems {
		if p != "" {
			return p
		}
	}
	return ""
}
