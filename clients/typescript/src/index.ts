// @getsentry/sandbox-controller-client: the sandbox.sentry.io types, generated
// from the CRDs, and helpers over @kubernetes/client-node for the Sandbox
// lifecycle a client drives and for claims from a SandboxPool. See
// docs/clients.md.
export * from './generated/index.js';
export * from './auth.js';
export * from './sandbox.js';
export * from './pool.js';
