// Package client is the root of the generated Go client of the
// sandbox.sentry.io/v1alpha1 API (`make generate` writes it; do not edit the
// packages below by hand):
//
//   - clientset/versioned: the typed clientset (k8s.io/code-generator's
//     client-gen). NewForConfig(restConfig).SandboxV1alpha1().Sandboxes(ns)
//     gets, lists, watches, creates, patches, applies and deletes.
//   - applyconfiguration/api/v1alpha1: apply configurations (controller-gen)
//     for server-side apply with the clientset's Apply methods.
//   - listers/api/v1alpha1 and informers/externalversions: cache-backed
//     listers and shared informers (lister-gen, informer-gen).
//
// pkg/sandboxclient builds what a client program does (create and wait for
// Ready, heartbeat, pause, snapshot, fork, delete) on the clientset.
package client
