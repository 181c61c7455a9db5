// Package controllers holds one reconciler per kind of sandbox.sentry.io and
// the helpers they share (conditions, error classification, naming). The
// reconcilers drive the Vercel Sandbox API through the SandboxAPI interface
// and never block a worker waiting for Vercel: long operations are polled
// with RequeueAfter.
package controllers
