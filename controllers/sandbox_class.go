package controllers

// What a Sandbox takes from its SandboxClass (classes.go): the Vercel
// client it is reconciled with and its maximum session length.

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// api is the Vercel client of the Sandbox being reconciled (its class's).
func (r *SandboxReconciler) api(ctx context.Context) SandboxAPI { return apiFor(ctx, r.Vercel) }

// maxSessionLengthOf is the maximum session length of sbx: its class's
// defaults.maxSessionLengthSeconds, else the manager's.
func (r *SandboxReconciler) maxSessionLengthOf(sbx *sandboxv1.Sandbox) time.Duration {
	name, ok := pinnedClass(sbx)
	if r.Classes == nil || !ok || name == "" {
		return r.maxSessionLength()
	}
	cl := &sandboxv1.SandboxClass{}
	// A read from the manager's cache: no request leaves the process.
	if err := r.Classes.Client.Get(context.Background(), types.NamespacedName{Name: name}, cl); err != nil ||
		cl.Spec.Defaults == nil || cl.Spec.Defaults.MaxSessionLengthSeconds == nil {
		return r.maxSessionLength()
	}
	return time.Duration(*cl.Spec.Defaults.MaxSessionLengthSeconds) * time.Second
}
