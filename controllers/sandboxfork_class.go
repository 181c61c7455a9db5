package controllers

// A SandboxFork's SandboxClass (classes.go): what the fork gives the
// objects it creates, and a source of another class.

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// inheritClass gives an object a SandboxFork creates (its capture, its
// children) the fork's class: spec.className, and the label that pins it,
// so that a fork of no class makes children of no class even when a
// default class exists.
func (r *SandboxForkReconciler) inheritClass(ctx context.Context, o client.Object) {
	if r.Classes == nil {
		return
	}
	name := classNameIn(ctx)
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[sandboxv1.LabelClass] = name
	o.SetLabels(l)
	if name == "" {
		return
	}
	switch o := o.(type) {
	case *sandboxv1.Sandbox:
		o.Spec.ClassName = &name
	case *sandboxv1.SandboxSnapshot:
		o.Spec.ClassName = &name
	}
}

// classMismatch reports a fork whose source is of another class; it waits
// (both are immutable, so only a new fork helps).
func (r *SandboxForkReconciler) classMismatch(fork *sandboxv1.SandboxFork, msg string) ctrl.Result {
	st := &fork.Status
	st.Phase = sandboxv1.ForkPending
	setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionResolvedRefs, metav1.ConditionFalse, sandboxv1.ReasonClassMismatch, msg)
	setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonClassMismatch, msg)
	return ctrl.Result{RequeueAfter: time.Minute}
}
