package controllers

// A SandboxPool's members: creating them from the template, replacing stale
// ones, pausing them (memberState Stopped), scaling down, and deleting those
// a claimant marked and then vanished.

import (
	"context"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// keepMembers brings the unclaimed, current members to the target and
// records the counts and the Ready condition.
func (r *SandboxPoolReconciler) keepMembers(ctx context.Context, pool *sandboxv1.SandboxPool, members, claimants []sandboxv1.Sandbox) error {
	st := &pool.Status
	state := memberStateOf(pool)
	var live []*sandboxv1.Sandbox // unclaimed, current, not being deleted
	ready := int32(0)
	for i := range members {
		m := &members[i]
		switch kind := classifyMember(m, st.SnapshotID, state); kind {
		case memberStale:
			if err := r.deleteMember(ctx, pool, m, "Replaced", "it booted from an older snapshot than the template's, or failed"); err != nil {
				return err
			}
		case memberClaimed:
			if err := r.deleteOrphan(ctx, pool, m, claimants); err != nil {
				return err
			}
		case memberClaimable, memberPending:
			if kind == memberClaimable {
				ready++
			}
			live = append(live, m)
			if err := r.keepMemberState(ctx, pool, m); err != nil {
				return err
			}
		}
	}
	pending := r.pendingCreates(pool, members)
	have := int32(len(live) + pending)
	switch {
	case have < st.TargetReplicas:
		if err := r.createMembers(ctx, pool, st.TargetReplicas-have); err != nil {
			return err
		}
	case int32(len(live)) > st.TargetReplicas:
		if err := r.scaleDownMembers(ctx, pool, live, int32(len(live))-st.TargetReplicas); err != nil {
			return err
		}
	}
	st.Replicas = min(int32(len(live)), max(st.TargetReplicas, 0))
	st.ReadyReplicas = min(ready, st.Replicas)
	st.ReadyText = fmt.Sprintf("%d/%d", st.ReadyReplicas, st.TargetReplicas)
	status, reason, msg := poolReadiness(st.ReadyReplicas, st.TargetReplicas, live)
	setCondition(&st.Conditions, pool.Generation, sandboxv1.ConditionReady, status, reason, msg)
	return nil
}

// poolReadiness is the pool's Ready condition: Filled once ready reaches
// target; otherwise QuotaExceeded when a member waits for a SandboxQuota
// (members count like any Sandbox, so a quota caps the pool: it waits, it
// does not create more), else Filling.
func poolReadiness(ready, target int32, live []*sandboxv1.Sandbox) (metav1.ConditionStatus, string, string) {
	msg := fmt.Sprintf("%d of %d members are ready to claim", ready, target)
	if ready >= target {
		return metav1.ConditionTrue, sandboxv1.ReasonPoolFilled, msg
	}
	waiting, why := 0, ""
	for _, m := range live {
		if c := meta.FindStatusCondition(m.Status.Conditions, sandboxv1.ConditionReady); c != nil && c.Reason == sandboxv1.ReasonQuotaExceeded {
			waiting++
			why = c.Message
		}
	}
	if waiting > 0 {
		return metav1.ConditionFalse, sandboxv1.ReasonQuotaExceeded, fmt.Sprintf("%s; %d wait for a SandboxQuota: %s", msg, waiting, why)
	}
	return metav1.ConditionFalse, sandboxv1.ReasonPoolFilling, msg
}

// memberStateOf is spec.memberState, Running by default.
func memberStateOf(pool *sandboxv1.SandboxPool) sandboxv1.SandboxState {
	if pool.Spec.MemberState == "" {
		return sandboxv1.SandboxStateRunning
	}
	return pool.Spec.MemberState
}

// createMembers creates n members.
func (r *SandboxPoolReconciler) createMembers(ctx context.Context, pool *sandboxv1.SandboxPool, n int32) error {
	for range n {
		m := r.newMember(pool)
		if err := r.Create(ctx, m); err != nil {
			return fmt.Errorf("create member: %w", err)
		}
		r.expectCreate(pool, m.Name)
		r.Recorder.Eventf(pool, m, "Normal", "MemberCreated", "Create", "Created member Sandbox %s", m.Name)
	}
	return nil
}

// newMember builds a member from the template: the template's spec with the
// pool's idle window as its session window and idle action, so a member
// nobody claims ends as spec.idle says, by the Sandbox controller's own
// idle handling.
func (r *SandboxPoolReconciler) newMember(pool *sandboxv1.SandboxPool) *sandboxv1.Sandbox {
	t := &pool.Spec.Template
	labels := withoutReservedKeys(t.Metadata.Labels)
	labels[sandboxv1.LabelPool] = labelValue(pool.Name)
	spec := *t.Spec.DeepCopy()
	after, action := int64(defaultPoolIdleSeconds), sandboxv1.PoolIdleDelete
	if i := pool.Spec.Idle; i != nil {
		if i.AfterSeconds != nil {
			after = *i.AfterSeconds
		}
		if i.Action != "" {
			action = i.Action
		}
	}
	spec.TimeoutSeconds = ptr.To(after)
	spec.State = sandboxv1.SandboxStateRunning
	spec.Idle = &sandboxv1.IdlePolicy{Action: sandboxv1.IdleStop}
	switch {
	case action == sandboxv1.PoolIdleDelete && memberStateOf(pool) == sandboxv1.SandboxStateStopped:
		spec.Idle.DeleteObjectAfterSeconds = ptr.To(after)
	case action == sandboxv1.PoolIdleDelete:
		spec.Idle.Action = sandboxv1.IdleDelete
	}
	m := &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    pool.Namespace,
			GenerateName: memberPrefix(pool.Name),
			Labels:       labels,
			Annotations:  withoutReservedKeys(t.Metadata.Annotations),
		},
		Spec: spec,
	}
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	// The pool is always the controller owner; the error is impossible for
	// two namespaced objects in one namespace.
	_ = controllerutil.SetControllerReference(pool, m, r.Scheme())
	return m
}

// memberPrefix is the generateName of a pool's members: the pool's name
// and "-", cut so that the 5 random characters fit.
func memberPrefix(pool string) string {
	return derivedName(pool, "-")[:min(len(pool)+1, maxObjectNameLength-5)]
}

// keepMemberState holds an unclaimed member in the pool's memberState. A
// pool that keeps members Stopped pauses a member once its setup succeeded
// in a running session (a running, set-up member is claimable, and billed
// while it runs). A pool that keeps them Running resumes a member something
// else stopped — a SandboxQuota budget with enforcement Stop: the resume
// waits for the budget like any start, so the pool fills again by itself
// when the budget lets go.
func (r *SandboxPoolReconciler) keepMemberState(ctx context.Context, pool *sandboxv1.SandboxPool, m *sandboxv1.Sandbox) error {
	want := memberStateOf(pool)
	switch {
	case want == sandboxv1.SandboxStateStopped && m.Spec.State != sandboxv1.SandboxStateStopped && memberRunningReady(m):
	case want != sandboxv1.SandboxStateStopped && m.Spec.State == sandboxv1.SandboxStateStopped:
	default:
		return nil
	}
	m.Spec.State = want
	// At its resourceVersion: a claimant that marked it first wins.
	if err := r.Update(ctx, m); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("set member %s to %s: %w", m.Name, want, err)
	}
	return nil
}

// scaleDownMembers deletes n of live, the least ready first, then the
// newest.
func (r *SandboxPoolReconciler) scaleDownMembers(ctx context.Context, pool *sandboxv1.SandboxPool, live []*sandboxv1.Sandbox, n int32) error {
	state := memberStateOf(pool)
	sort.SliceStable(live, func(i, j int) bool {
		ci := classifyMember(live[i], pool.Status.SnapshotID, state) == memberClaimable
		cj := classifyMember(live[j], pool.Status.SnapshotID, state) == memberClaimable
		if ci != cj {
			return !ci
		}
		return live[j].CreationTimestamp.Before(&live[i].CreationTimestamp)
	})
	for _, m := range live[:n] {
		if err := r.deleteMember(ctx, pool, m, "ScaledDown", "the pool has more members than its target"); err != nil {
			return err
		}
	}
	return nil
}

// deleteMember deletes a member at the resourceVersion the pool saw: if a
// claimant marked it since, the delete fails and the member is the
// claimant's.
func (r *SandboxPoolReconciler) deleteMember(ctx context.Context, pool *sandboxv1.SandboxPool, m *sandboxv1.Sandbox, reason, why string) error {
	err := r.Delete(ctx, m, client.Preconditions{UID: &m.UID, ResourceVersion: &m.ResourceVersion})
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("delete member %s: %w", m.Name, err)
	}
	eventDeleted(r.Recorder, pool, m, reason, why)
	return nil
}

// deleteOrphan deletes a member marked by a claimant that no longer exists
// (deleted in the middle of its claim), looked up uncached by the name the
// member records: the cache may not show a claimant created a moment ago.
// The member's finalizer deletes the Vercel sandbox only if it still carries
// the member's owner tags, so one already re-tagged for the claimant is left
// to the claimant's own finalizer.
func (r *SandboxPoolReconciler) deleteOrphan(ctx context.Context, pool *sandboxv1.SandboxPool, m *sandboxv1.Sandbox, claimants []sandboxv1.Sandbox) error {
	uid := types.UID(m.Labels[sandboxv1.LabelClaimedBy])
	for i := range claimants {
		if claimants[i].UID == uid {
			return nil
		}
	}
	c := &sandboxv1.Sandbox{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: m.Annotations[sandboxv1.AnnotationClaimant]}, c)
	switch {
	case err == nil && c.UID == uid:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("get claimant of member %s: %w", m.Name, err)
	}
	return r.deleteMember(ctx, pool, m, "OrphanClaim", fmt.Sprintf("the Sandbox with UID %s that claimed it is gone", uid))
}

// expectCreate remembers a created member until the cache shows it.
func (r *SandboxPoolReconciler) expectCreate(pool *sandboxv1.SandboxPool, name string) {
	v, _ := r.creating.LoadOrStore(client.ObjectKeyFromObject(pool), &pendingCreates{names: map[string]time.Time{}})
	p := v.(*pendingCreates)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names[name] = r.now()
}

// pendingCreates counts the members created but not in members yet, and
// forgets those that are (or have waited past pendingCreateTTL).
func (r *SandboxPoolReconciler) pendingCreates(pool *sandboxv1.SandboxPool, members []sandboxv1.Sandbox) int {
	v, ok := r.creating.Load(client.ObjectKeyFromObject(pool))
	if !ok {
		return 0
	}
	p := v.(*pendingCreates)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range members {
		delete(p.names, members[i].Name)
	}
	now := r.now()
	for name, at := range p.names {
		if now.Sub(at) > pendingCreateTTL {
			delete(p.names, name)
		}
	}
	return len(p.names)
}
