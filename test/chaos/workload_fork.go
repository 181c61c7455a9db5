package chaos

// The workload's SandboxForks: creating and scaling them.

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// forkDeadline is the forks' failureDeadlineSeconds: the rest of the chaos
// and the whole convergence window. Under the soak's faults a source can stay
// unready for longer than the default 10 minutes (a build starved of creates
// by 429s for 15 minutes, a capture waiting for a heartbeat to resume its
// source), and a fork failed by its deadline stays Failed by design, which is
// not the declaration the workload means to make: that its source converges.
// Never below the default (600 s, the short run's is shorter) nor above the
// API's maximum (604800 s).
func (w *workload) forkDeadline() int64 {
	return min(max(int64((w.h.cfg.Duration+w.h.cfg.Converge).Seconds()), 600), 604800)
}

// fork forks a snapshot, or a Sandbox (resumed first if paused, as for a
// capture).
func (w *workload) fork(ctx context.Context, ns *nsState) error {
	f := &sandboxv1.SandboxFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: w.name("fork")},
		Spec: sandboxv1.SandboxForkSpec{Replicas: ptr.To(int32(1 + w.rng.IntN(3))),
			FailureDeadlineSeconds: ptr.To(w.forkDeadline())},
	}
	if w.rng.IntN(3) == 0 {
		f.Spec.Template.Spec.TimeoutSeconds = w.timeout()
	}
	if w.rng.IntN(3) == 0 {
		f.Spec.Template.Spec.Env = w.env(ns)
	}
	snap := pick(w.rng, ns.snapshots)
	if snap != "" && w.rng.IntN(5) < 3 {
		f.Spec.Source.SnapshotRef = &sandboxv1.LocalObjectReference{Name: snap}
	} else {
		src := pick(w.rng, ns.sandboxes)
		if src == "" {
			return w.createSandbox(ctx, ns, nil)
		}
		f.Spec.Source.SandboxRef = &sandboxv1.LocalObjectReference{Name: src}
		f.Spec.KeepSourceRunning = w.rng.IntN(2) == 0
		if err := w.runSource(ctx, ns.name, src); err != nil {
			return w.refusal(opFork, f.Name, err)
		}
	}
	if err := w.c.Create(ctx, f); err != nil {
		return w.refusal(opFork, f.Name, err)
	}
	ns.forks[f.Name] = true
	w.did(opFork, ns.name+"/"+f.Name)
	return nil
}

func (w *workload) scale(ctx context.Context, ns *nsState) error {
	name := pick(w.rng, ns.forks)
	if name == "" {
		return nil
	}
	replicas := int32(w.rng.IntN(4))
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	f := &sandboxv1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: name}}
	if err := w.c.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return w.refusal(opScale, name, err)
	}
	w.did(opScale, fmt.Sprintf("%s/%s to %d", ns.name, name, replicas))
	return nil
}
