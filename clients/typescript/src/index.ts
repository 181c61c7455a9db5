// @getsentry/sandbox-controller-client: the sandbox.sentry.io types, generated
// from the CRDs, and helpers over @kubernetes/client-node for every kind a
// client drives (Sandbox, heartbeats, SandboxSnapshot, SandboxFork, claims
// from a SandboxPool) and the SandboxQuota state it reads. The names and
// semantics follow the Go client, pkg/sandboxclient. See README.md.
export * from './generated/index.js';
export * from './auth.js';
export * from './errors.js';
export { DEFAULT_TIMEOUT_MS, conditionOf, isCurrent } from './watch.js';
export type { KubeObject, Resource, WaitOptions } from './watch.js';
export * from './sandbox.js';
export * from './heartbeat.js';
export * from './snapshot.js';
export * from './fork.js';
export * from './pool.js';
export * from './quota.js';
