package controllers

// A SandboxFork's children: how many there are, what each is made of (the
// captured source's spec under the template's overrides) and their state in
// the fork's status.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// scale creates the missing children, deletes the surplus (highest indexes
// first) and records every child's state. Before creating a child it checks
// that the fork's creator may read every Secret the child inherits; refused
// says it may not (described in status) and no child was created.
func (r *SandboxForkReconciler) scale(ctx context.Context, fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, inherited *sandboxv1.SourceSandboxSpec) (refused bool, err error) {
	want := replicasOf(fork)
	children, err := r.children(ctx, fork)
	if err != nil {
		return false, err
	}
	have := childrenByIndex(fork, children)
	if err := r.scaleDown(ctx, fork, have, want); err != nil {
		return false, err
	}
	if refused, err := r.scaleUp(ctx, fork, snap, inherited, have, want); refused || err != nil {
		return refused, err
	}
	recordChildren(fork, have, want)
	return false, nil
}

// replicasOf is the number of children the fork asks for (default 1).
func replicasOf(fork *sandboxv1.SandboxFork) int32 {
	if fork.Spec.Replicas != nil {
		return *fork.Spec.Replicas
	}
	return 1
}

// childrenByIndex maps the fork's children to their indexes; a child whose
// index label does not match its name is not one of them.
func childrenByIndex(fork *sandboxv1.SandboxFork, children []sandboxv1.Sandbox) map[int32]*sandboxv1.Sandbox {
	have := map[int32]*sandboxv1.Sandbox{}
	for i := range children {
		if idx, ok := childIndex(fork, &children[i]); ok {
			have[idx] = &children[i]
		}
	}
	return have
}

// scaleDown deletes the children of an index want or above.
func (r *SandboxForkReconciler) scaleDown(ctx context.Context, fork *sandboxv1.SandboxFork, have map[int32]*sandboxv1.Sandbox, want int32) error {
	for idx, child := range have {
		if idx >= want && child.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, child); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete child %s: %w", child.Name, err)
			}
			r.Recorder.Eventf(fork, child, corev1.EventTypeNormal, "ScaledDown", "Delete", "Deleted child Sandbox %s", child.Name)
		}
	}
	return nil
}

// scaleUp creates the missing children below want and adds them to have,
// once the fork's creator is known to read every Secret they inherit;
// refused says it is not, and nothing was created.
func (r *SandboxForkReconciler) scaleUp(ctx context.Context, fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, inherited *sandboxv1.SourceSandboxSpec, have map[int32]*sandboxv1.Sandbox, want int32) (refused bool, err error) {
	if !anyMissing(have, want) {
		return false, nil
	}
	msg, err := r.refusedSecrets(ctx, fork, snap, inherited)
	if err != nil {
		return false, err
	}
	if msg != "" {
		r.refuseSecrets(fork, msg)
		return true, nil
	}
	for idx := int32(0); idx < want; idx++ {
		if _, ok := have[idx]; ok {
			continue
		}
		child, err := r.createChild(ctx, fork, snap, inherited, idx)
		if err != nil {
			return false, err
		}
		have[idx] = child
	}
	return false, nil
}

// createChild creates child number idx, of the fork's class.
func (r *SandboxForkReconciler) createChild(ctx context.Context, fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, inherited *sandboxv1.SourceSandboxSpec, idx int32) (*sandboxv1.Sandbox, error) {
	child := r.newChild(fork, snap, inherited, idx)
	r.inheritClass(ctx, child)
	switch err := r.Create(ctx, child); {
	case apierrors.IsAlreadyExists(err):
		// Created by an earlier reconcile the cache does not show yet.
	case err != nil:
		return nil, fmt.Errorf("create child %s: %w", child.Name, err)
	default:
		r.Recorder.Eventf(fork, child, corev1.EventTypeNormal, "ChildCreated", "Create", "Created child Sandbox %s", child.Name)
	}
	return child, nil
}

// recordChildren writes the state of the children below want (the others
// are being deleted) into the fork's status: each child's phase and
// readiness, the counts, and the fork's Phase and Ready, Ready once every
// wanted child is.
func recordChildren(fork *sandboxv1.SandboxFork, have map[int32]*sandboxv1.Sandbox, want int32) {
	st := &fork.Status
	st.Children = st.Children[:0]
	st.Replicas, st.ReadyReplicas = 0, 0
	idxs := make([]int32, 0, len(have))
	for idx := range have {
		idxs = append(idxs, idx)
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	children := make([]*sandboxv1.Sandbox, 0, len(idxs))
	for _, idx := range idxs {
		child := have[idx]
		children = append(children, child)
		if idx >= want {
			continue // being deleted
		}
		ready := meta.IsStatusConditionTrue(child.Status.Conditions, sandboxv1.ConditionReady)
		st.Children = append(st.Children, sandboxv1.ForkChildStatus{Name: child.Name, Phase: child.Status.Phase, Ready: ready})
		st.Replicas++
		if ready {
			st.ReadyReplicas++
		}
	}
	if len(st.Children) == 0 {
		st.Children = nil
	}
	// Children being deleted still count: what they used was spent.
	st.Usage = forkUsage(children)
	st.ReadyText = fmt.Sprintf("%d/%d", st.ReadyReplicas, want)
	if st.ReadyReplicas == want && st.Replicas == want {
		st.Phase = sandboxv1.ForkReady
		setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionTrue, sandboxv1.ReasonAllReady,
			fmt.Sprintf("%d of %d children are Ready", st.ReadyReplicas, want))
	} else {
		st.Phase = sandboxv1.ForkCreating
		setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonCreatingChildren,
			fmt.Sprintf("%d of %d children are Ready", st.ReadyReplicas, want))
	}
}

// anyMissing reports whether a child of an index below want does not exist.
func anyMissing(have map[int32]*sandboxv1.Sandbox, want int32) bool {
	for idx := int32(0); idx < want; idx++ {
		if _, ok := have[idx]; !ok {
			return true
		}
	}
	return false
}

// newChild builds child number idx, booting from the fork's snapshot: the
// inherited source spec (if any) under the template's overrides.
func (r *SandboxForkReconciler) newChild(fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, inherited *sandboxv1.SourceSandboxSpec, idx int32) *sandboxv1.Sandbox {
	// The API server refuses controller keys (sandbox.sentry.io/) in a
	// template; a fork stored before that rule may still carry them
	// (abandon-remote would leak the children's sandboxes), so they are
	// dropped here too.
	labels := withoutReservedKeys(fork.Spec.Template.Metadata.Labels)
	labels[sandboxv1.LabelFork] = labelValue(fork.Name)
	labels[sandboxv1.LabelForkIndex] = strconv.Itoa(int(idx))
	labels[sandboxv1.LabelSourceSnapshot] = labelValue(snap.Name)
	if ref := fork.Spec.Source.SandboxRef; ref != nil {
		labels[sandboxv1.LabelSourceSandbox] = labelValue(ref.Name)
	}
	child := &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   fork.Namespace,
			Name:        childName(fork, idx),
			Labels:      labels,
			Annotations: withoutReservedKeys(fork.Spec.Template.Metadata.Annotations),
		},
		Spec: childSpec(fork, snap, inherited),
	}
	if len(child.Annotations) == 0 {
		child.Annotations = nil
	}
	// The fork is always the controller owner; the error is impossible for
	// two namespaced objects in one namespace.
	_ = controllerutil.SetControllerReference(fork, child, r.Scheme())
	return child
}

// childSpec is a child's spec: the inherited source spec, each field the
// template sets replacing it, booting from snap. Nothing else of the source
// is inherited: not setup (the snapshot holds its result), not state, and
// nothing absolute in time (shutdownTime), which would stop or delete every
// child created after it passed.
func childSpec(fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, inherited *sandboxv1.SourceSandboxSpec) sandboxv1.SandboxSpec {
	spec := sandboxv1.SandboxSpec{
		Source:         sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: snap.Name}},
		DeletionPolicy: fork.Spec.DeletionPolicy,
	}
	if in := inherited.DeepCopy(); in != nil {
		spec.Resources, spec.Ports, spec.TimeoutSeconds = in.Resources, in.Ports, in.TimeoutSeconds
		spec.Env, spec.NetworkPolicy, spec.Persistent = in.Env, in.NetworkPolicy, in.Persistent
	}
	o := fork.Spec.Template.Spec.DeepCopy()
	if o.Resources != nil {
		spec.Resources = o.Resources
	}
	if o.Env != nil {
		spec.Env = o.Env
	}
	if o.TimeoutSeconds != nil {
		spec.TimeoutSeconds = o.TimeoutSeconds
	}
	if o.Ports != nil {
		spec.Ports = o.Ports
	}
	if o.NetworkPolicy != nil {
		spec.NetworkPolicy = o.NetworkPolicy
	}
	if o.State != "" {
		spec.State = o.State
	}
	return spec
}

// sourceSpecOf is what a capture records of the Sandbox it takes: the part
// of its spec a fork's children inherit (see childSpec).
func sourceSpecOf(sbx *sandboxv1.Sandbox) *sandboxv1.SourceSandboxSpec {
	in := sbx.Spec.DeepCopy()
	return &sandboxv1.SourceSandboxSpec{
		Resources:      in.Resources,
		Ports:          in.Ports,
		TimeoutSeconds: in.TimeoutSeconds,
		Env:            in.Env,
		NetworkPolicy:  in.NetworkPolicy,
		Persistent:     in.Persistent,
	}
}

func (r *SandboxForkReconciler) children(ctx context.Context, fork *sandboxv1.SandboxFork) ([]sandboxv1.Sandbox, error) {
	list := &sandboxv1.SandboxList{}
	if err := r.List(ctx, list, client.InNamespace(fork.Namespace), client.MatchingLabels{sandboxv1.LabelFork: labelValue(fork.Name)}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, c := range list.Items {
		if metav1.IsControlledBy(&c, fork) {
			out = append(out, c)
		}
	}
	return out, nil
}

// childIndex is the index of one of the fork's children: its index label,
// when its name is the one that index gives.
func childIndex(fork *sandboxv1.SandboxFork, child *sandboxv1.Sandbox) (int32, bool) {
	n, err := strconv.ParseInt(child.Labels[sandboxv1.LabelForkIndex], 10, 32)
	if err != nil || n < 0 || child.Name != childName(fork, int32(n)) {
		return 0, false
	}
	return int32(n), true
}

// childName is <fork>-<index>, with the fork's name shortened and hashed
// when that would be too long for a name.
func childName(fork *sandboxv1.SandboxFork, idx int32) string {
	return derivedName(fork.Name, "-"+strconv.Itoa(int(idx)))
}

// withoutReservedKeys copies m without the keys of the controller's own
// prefix (sandbox.sentry.io/).
func withoutReservedKeys(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !strings.HasPrefix(k, "sandbox.sentry.io/") {
			out[k] = v
		}
	}
	return out
}
