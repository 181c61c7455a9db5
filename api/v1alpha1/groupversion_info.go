// Package v1alpha1 holds the sandbox.sentry.io/v1alpha1 API: the Sandbox,
// SandboxSnapshot and SandboxFork kinds that clients declare and the
// controllers reconcile against the Vercel Sandbox API.
// +kubebuilder:object:generate=true
// +groupName=sandbox.sentry.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "sandbox.sentry.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//lint:ignore SA1019 kubebuilder's layout; replacing it means hand-written registration.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
