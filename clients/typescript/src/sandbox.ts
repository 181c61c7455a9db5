// Helpers for what a client such as Junior does with a Sandbox: declare it
// (or find it again), wait until it is Ready, pause and resume it, and delete
// it. They read and write Sandbox objects only, through the Kubernetes API
// (the controller does the Vercel work), so the sandbox-controller editor
// role is all they need. pkg/sandboxclient is the Go client with the same
// names and semantics.
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { KubeConfig, V1ObjectMeta } from '@kubernetes/client-node';

import { ConditionError, GoneError, KubernetesApiError, WaitTimeoutError, apiCall } from './errors.js';
import { sandboxResource } from './generated/index.js';
import type { Sandbox, SandboxSpec, SandboxStatus } from './generated/index.js';
import { LAST_ACTIVITY_ANNOTATION, activityTimestamp, heartbeat } from './heartbeat.js';
import {
  conditionOf,
  coordinates,
  createObject,
  customObjects,
  deleteObject,
  describeState,
  getObject,
  isCurrent,
  watchObject,
} from './watch.js';
import type { WaitOptions } from './watch.js';

/** A condition of a Sandbox's status (Ready, Synced, Resumable, Paused, Claimed). */
export type SandboxCondition = NonNullable<SandboxStatus['conditions']>[number];

/** What createSandbox needs: a name (and namespace) and a spec. */
export interface SandboxInput {
  metadata: V1ObjectMeta & { name: string };
  spec: SandboxSpec;
}

/**
 * waitReady's rejection when the Sandbox failed for good (phase Failed), or
 * Vercel refused its spec (Synced=False Invalid; conditionType says which).
 */
export class SandboxFailedError extends ConditionError {
  constructor(
    readonly sandbox: Sandbox,
    conditionType = 'Ready',
  ) {
    super('Sandbox', sandbox, conditionType);
    this.name = 'SandboxFailedError';
  }
}

/** A Sandbox wait's rejection when its time ran out; the message says the last state seen. */
export class SandboxTimeoutError extends WaitTimeoutError<Sandbox> {
  constructor(message: string, last: Sandbox | undefined) {
    super(message, last);
    this.name = 'SandboxTimeoutError';
  }
  /** The last version of the Sandbox the wait saw. */
  get sandbox(): Sandbox | undefined {
    return this.object;
  }
}

/** A Sandbox wait's rejection when the Sandbox does not exist or was deleted while waiting. */
export class SandboxGoneError extends GoneError {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxGoneError';
  }
}

/**
 * waitReady's rejection for a Sandbox whose spec.state is Stopped (paused):
 * it cannot become Ready until resumeSandbox (Go: ErrStopped).
 */
export class SandboxStoppedError extends Error {
  constructor(readonly sandbox: Sandbox) {
    super(`Sandbox ${sandbox.metadata?.namespace}/${sandbox.metadata?.name}: spec.state is Stopped; resume it first`);
    this.name = 'SandboxStoppedError';
  }
}

/** The Ready condition of a Sandbox, if the controller set one. */
export function readyCondition(sandbox: Sandbox): SandboxCondition | undefined {
  return conditionOf(sandbox, 'Ready') as SandboxCondition | undefined;
}

/**
 * Creates a Sandbox in namespace (default: the kubeconfig context's
 * namespace, else "default") and returns it as the API server stored it.
 * An existing Sandbox of that name rejects with a KubernetesApiError of code
 * 409; use getOrCreateSandbox to reuse it instead.
 */
export async function createSandbox(kc: KubeConfig, sandbox: SandboxInput, namespace?: string): Promise<Sandbox> {
  const ns = namespace ?? sandbox.metadata.namespace ?? defaultNamespace(kc);
  return createObject<Sandbox>(kc, sandboxResource, ns, {
    apiVersion: sandboxResource.apiVersion,
    kind: sandboxResource.kind,
    metadata: { ...sandbox.metadata, namespace: ns },
    spec: sandbox.spec,
  });
}

/**
 * Creates the Sandbox, or returns the existing one of that name (say a
 * conversation that resumes) as it is: its spec is not compared or changed
 * (Go: GetOrCreate).
 */
export async function getOrCreateSandbox(
  kc: KubeConfig,
  sandbox: SandboxInput,
  namespace?: string,
): Promise<{ sandbox: Sandbox; created: boolean }> {
  const ns = namespace ?? sandbox.metadata.namespace ?? defaultNamespace(kc);
  try {
    return { sandbox: await createSandbox(kc, sandbox, ns), created: true };
  } catch (err) {
    if (!(err instanceof KubernetesApiError) || err.code !== 409) throw err;
  }
  return { sandbox: await getSandbox(kc, ns, sandbox.metadata.name), created: false };
}

/** Reads a Sandbox; rejects with a KubernetesApiError of code 404 when there is none. */
export async function getSandbox(kc: KubeConfig, namespace: string, name: string): Promise<Sandbox> {
  return getObject<Sandbox>(kc, sandboxResource, namespace, name);
}

/**
 * What a client does when work starts (Go: EnsureReady): getOrCreateSandbox
 * with a heartbeat (the annotation on a new Sandbox; a patch on an existing
 * one, which wakes a Sandbox that went Idle), then waitReady. Resolves with
 * the Ready Sandbox and whether this call created it.
 */
export async function ensureReady(
  kc: KubeConfig,
  sandbox: SandboxInput,
  opts: WaitOptions & { namespace?: string } = {},
): Promise<{ sandbox: Sandbox; created: boolean }> {
  const ns = opts.namespace ?? sandbox.metadata.namespace ?? defaultNamespace(kc);
  const now = new Date();
  const annotations = { ...sandbox.metadata.annotations, [LAST_ACTIVITY_ANNOTATION]: activityTimestamp(now) };
  const { created } = await getOrCreateSandbox(kc, { ...sandbox, metadata: { ...sandbox.metadata, annotations } }, ns);
  if (!created) await heartbeat(kc, ns, sandbox.metadata.name, now);
  return { sandbox: await waitReady(kc, ns, sandbox.metadata.name, opts), created };
}

/**
 * The test waitReady applies to each version of a Sandbox: the Sandbox when
 * it is Ready for its current generation, undefined while it may still
 * become Ready, and a rejection when it will not (Go: sandboxReady).
 */
export function sandboxReady(sbx: Sandbox): Sandbox | undefined {
  const key = `${sbx.metadata?.namespace}/${sbx.metadata?.name}`;
  if (sbx.metadata?.deletionTimestamp) throw new SandboxGoneError(`Sandbox ${key} is being deleted`);
  if (sbx.spec.state === 'Stopped') throw new SandboxStoppedError(sbx);
  // A condition set for an older generation says nothing about the current
  // spec (the controller has not looked at the change yet).
  if (!isCurrent(sbx)) return undefined;
  if (readyCondition(sbx)?.status === 'True') return sbx;
  if (sbx.status?.phase === 'Failed') throw new SandboxFailedError(sbx);
  const synced = conditionOf(sbx, 'Synced');
  if (synced?.status === 'False' && synced.reason === 'Invalid') throw new SandboxFailedError(sbx, 'Synced');
  return undefined;
}

/**
 * Waits, by watching, until the Sandbox is Ready (its session runs and setup
 * succeeded, judged for its current generation) and returns it; status.sessionID
 * and status.routes are then what the Vercel data plane needs. Rejects with
 * SandboxFailedError when the Sandbox failed for good (phase Failed: a setup
 * step exited non-zero, the session failed, a name conflict, ...) or Vercel
 * refused its spec, with SandboxStoppedError when it is paused, with
 * SandboxGoneError when it does not exist or is deleted, and with
 * SandboxTimeoutError, carrying the last Ready reason and message, when
 * timeoutMs passes first. An Idle Sandbox is woken by a heartbeat, not by
 * waiting: see ensureReady.
 */
export async function waitReady(kc: KubeConfig, namespace: string, name: string, opts: WaitOptions = {}): Promise<Sandbox> {
  return watchSandbox(kc, namespace, name, sandboxReady, opts, 'is not Ready');
}

/**
 * Watches a Sandbox until check returns a value (resolve with it) or throws
 * (reject), for waits this package does not name (Go: WaitFor). A Sandbox
 * that does not exist, or is deleted, rejects with SandboxGoneError.
 */
export async function waitSandboxFor<T>(
  kc: KubeConfig,
  namespace: string,
  name: string,
  check: (sandbox: Sandbox) => T | undefined,
  opts: WaitOptions = {},
): Promise<T> {
  return watchSandbox(kc, namespace, name, check, opts, 'has not reached the state waited for');
}

// notYet says, in the timeout's message, what the Sandbox is not.
function watchSandbox<T>(
  kc: KubeConfig,
  namespace: string,
  name: string,
  check: (sandbox: Sandbox) => T | undefined,
  opts: WaitOptions,
  notYet: string,
): Promise<T> {
  return watchObject<Sandbox, T>(kc, sandboxResource, namespace, name, opts, {
    check: (sbx) => {
      if (!sbx) throw new SandboxGoneError(`Sandbox ${namespace}/${name} does not exist (or was deleted while waiting)`);
      return check(sbx);
    },
    timeoutMessage: (last) => `Sandbox ${namespace}/${name} ${notYet} ${describeState(last)}`,
    timeoutError: (message, last) => new SandboxTimeoutError(message, last),
  });
}

/**
 * Sets spec.state to Stopped (a merge patch; Go: Pause). On a persistent
 * Sandbox (the default) the session stops and Vercel keeps the filesystem
 * until resumeSandbox; on a non-persistent one it ends the sandbox for good.
 * waitStopped waits for it.
 */
export async function pauseSandbox(kc: KubeConfig, namespace: string, name: string): Promise<Sandbox> {
  return setState(kc, namespace, name, 'Stopped');
}

/** Sets spec.state to Running (Go: Resume): a paused Sandbox starts a new session from its filesystem. waitReady waits for it. */
export async function resumeSandbox(kc: KubeConfig, namespace: string, name: string): Promise<Sandbox> {
  return setState(kc, namespace, name, 'Running');
}

async function setState(kc: KubeConfig, namespace: string, name: string, state: 'Running' | 'Stopped'): Promise<Sandbox> {
  return apiCall(`set Sandbox ${namespace}/${name} spec.state to ${state}`, () =>
    customObjects(kc).patchNamespacedCustomObject(
      { ...coordinates(sandboxResource, namespace), name, body: { spec: { state } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    ),
  );
}

/**
 * Waits until the Sandbox's session is stopped for its current spec (phase
 * Stopped or Idle) and returns it (Go: WaitStopped). Rejects with
 * SandboxFailedError when the Sandbox is Failed.
 */
export async function waitStopped(kc: KubeConfig, namespace: string, name: string, opts: WaitOptions = {}): Promise<Sandbox> {
  const stopped = (sbx: Sandbox) => {
    if (!isCurrent(sbx)) return undefined;
    const phase = sbx.status?.phase;
    if (phase === 'Stopped' || phase === 'Idle') return sbx;
    if (phase === 'Failed') throw new SandboxFailedError(sbx);
    return undefined;
  };
  return watchSandbox(kc, namespace, name, stopped, opts, 'is not Stopped');
}

/**
 * Deletes the Sandbox and, unless wait is false, waits (by watching) until
 * it is gone (Go: Delete): the controller's finalizer keeps the object until
 * the Vercel sandbox is deleted (or kept, with deletionPolicy Retain). A
 * Sandbox that does not exist counts as deleted.
 */
export async function deleteSandbox(
  kc: KubeConfig,
  namespace: string,
  name: string,
  opts: WaitOptions & { wait?: boolean } = {},
): Promise<void> {
  return deleteObject(kc, sandboxResource, namespace, name, opts);
}

/** The KubeConfig's current context's namespace, else "default". */
export function defaultNamespace(kc: KubeConfig): string {
  const ctx = kc.getContextObject(kc.getCurrentContext());
  return ctx?.namespace || 'default';
}
