// Helpers for what a client such as Junior does with a Sandbox: declare it,
// wait until it is Ready, keep it alive with heartbeats, and delete it. They
// only read and write Sandbox objects through the Kubernetes API (the
// controller does the Vercel work), so the sandbox-controller editor role is
// all they need.
import {
  ApiException,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  Watch,
  setHeaderOptions,
} from '@kubernetes/client-node';
import type { V1ObjectMeta } from '@kubernetes/client-node';

import { sandboxResource } from './generated/index.js';
import type { Sandbox, SandboxSpec, SandboxStatus } from './generated/index.js';

/**
 * The activity heartbeat annotation. The controller keeps the session running
 * until spec.timeoutSeconds past the latest heartbeat, and a heartbeat newer
 * than an idle stop resumes the sandbox. Its value is an RFC 3339 time.
 */
export const LAST_ACTIVITY_ANNOTATION = 'sandbox.sentry.io/last-activity';

/** A condition of a Sandbox's status (Ready, Synced, Resumable, Paused). */
export type SandboxCondition = NonNullable<SandboxStatus['conditions']>[number];

/** What createSandbox needs: a name (and namespace) and a spec. */
export interface SandboxInput {
  metadata: V1ObjectMeta & { name: string };
  spec: SandboxSpec;
}

/** Options of the helpers that wait. */
export interface WaitOptions {
  /** How long to wait before rejecting with a SandboxTimeoutError (default 5 minutes). */
  timeoutMs?: number;
  /** Stops waiting; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

const DEFAULT_TIMEOUT_MS = 5 * 60 * 1000;

/**
 * An error the API server answered with: `code` is the HTTP status (403 when
 * the caller's role does not allow the request, 404 not found, 409 already
 * exists or conflict, 422 invalid), `reason` the Status reason (Forbidden,
 * NotFound, AlreadyExists, Invalid, ...), and the message is the API
 * server's, e.g. the CRD validation that refused a spec.
 */
export class KubernetesApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = 'KubernetesApiError';
  }
}

/** waitReady's rejection when the Sandbox failed for good (phase Failed). */
export class SandboxFailedError extends Error {
  /** The Ready condition's reason, e.g. SetupFailed, SessionFailed, NameConflict. */
  readonly reason: string;
  /** The Ready condition's message, e.g. which setup step exited with which code. */
  readonly conditionMessage: string;
  constructor(readonly sandbox: Sandbox) {
    const ready = readyCondition(sandbox);
    const reason = ready?.reason ?? 'Unknown';
    const conditionMessage = ready?.message ?? '';
    super(`Sandbox ${key(sandbox)} failed: ${reason}: ${conditionMessage}`);
    this.name = 'SandboxFailedError';
    this.reason = reason;
    this.conditionMessage = conditionMessage;
  }
}

/** A wait's rejection when its time ran out; the message says the last state seen. */
export class SandboxTimeoutError extends Error {
  constructor(
    message: string,
    readonly sandbox: Sandbox | undefined,
  ) {
    super(message);
    this.name = 'SandboxTimeoutError';
  }
}

/** waitReady's rejection when the Sandbox does not exist or was deleted while waiting. */
export class SandboxGoneError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SandboxGoneError';
  }
}

/** The Ready condition of a Sandbox, if the controller set one. */
export function readyCondition(sandbox: Sandbox): SandboxCondition | undefined {
  return sandbox.status?.conditions?.find((c) => c.type === 'Ready');
}

/**
 * The heartbeat value for a time: RFC 3339 in UTC with milliseconds
 * (`2026-01-02T15:04:05.123Z`), which the controller parses. Milliseconds,
 * not whole seconds: the controller resumes an idle Sandbox only for a
 * heartbeat after the stop, which it records to the second, so a heartbeat
 * cut to the second in the same second as the stop would be ignored.
 */
export function activityTimestamp(at: Date = new Date()): string {
  return at.toISOString();
}

/**
 * Creates a Sandbox in namespace (default: the kubeconfig context's
 * namespace, else "default") and returns it as the API server stored it.
 * An existing Sandbox of that name rejects with a KubernetesApiError of code
 * 409; use getOrCreateSandbox to reuse it instead.
 */
export async function createSandbox(kc: KubeConfig, sandbox: SandboxInput, namespace?: string): Promise<Sandbox> {
  const ns = namespace ?? sandbox.metadata.namespace ?? defaultNamespace(kc);
  const body: Sandbox = {
    apiVersion: sandboxResource.apiVersion,
    kind: sandboxResource.kind,
    metadata: { ...sandbox.metadata, namespace: ns },
    spec: sandbox.spec,
  };
  return apiCall(`create Sandbox ${ns}/${sandbox.metadata.name}`, () =>
    api(kc).createNamespacedCustomObject({ ...coordinates(ns), body }),
  );
}

/**
 * Creates the Sandbox, or returns the existing one of that name (say a
 * conversation that resumes) as it is: its spec is not compared or changed.
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
  return apiCall(`get Sandbox ${namespace}/${name}`, () =>
    api(kc).getNamespacedCustomObject({ ...coordinates(namespace), name }),
  );
}

/**
 * Sends an activity heartbeat: a JSON merge patch of the last-activity
 * annotation (custom resources refuse strategic merge patches), which touches
 * nothing else and never conflicts with the controller's writes. Returns the
 * patched Sandbox. Each heartbeat is a write to the API server: a busy client
 * sends one every few seconds at most, not one per request (the idle window,
 * spec.timeoutSeconds, is minutes).
 */
export async function heartbeat(kc: KubeConfig, namespace: string, name: string, at: Date = new Date()): Promise<Sandbox> {
  const body = { metadata: { annotations: { [LAST_ACTIVITY_ANNOTATION]: activityTimestamp(at) } } };
  return apiCall(`heartbeat Sandbox ${namespace}/${name}`, () =>
    api(kc).patchNamespacedCustomObject(
      { ...coordinates(namespace), name, body },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    ),
  );
}

/**
 * Waits, by watching, until the Sandbox is Ready (its session runs and setup
 * succeeded, judged for its current generation) and returns it; status.sessionID
 * and status.routes are then what the Vercel data plane needs. Rejects with
 * SandboxFailedError when the Sandbox failed for good (phase Failed: a setup
 * step exited non-zero, the session failed, a name conflict, ...), with
 * SandboxGoneError when it does not exist or is deleted, and with
 * SandboxTimeoutError, carrying the last Ready reason and message, when
 * timeoutMs passes first.
 */
export async function waitReady(kc: KubeConfig, namespace: string, name: string, opts: WaitOptions = {}): Promise<Sandbox> {
  return watchSandbox(kc, namespace, name, opts, (sbx) => {
    if (!sbx) throw new SandboxGoneError(`Sandbox ${namespace}/${name} does not exist (or was deleted while waiting for Ready)`);
    if (sbx.metadata?.deletionTimestamp) throw new SandboxGoneError(`Sandbox ${namespace}/${name} is being deleted`);
    const ready = readyCondition(sbx);
    // A condition set for an older generation says nothing about the
    // current spec (the controller has not looked at the change yet).
    if (!ready || (ready.observedGeneration ?? 0) < (sbx.metadata?.generation ?? 0)) return undefined;
    if (ready.status === 'True') return sbx;
    if (sbx.status?.phase === 'Failed') throw new SandboxFailedError(sbx);
    return undefined;
  }, (last) => `Sandbox ${namespace}/${name} is not Ready ${describe(last)}`);
}

/**
 * Deletes the Sandbox and, unless wait is false, waits (by watching) until
 * it is gone: the controller's finalizer keeps the object until the Vercel
 * sandbox is deleted (or kept, with deletionPolicy Retain). A Sandbox that
 * does not exist counts as deleted.
 */
export async function deleteSandbox(
  kc: KubeConfig,
  namespace: string,
  name: string,
  opts: WaitOptions & { wait?: boolean } = {},
): Promise<void> {
  try {
    await apiCall(`delete Sandbox ${namespace}/${name}`, () =>
      api(kc).deleteNamespacedCustomObject({ ...coordinates(namespace), name }),
    );
  } catch (err) {
    if (err instanceof KubernetesApiError && err.code === 404) return;
    throw err;
  }
  if (opts.wait === false) return;
  await watchSandbox(kc, namespace, name, opts, (sbx) => (sbx ? undefined : true), (last) => {
    const finalizers = last?.metadata?.finalizers?.join(', ');
    return `Sandbox ${namespace}/${name} is still there ${describe(last)}${finalizers ? `; finalizers: ${finalizers}` : ''}`;
  });
}

function describe(last: Sandbox | undefined): string {
  const ready = last && readyCondition(last);
  const phase = last?.status?.phase ?? 'unknown';
  return ready
    ? `(phase ${phase}, Ready=${ready.status} ${ready.reason}: ${ready.message})`
    : `(phase ${phase}, no Ready condition yet)`;
}

/**
 * watchSandbox lists the Sandbox and then watches it from the list's
 * resourceVersion, handing every state it sees (undefined: it does not
 * exist) to check until check returns a value (resolve) or throws (reject).
 * A watch that ends (the API server closes watches after a few minutes) or
 * fails is started again from a fresh list; errors that waiting cannot fix
 * (forbidden, the kind not installed) reject at once.
 */
function watchSandbox<T>(
  kc: KubeConfig,
  namespace: string,
  name: string,
  opts: WaitOptions,
  check: (sbx: Sandbox | undefined) => T | undefined,
  timeoutMessage: (last: Sandbox | undefined) => string,
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const fieldSelector = `metadata.name=${name}`;
  const path = `/apis/${sandboxResource.group}/${sandboxResource.version}/namespaces/${encodeURIComponent(namespace)}/${sandboxResource.plural}`;
  const watcher = new Watch(kc);
  return new Promise<T>((resolve, reject) => {
    let finished = false;
    let last: Sandbox | undefined;
    let current: AbortController | undefined;
    const finish = (err: unknown, value?: T) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      current?.abort();
      if (err !== undefined) reject(err);
      else resolve(value as T);
    };
    const evaluate = (sbx: Sandbox | undefined) => {
      if (sbx) last = sbx;
      try {
        const value = check(sbx);
        if (value !== undefined) finish(undefined, value);
      } catch (err) {
        finish(err);
      }
    };
    const timer = setTimeout(() => finish(new SandboxTimeoutError(`${timeoutMessage(last)} after ${timeoutMs} ms`, last)), timeoutMs);
    const onAbort = () => finish(opts.signal?.reason ?? new Error('aborted'));
    if (opts.signal?.aborted) return onAbort();
    opts.signal?.addEventListener('abort', onAbort, { once: true });

    const loop = async () => {
      while (!finished) {
        try {
          const list = await apiCall(`list Sandbox ${namespace}/${name}`, () =>
            api(kc).listNamespacedCustomObject({ ...coordinates(namespace), fieldSelector }),
          );
          if (finished) return;
          evaluate(list.items?.[0]);
          if (finished) return;
          const watchStarted = Date.now();
          let ended!: (err: unknown) => void;
          const done = new Promise<unknown>((res) => (ended = res));
          current = await watcher.watch(
            path,
            { fieldSelector, resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: true },
            (type: string, obj: Sandbox) => {
              if (type === 'ADDED' || type === 'MODIFIED') evaluate(obj);
              else if (type === 'DELETED') evaluate(undefined);
              // ERROR (410 Gone: the resourceVersion is too old) ends
              // this watch; the next round lists afresh.
              else if (type === 'ERROR') current?.abort();
            },
            (err: unknown) => ended(err),
          );
          if (finished) current.abort();
          const err = await done;
          if (finished) return;
          const code = (err as { statusCode?: number } | null)?.statusCode;
          if (code === 401 || code === 403 || code === 404) {
            throw new KubernetesApiError(code, undefined, `watch Sandbox ${namespace}/${name}: HTTP ${code}`);
          }
          // A watch that failed, or ended at once, is not restarted in a
          // tight loop of lists.
          if ((err && (err as Error).name !== 'AbortError') || Date.now() - watchStarted < 1000) await sleep(1000);
        } catch (err) {
          if (finished) return;
          if (err instanceof KubernetesApiError && err.code >= 400 && err.code < 500 && err.code !== 429) {
            return finish(err);
          }
          // The API server is unreachable or overloaded: keep trying
          // until the deadline.
          await sleep(1000);
        }
      }
    };
    void loop();
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function api(kc: KubeConfig): CustomObjectsApi {
  return kc.makeApiClient(CustomObjectsApi);
}

function coordinates(namespace: string) {
  return { group: sandboxResource.group, version: sandboxResource.version, plural: sandboxResource.plural, namespace };
}

function key(sbx: Sandbox): string {
  return `${sbx.metadata?.namespace}/${sbx.metadata?.name}`;
}

function defaultNamespace(kc: KubeConfig): string {
  const ctx = kc.getContextObject(kc.getCurrentContext());
  return ctx?.namespace || 'default';
}

/**
 * Runs one request of @kubernetes/client-node and turns its ApiException
 * (whose message is the raw response with its headers) into a
 * KubernetesApiError carrying the API server's own message, prefixed with
 * `what` (e.g. "get SandboxPool junior/workspace").
 */
export async function apiCall<T>(what: string, request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (err) {
    if (!(err instanceof ApiException)) throw err;
    let reason: string | undefined;
    let message = `HTTP ${err.code}`;
    try {
      const status = typeof err.body === 'string' ? JSON.parse(err.body) : err.body;
      if (status?.message) message = status.message;
      reason = status?.reason;
    } catch {
      // Not a Status object (a proxy's page, say): its start tells more
      // than the code alone.
      if (typeof err.body === 'string' && err.body.trim()) message += `: ${err.body.trim().slice(0, 200)}`;
    }
    throw new KubernetesApiError(err.code, reason, `${what}: ${message}`);
  }
}
