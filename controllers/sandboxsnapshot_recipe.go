package controllers

// A recipe's inputs, as the reconcile observes them: its steps in run
// order, the builder's derived name, the content hash that keys sharing
// and reuse, and whether its base SandboxSnapshot is ready (the chain
// walked for cycles and failures). Nothing here calls Vercel.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/recipe"
)

// buildStep is one clone or setup step of a recipe, in run order.
type buildStep struct {
	label string
	repo  *sandboxv1.RecipeRepository
	setup *sandboxv1.RecipeCommand
}

func buildSteps(r *sandboxv1.SnapshotRecipe) []buildStep {
	var steps []buildStep
	for i := range r.Repositories {
		repo := &r.Repositories[i]
		steps = append(steps, buildStep{label: "clone " + recipe.CleanPath(repo.Path), repo: repo})
	}
	for i := range r.Setup {
		s := &r.Setup[i]
		name := s.Name
		if name == "" {
			name = s.Command
		}
		steps = append(steps, buildStep{label: fmt.Sprintf("setup %d/%d (%s)", i+1, len(r.Setup), name), setup: s})
	}
	return steps
}

// builderName is the Vercel sandbox a build runs in: derived from the
// cluster, the namespace, the content hash and the snapshot the build
// replaces, so every user of the hash in the namespace (and a restarted
// controller) finds the same builder, and no other cluster sharing the Vercel
// project ever does. It holds no object UID because users of a hash hand the
// builder over when its driver is deleted; the k8s-uid tag names the driver.
func builderName(cluster, ns, hash, replaces string) string {
	gen := "0"
	if replaces != "" {
		gen = shortHash(replaces, 8)
	}
	h := hash
	if len(h) > 16 {
		h = h[:16]
	}
	return sanitizeName(truncateNS(ns) + "-build-" + clusterShort(cluster) + "-" + h + "-" + gen)
}

// truncateNS keeps builder names within Vercel's 128 characters.
func truncateNS(ns string) string {
	if len(ns) > 63 {
		return ns[:63]
	}
	return ns
}

// contentHash computes the recipe's content hash. It returns a message
// instead when the base snapshot is needed but not ready; an object that
// already has a hash keeps it meanwhile.
func (r *SandboxSnapshotReconciler) contentHash(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (string, string) {
	rcp := snap.Spec.Source.Recipe
	if rcp == nil {
		return "", ""
	}
	if rcp.BaseSnapshotRef == nil {
		return recipe.Hash(rcp, ""), ""
	}
	if snap.Status.Phase == sandboxv1.SnapshotFailed && failedOnRef(snap.Status.Conditions) {
		// Final: no base that appears later builds it (see waitForBase).
		return "", "failed"
	}
	base, msg := r.readyBase(ctx, snap)
	if base == nil {
		if snap.Status.ContentHash != "" {
			return snap.Status.ContentHash, ""
		}
		return "", msg
	}
	id := base.Status.ContentHash
	if id == "" {
		id = base.Status.SnapshotID
	}
	return recipe.Hash(rcp, id), ""
}

// readyBase returns the recipe's base SandboxSnapshot when it is ready to use,
// else a message saying why not.
func (r *SandboxSnapshotReconciler) readyBase(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (*sandboxv1.SandboxSnapshot, string) {
	ref := snap.Spec.Source.Recipe.BaseSnapshotRef
	base := &sandboxv1.SandboxSnapshot{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: ref.Name}, base); err != nil {
		return nil, fmt.Sprintf("Waiting for base SandboxSnapshot %q: %v", ref.Name, err)
	}
	if msg := classMismatch(ctx, base, "Base SandboxSnapshot", "spec.source.recipe.baseSnapshotRef"); msg != "" {
		return nil, msg
	}
	if !base.Status.ReadyToUse || base.Status.SnapshotID == "" {
		return nil, fmt.Sprintf("Waiting for base SandboxSnapshot %q to be ready to use", ref.Name)
	}
	return base, ""
}

// waitForBase reports a recipe whose base is not ready to use. A base that
// can never become ready — it does not exist, it is Failed, or the chain of
// bases has a cycle — is also reported on ResolvedRefs, and fails this object
// after the reference deadline, for good (spec.source is immutable). A base
// that appears before then is built on as usual.
func (r *SandboxSnapshotReconciler) waitForBase(ctx context.Context, snap *sandboxv1.SandboxSnapshot, msg string) (ctrl.Result, error) {
	st := &snap.Status
	if st.Phase == sandboxv1.SnapshotFailed && failedOnRef(st.Conditions) {
		return ctrl.Result{}, nil
	}
	bad, err := r.baseProblem(ctx, snap)
	if err != nil {
		return ctrl.Result{}, err
	}
	if bad == nil {
		markResolved(&st.Conditions, snap.Generation, "Every SandboxSnapshot in the chain of baseSnapshotRefs exists")
		setSnapshotReady(snap, snapPending(sandboxv1.ReasonWaitingForBase, msg))
		return ctrl.Result{RequeueAfter: snapshotWaitPoll}, nil
	}
	w := markUnresolved(&st.Conditions, snap.Generation, *bad, r.now(), referenceDeadline(r.ReferenceDeadline))
	if w.failed {
		setSnapshotReady(snap, snapFailed(bad.reason, w.message))
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, bad.reason, "Build", "%s", w.message)
		return ctrl.Result{}, nil
	}
	setSnapshotReady(snap, snapPending(bad.reason, w.message))
	return ctrl.Result{RequeueAfter: min(w.retry, snapshotWaitPoll)}, nil
}

// maxBaseChain bounds the walk along baseSnapshotRefs; a longer chain is
// not judged.
const maxBaseChain = 32

// baseProblem follows baseSnapshotRef from snap until a base that is ready
// to use or has no base of its own, and says why the chain can never become
// ready: a SandboxSnapshot in it is met twice (a cycle: each waits for the
// other), is Failed, or does not exist; of the last two, the one nearest to
// snap. A cycle is reported even when a member has already failed for it, so
// that every member gives the same reason. Nil when the chain may still
// become ready.
func (r *SandboxSnapshotReconciler) baseProblem(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (*unresolvedRef, error) {
	chain := []string{snap.Name}
	path := func() string { return strings.Join(chain, " -> ") }
	var failed *unresolvedRef
	for cur := snap; len(chain) <= maxBaseChain; {
		rcp := cur.Spec.Source.Recipe
		if rcp == nil || rcp.BaseSnapshotRef == nil {
			return failed, nil
		}
		name := rcp.BaseSnapshotRef.Name
		if slices.Contains(chain, name) {
			chain = append(chain, name)
			return &unresolvedRef{sandboxv1.ReasonBaseSnapshotCycle, fmt.Sprintf("The chain of baseSnapshotRefs %s is a cycle: no base in it can be built", path())}, nil
		}
		chain = append(chain, name)
		base := &sandboxv1.SandboxSnapshot{}
		switch err := r.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: name}, base); {
		case apierrors.IsNotFound(err) && failed != nil:
			return failed, nil
		case apierrors.IsNotFound(err):
			return &unresolvedRef{sandboxv1.ReasonBaseSnapshotNotFound, fmt.Sprintf("Base SandboxSnapshot %q does not exist (baseSnapshotRef chain %s)", name, path())}, nil
		case err != nil:
			return nil, fmt.Errorf("get base SandboxSnapshot %s: %w", name, err)
		}
		if msg := classMismatch(ctx, base, "Base SandboxSnapshot", "spec.source.recipe.baseSnapshotRef"); msg != "" && cur == snap {
			return &unresolvedRef{sandboxv1.ReasonClassMismatch, msg}, nil
		}
		switch {
		case base.Status.ReadyToUse:
			return failed, nil
		case base.Status.Phase == sandboxv1.SnapshotFailed && failed == nil:
			failed = &unresolvedRef{sandboxv1.ReasonBaseSnapshotFailed, fmt.Sprintf("Base SandboxSnapshot %q is Failed (baseSnapshotRef chain %s): %s", name, path(), readyMessage(base.Status.Conditions))}
		}
		cur = base
	}
	return failed, nil
}
