package controllers

// What a SandboxSnapshot takes from its SandboxClass (classes.go): the
// Vercel client it is reconciled with, and the peers it may share a recipe
// build with.

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// api is the Vercel client of the SandboxSnapshot being reconciled (its
// class's).
func (r *SandboxSnapshotReconciler) api(ctx context.Context) SandboxAPI {
	return apiFor(ctx, r.Vercel)
}

// sameClass reports whether o (a SandboxSnapshot of the namespace) uses the
// class of the one being reconciled, so that recipe builds are shared
// within a class only (each class is its own Vercel project).
func (r *SandboxSnapshotReconciler) sameClass(ctx context.Context, o client.Object) bool {
	if r.Classes == nil {
		return true
	}
	n, err := r.Classes.className(ctx, o)
	return err == nil && n == classNameIn(ctx)
}
