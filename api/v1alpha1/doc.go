// Package v1alpha1 holds the sandbox.sentry.io/v1alpha1 API: the Sandbox,
// SandboxSnapshot and SandboxFork kinds that clients declare and the
// controllers reconcile against the Vercel Sandbox API.
//
// It depends on k8s.io/apimachinery only, so a client program can import it
// without controller-runtime; the typed clientset, listers, informers and
// apply configurations generated from it are under pkg/client.
//
// +kubebuilder:object:generate=true
// +groupName=sandbox.sentry.io
// +kubebuilder:ac:generate=true
// +kubebuilder:ac:output:package=../../pkg/client/applyconfiguration
package v1alpha1
