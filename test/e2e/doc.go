// Package e2e tests what users install: config/ rendered by kustomize as
// `make install` and `make deploy` render it, applied with the real kubectl to
// a control plane that behaves like a cluster, and the real manager binary
// running as the deployed ServiceAccount against the Vercel emulator.
package e2e
