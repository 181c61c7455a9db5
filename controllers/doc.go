// Package controllers holds one reconciler per kind of sandbox.sentry.io and
// what they share: the reconcile skeleton (reconcile.go), error
// classification (errors.go), conditions and naming. The reconcilers drive
// the Vercel Sandbox API through the SandboxAPI interface and never block a
// worker waiting for Vercel: long operations are polled with RequeueAfter.
package controllers
