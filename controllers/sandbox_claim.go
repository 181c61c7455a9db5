package controllers

// Claims: a Sandbox with spec.poolRef takes a ready member of its
// SandboxPool instead of creating a Vercel sandbox. Exactly one claimant gets
// each member because the claimant marks it (label claimed-by = its UID)
// with an update at the member's resourceVersion: the API server lets one
// update through and answers every other with a conflict, whichever manager
// (after a restart or a failover) sends it. The claimant then records the
// member in its status, re-tags the member's Vercel sandbox with its own
// owner tags, applies its spec and deletes the member object, whose
// finalizer leaves a sandbox tagged for another object alone. From then on
// the claimant is an ordinary Sandbox whose Vercel name derives from the
// member it took (remoteName).

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/httplimit"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// claimCacheRetry is how soon a claim looks again when the cache is behind
// the API server's copy of the claimant.
const claimCacheRetry = 200 * time.Millisecond

// claimOutcome is what a claim step did.
type claimOutcome int

const (
	// claimCold: no member; the Sandbox is created from spec.source.
	claimCold claimOutcome = iota
	// claimTaken: the Sandbox now stands for a member's Vercel sandbox.
	claimTaken
	// claimRetry: look again shortly (the cache was behind).
	claimRetry
)

// claimSettled reports whether the Sandbox needs no claim step: it names no
// pool, or its Claimed condition records the outcome.
func claimSettled(sbx *sandboxv1.Sandbox) bool {
	return sbx.Spec.PoolRef == nil || meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionClaimed) != nil
}

// claimStep is the claim part of a Sandbox's reconcile: done says the
// reconcile ends with res and err (a member a claimant is taking, or a claim
// to look at again); otherwise the Sandbox goes on as an ordinary one,
// claimed or cold.
func (r *SandboxReconciler) claimStep(ctx context.Context, sbx *sandboxv1.Sandbox) (res ctrl.Result, done bool, err error) {
	if claimedMember(sbx) {
		// A claimant is taking its Vercel sandbox.
		return ctrl.Result{}, true, nil
	}
	if claimSettled(sbx) {
		return ctrl.Result{}, false, nil
	}
	switch out, err := r.claim(ctx, sbx); {
	case err != nil:
		return ctrl.Result{}, true, err
	case out == claimRetry:
		return ctrl.Result{RequeueAfter: claimCacheRetry}, true, nil
	}
	return ctrl.Result{}, false, nil
}

// claim takes a member for sbx, or decides it is created cold, or finishes
// a claim a restart interrupted.
func (r *SandboxReconciler) claim(ctx context.Context, sbx *sandboxv1.Sandbox) (claimOutcome, error) {
	// What the claim metric measures from: this reconcile when it takes the
	// member (creationTimestamp has a resolution of one second, coarser than
	// a claim), else the recorded claim a restart finishes.
	var since time.Time
	if sbx.Status.Claim == nil {
		since = r.now()
		out, err := r.takeMember(ctx, sbx)
		if out != claimTaken || err != nil {
			return out, err
		}
	} else if at := sbx.Status.Claim.ClaimedAt; at != nil {
		since = at.Time
	}
	return r.handOver(ctx, sbx, since)
}

// takeMember marks a member for sbx and records it in sbx's status, or
// records that sbx is created cold.
func (r *SandboxReconciler) takeMember(ctx context.Context, sbx *sandboxv1.Sandbox) (claimOutcome, error) {
	// Uncached: a cache behind an earlier claim of this object must not
	// make it claim a second member.
	fresh := &sandboxv1.Sandbox{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(sbx), fresh); err != nil {
		return claimRetry, client.IgnoreNotFound(err)
	}
	if fresh.ResourceVersion != sbx.ResourceVersion {
		return claimRetry, nil
	}
	member, err := r.markedMember(ctx, sbx)
	if err != nil {
		return claimRetry, err
	}
	pool := sbx.Spec.PoolRef.Name
	if member == nil {
		var reason, msg string
		member, reason, msg, err = r.markMember(ctx, sbx)
		if err != nil {
			return claimRetry, err
		}
		if member == nil {
			return r.goCold(ctx, sbx, sbx.DeepCopy(), reason, msg)
		}
	}
	base := sbx.DeepCopy()
	st := &sbx.Status
	st.Claim = &sandboxv1.ClaimStatus{Pool: pool, Member: member.Name, MemberUID: string(member.UID), ClaimedAt: &metav1.Time{Time: r.now()}}
	st.Recreations = member.Status.Recreations
	st.VercelName = remoteName(sbx)
	st.BootedFrom = member.Status.BootedFrom.DeepCopy()
	st.Setup = member.Status.Setup.DeepCopy()
	// Recorded before the Vercel sandbox is re-tagged: from then on this
	// object's finalizer finds it, and a restart finishes the hand-over.
	if err := r.Status().Patch(ctx, sbx, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return claimRetry, fmt.Errorf("record claim of member %s: %w", member.Name, err)
	}
	return claimTaken, nil
}

// markedMember is the member a claim of sbx marked before it was
// interrupted, looked up uncached.
func (r *SandboxReconciler) markedMember(ctx context.Context, sbx *sandboxv1.Sandbox) (*sandboxv1.Sandbox, error) {
	list := &sandboxv1.SandboxList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(sbx.Namespace), client.MatchingLabels{sandboxv1.LabelClaimedBy: string(sbx.UID)}); err != nil {
		return nil, fmt.Errorf("list members claimed by this Sandbox: %w", err)
	}
	for i := range list.Items {
		if isPoolMember(&list.Items[i], sbx.Spec.PoolRef.Name) && list.Items[i].DeletionTimestamp.IsZero() {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// isPoolMember reports whether m is a member of the pool named pool: labelled
// so and controlled by a SandboxPool of that name.
func isPoolMember(m *sandboxv1.Sandbox, pool string) bool {
	ref := metav1.GetControllerOf(m)
	return m.Labels[sandboxv1.LabelPool] == labelValue(pool) && ref != nil && ref.Kind == "SandboxPool" && ref.Name == pool &&
		ref.APIVersion == sandboxv1.GroupVersion.String()
}

// markMember marks a claimable member of sbx's pool as sbx's, or says why
// there is none (reason and message of Claimed=False).
func (r *SandboxReconciler) markMember(ctx context.Context, sbx *sandboxv1.Sandbox) (*sandboxv1.Sandbox, string, string, error) {
	name := sbx.Spec.PoolRef.Name
	pool := &sandboxv1.SandboxPool{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: name}, pool); {
	case apierrors.IsNotFound(err):
		return nil, sandboxv1.ReasonPoolNotFound, fmt.Sprintf("Created cold: SandboxPool %q does not exist", name), nil
	case err != nil:
		return nil, "", "", err
	case !pool.DeletionTimestamp.IsZero():
		return nil, sandboxv1.ReasonPoolNotFound, fmt.Sprintf("Created cold: SandboxPool %q is being deleted", name), nil
	}
	if fields := sandboxv1.ClaimMismatch(&pool.Spec.Template.Spec, &sbx.Spec); len(fields) > 0 {
		return nil, sandboxv1.ReasonSpecMismatch, describeMismatch(name, fields), nil
	}
	list := &sandboxv1.SandboxList{}
	if err := r.List(ctx, list, client.InNamespace(sbx.Namespace), client.MatchingLabels{sandboxv1.LabelPool: labelValue(name)}); err != nil {
		return nil, "", "", fmt.Errorf("list members of pool %s: %w", name, err)
	}
	state := memberStateOf(pool)
	for i := range list.Items {
		m := &list.Items[i]
		if !isPoolMember(m, name) || m.Labels[sandboxv1.LabelClass] != sbx.Labels[sandboxv1.LabelClass] || r.marked.has(m.UID, r.now()) {
			continue
		}
		won, err := r.tryMark(ctx, sbx, m, pool.Status.SnapshotID, state)
		if err != nil {
			return nil, "", "", err
		}
		if won {
			return m, "", "", nil
		}
	}
	return nil, sandboxv1.ReasonPoolEmpty, fmt.Sprintf("Created cold: SandboxPool %q had no ready member", name), nil
}

// tryMark marks m as sbx's with an update at m's resourceVersion, once
// again at a fresh resourceVersion when the first attempt lost to another
// write (a status update of m): it reports whether sbx got it.
func (r *SandboxReconciler) tryMark(ctx context.Context, sbx, m *sandboxv1.Sandbox, snapshotID string, state sandboxv1.SandboxState) (bool, error) {
	for attempt := 0; attempt < 2; attempt++ {
		if kind := classifyMember(m, snapshotID, state); kind != memberClaimable {
			if kind == memberClaimed {
				r.marked.add(m.UID, r.now())
			}
			return false, nil
		}
		m.Labels[sandboxv1.LabelClaimedBy] = string(sbx.UID)
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[sandboxv1.AnnotationClaimant] = sbx.Name
		err := r.Update(ctx, m)
		switch {
		case err == nil:
			r.marked.add(m.UID, r.now())
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("mark member %s: %w", m.Name, err)
		}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return false, client.IgnoreNotFound(err)
		}
	}
	return false, nil
}

// goCold records, before anything is created, that sbx is created from its
// own spec and why: a restart must not claim a member for a Sandbox whose
// cold create already ran.
// base is sbx as last read, for the patch.
func (r *SandboxReconciler) goCold(ctx context.Context, sbx, base *sandboxv1.Sandbox, reason, msg string) (claimOutcome, error) {
	setCondition(&sbx.Status.Conditions, sbx.Generation, sandboxv1.ConditionClaimed, metav1.ConditionFalse, reason, msg)
	if err := r.Status().Patch(ctx, sbx, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return claimRetry, fmt.Errorf("record cold create: %w", err)
	}
	metrics.ObserveClaim(sbx.Namespace, sbx.Spec.PoolRef.Name, reason, 0, 0)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, reason, "Claim", "%s", msg)
	return claimCold, nil
}

// handOver makes the recorded member's Vercel sandbox sbx's: re-tagged with
// sbx's owner tags (only from the member's own tags, and only while the
// member object is marked for sbx), sbx's spec applied, a stopped session
// resumed, and the member object deleted. Every step may run again after a
// restart.
//
// Its quick Vercel calls (the read, the re-tag, the spec's changes) may use
// the reserved in-flight slots (httplimit.WithPriority): a user waits on a
// claim, and under load every regular slot can be held by the slow creates
// that refill the pool. Resuming a stopped member is a start and waits its
// turn.
func (r *SandboxReconciler) handOver(ctx context.Context, sbx *sandboxv1.Sandbox, since time.Time) (claimOutcome, error) {
	c := sbx.Status.Claim
	name := remoteName(sbx)
	sbx.Status.VercelName = name
	quick := httplimit.WithPriority(ctx)
	resp, err := r.api(ctx).GetSandbox(quick, name, false)
	if vercel.IsNotFound(err) {
		// The member is useless without its sandbox: it goes too.
		if m, gerr := r.recordedMember(ctx, sbx); gerr == nil && m != nil {
			_ = client.IgnoreNotFound(r.Delete(ctx, m, client.Preconditions{UID: &m.UID}))
		}
		return r.claimLost(ctx, sbx, fmt.Sprintf("the Vercel sandbox %s of member %s is gone", name, c.Member))
	}
	if err != nil {
		return claimRetry, fmt.Errorf("get sandbox %s of member %s: %w", name, c.Member, err)
	}
	member, err := r.recordedMember(ctx, sbx)
	if err != nil {
		return claimRetry, err
	}
	if out, err := r.retag(quick, sbx, member, name, resp.Sandbox.Tags); out != claimTaken || err != nil {
		return out, err
	}
	if err := r.takeSession(ctx, sbx, member, name, resp); err != nil {
		return claimRetry, err
	}
	if member != nil {
		if err := r.Delete(ctx, member, client.Preconditions{UID: &member.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return claimRetry, fmt.Errorf("delete member %s: %w", c.Member, err)
		}
	}
	r.claimed(ctx, sbx, member, name, since)
	return claimTaken, nil
}

// retag makes the Vercel sandbox name (with tags) sbx's: already so, or
// the marked member's and re-tagged now. claimTaken: go on with the hand-over.
func (r *SandboxReconciler) retag(ctx context.Context, sbx, member *sandboxv1.Sandbox, name string, tags map[string]string) (claimOutcome, error) {
	c := sbx.Status.Claim
	switch {
	case ownerOf(tags, r.ClusterID, sbx.UID) == ownedBySelf:
		return claimTaken, nil
	case member != nil && ownerOf(tags, r.ClusterID, member.UID) == ownedBySelf:
		want, err := adoptionTags(releasedTags(tags), r.ClusterID, sbx.UID)
		if err != nil {
			return claimRetry, err
		}
		// The PATCH answers without the session: the session read before
		// is the one the claimant's spec is applied to (takeSession).
		if _, err = r.api(ctx).UpdateSandbox(ctx, name, vercel.UpdateSandboxRequest{Tags: want}, false); err != nil {
			return claimRetry, fmt.Errorf("tag sandbox %s of member %s as this object's: %w", name, c.Member, err)
		}
		return claimTaken, nil
	case member == nil:
		return r.claimLost(ctx, sbx, fmt.Sprintf("member %s is gone before its Vercel sandbox %s was handed over", c.Member, name))
	default:
		// Status names a sandbox that is neither this object's nor the
		// marked member's: whoever wrote status cannot aim the claim at it.
		return claimRetry, fmt.Errorf("the Vercel sandbox %s is %s, not member %s's: left alone", name, describeOwner(tags, r.ClusterID), c.Member)
	}
}

// recordedMember is the member status.claim names, when it still exists,
// has the recorded UID, belongs to the pool and is marked for sbx; nil
// otherwise. Read uncached: the mark was written a moment ago.
func (r *SandboxReconciler) recordedMember(ctx context.Context, sbx *sandboxv1.Sandbox) (*sandboxv1.Sandbox, error) {
	c := sbx.Status.Claim
	m := &sandboxv1.Sandbox{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: c.Member}, m)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get member %s: %w", c.Member, err)
	}
	if string(m.UID) != c.MemberUID || m.Labels[sandboxv1.LabelClaimedBy] != string(sbx.UID) || !isPoolMember(m, c.Pool) {
		return nil, nil
	}
	return m, nil
}

// takeSession applies sbx's spec to the handed-over sandbox (its network
// policy reaches the running session at once) and resumes a stopped one.
func (r *SandboxReconciler) takeSession(ctx context.Context, sbx, member *sandboxv1.Sandbox, name string, resp *vercel.SandboxResponse) error {
	running := resp.Session != nil && (resp.Session.Status == vercel.SessionRunning || resp.Session.Status == vercel.SessionPending)
	id := ""
	if running {
		id = resp.Session.ID
	}
	secrets := &secretReader{reader: r.APIReader, namespace: sbx.Namespace}
	if err := r.apply(httplimit.WithPriority(ctx), sbx, id, secrets); err != nil {
		return err
	}
	r.recordSecrets(sbx, secrets)
	if id != "" && r.claimedStale(sbx, member, id, secrets) {
		// The session's env was read for the member; Vercel cannot change
		// it, so it is stale until it stops, as after a rotation.
		sbx.Status.Secrets.StaleSession = id
		setCondition(&sbx.Status.Conditions, sbx.Generation, sandboxv1.ConditionSecretsCurrent, metav1.ConditionFalse, sandboxv1.ReasonSecretRotated,
			fmt.Sprintf("Session %s, taken from member %s, keeps the env values it started with until it stops; the next session gets the current ones", id, sbx.Status.Claim.Member))
	}
	sbx.Status.ObservedGeneration = sbx.Generation
	if running || sbx.Spec.State == sandboxv1.SandboxStateStopped {
		return nil
	}
	if _, err := r.api(ctx).GetSandbox(ctx, name, true); err != nil {
		return fmt.Errorf("resume sandbox %s on claim: %w", name, err)
	}
	return nil
}

// claimed records a finished hand-over: Claimed=True, an event and the
// metrics (the claim's time from since; zero: unknown, not observed).
func (r *SandboxReconciler) claimed(ctx context.Context, sbx *sandboxv1.Sandbox, member *sandboxv1.Sandbox, name string, since time.Time) {
	c := sbx.Status.Claim
	msg := fmt.Sprintf("Took member %s of SandboxPool %q: Vercel sandbox %s", c.Member, c.Pool, name)
	setCondition(&sbx.Status.Conditions, sbx.Generation, sandboxv1.ConditionClaimed, metav1.ConditionTrue, sandboxv1.ReasonClaimed, msg)
	logf.FromContext(ctx).Info("Claimed pool member", "pool", c.Pool, "member", c.Member, "vercelName", name)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.ReasonClaimed, "Claim", "%s", msg)
	idle := 0.0
	if member != nil {
		if rc := meta.FindStatusCondition(member.Status.Conditions, sandboxv1.ConditionReady); rc != nil && rc.Status == metav1.ConditionTrue {
			idle = r.now().Sub(rc.LastTransitionTime.Time).Seconds()
		}
	}
	seconds := -1.0
	if !since.IsZero() {
		seconds = r.now().Sub(since).Seconds()
	}
	metrics.ObserveClaim(sbx.Namespace, c.Pool, "hit", seconds, idle)
}

// claimLost gives up a recorded claim whose member or sandbox vanished
// before the hand-over (deleted by someone else): the Sandbox is created
// cold, under its own derived name.
func (r *SandboxReconciler) claimLost(ctx context.Context, sbx *sandboxv1.Sandbox, why string) (claimOutcome, error) {
	base := sbx.DeepCopy()
	st := &sbx.Status
	st.Claim, st.BootedFrom, st.Setup, st.Recreations = nil, nil, nil, 0
	st.VercelName = remoteName(sbx)
	return r.goCold(ctx, sbx, base, sandboxv1.ReasonPoolEmpty, "Created cold: "+why)
}

// claimedMember reports whether sbx is a pool member a claimant marked: its
// Vercel sandbox is the claimant's to take, and its own reconciler leaves
// it alone until it is deleted.
func claimedMember(sbx *sandboxv1.Sandbox) bool {
	ref := metav1.GetControllerOf(sbx)
	return sbx.Labels[sandboxv1.LabelClaimedBy] != "" && ref != nil && ref.Kind == "SandboxPool" && isPoolMember(sbx, ref.Name)
}

// handedOverTo is the name of the claimant a pool member's Vercel sandbox
// was handed over to, "" when it was not: sbx is a member marked by a
// claimant (claimedMember) and tags name that claimant's UID — the re-tag
// of the hand-over, which only that claimant makes. Any other sandbox not
// tagged for sbx is left alone with a warning, as before.
func handedOverTo(sbx *sandboxv1.Sandbox, tags map[string]string, cluster string) string {
	uid := types.UID(sbx.Labels[sandboxv1.LabelClaimedBy])
	if !claimedMember(sbx) || ownerOf(tags, cluster, uid) != ownedBySelf {
		return ""
	}
	if name := sbx.Annotations[sandboxv1.AnnotationClaimant]; name != "" {
		return name
	}
	return "with UID " + string(uid)
}

// claimedStale reports whether the running session a claim took holds env
// values other than the claimant's Secrets hold now: the member's status
// marked it stale, a Secret's values differ from the digest the member
// recorded (keyed by the member's UID), or nothing tells (no member left,
// after a restart).
func (r *SandboxReconciler) claimedStale(sbx, member *sandboxv1.Sandbox, session string, secrets *secretReader) bool {
	var env []string
	for n, u := range secretUses(&sbx.Spec) {
		if u&useEnv != 0 {
			env = append(env, n)
		}
	}
	if len(env) == 0 {
		return false
	}
	if member == nil || member.Status.Secrets == nil || member.Status.Secrets.StaleSession == session {
		return true
	}
	recorded := recordedSecrets(&member.Status)
	for _, n := range env {
		if sec := secrets.cache[n]; sec == nil || !sameValues(recorded[n].Digest, r.DigestKey, member.UID, n, sec, secrets.keys[n]) {
			return true
		}
	}
	return false
}

// markedMemory is how long markedMembers remembers a mark: far longer than
// the informer cache takes to show it.
const markedMemory = time.Minute

// markedMembers remembers the pool members this manager saw marked for a
// claimant (its own marks, and conflicts that turned out to be another
// claimant's) for markedMemory. The informer cache shows a mark a moment
// after it is written; in a burst every claimant would otherwise try every
// member the cache still shows unmarked, an update and an uncached read
// each, and the claimants that find none go cold only after trying all.
// It decides nothing about who gets a member (the update at the member's
// resourceVersion does): a member skipped because of it stays in the pool
// for the next claim.
type markedMembers struct {
	mu sync.Mutex
	at map[types.UID]time.Time
}

func (m *markedMembers) add(uid types.UID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at == nil {
		m.at = map[types.UID]time.Time{}
	}
	for u, t := range m.at {
		if now.Sub(t) > markedMemory {
			delete(m.at, u)
		}
	}
	m.at[uid] = now
}

func (m *markedMembers) has(uid types.UID, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.at[uid]
	return ok && now.Sub(t) <= markedMemory
}
