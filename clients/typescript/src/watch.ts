// How every helper waits: list the one object, then watch it from the list's
// resourceVersion (no polling), handing each version seen to a check until
// the check resolves or rejects, the time runs out or the caller aborts. The
// same rules as pkg/sandboxclient's watchUntil, so the two clients agree on
// when a wait ends.
import { CustomObjectsApi, Watch } from '@kubernetes/client-node';
import type { KubeConfig, V1ObjectMeta } from '@kubernetes/client-node';

import { KubernetesApiError, WaitTimeoutError, apiCall } from './errors.js';
import type { Condition } from './errors.js';

/** Options of the helpers that wait. */
export interface WaitOptions {
  /** How long to wait before rejecting with a WaitTimeoutError (default 5 minutes). */
  timeoutMs?: number;
  /** Stops waiting; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

export const DEFAULT_TIMEOUT_MS = 5 * 60 * 1000;

/** Where the API server serves a kind (the generated `*Resource` constants). */
export interface Resource {
  group: string;
  version: string;
  kind: string;
  plural: string;
}

/** What the waits read of every kind. */
export interface KubeObject {
  metadata?: V1ObjectMeta;
  status?: { phase?: string; conditions?: Condition[] };
}

/** What watchObject needs besides the object's coordinates. */
export interface WatchSpec<O, T> {
  /** Sees every version (undefined: the object does not exist); a value other than undefined ends the wait. */
  check: (obj: O | undefined) => T | undefined;
  /** The timeout's message from the last version seen. */
  timeoutMessage: (last: O | undefined) => string;
  /** The error a timeout rejects with (default WaitTimeoutError). */
  timeoutError?: (message: string, last: O | undefined) => Error;
}

/** The condition of type on an object, if set. */
export function conditionOf(obj: KubeObject | undefined, type: string): Condition | undefined {
  return obj?.status?.conditions?.find((c) => c.type === type);
}

/**
 * Whether the object's Ready condition was written for its current spec
 * (generation): a status about an older spec says nothing about whether the
 * new one will succeed. Every controller stamps Ready with the generation it
 * acted on.
 */
export function isCurrent(obj: KubeObject): boolean {
  const ready = conditionOf(obj, 'Ready');
  return ready !== undefined && (ready.observedGeneration ?? 0) >= (obj.metadata?.generation ?? 0);
}

/** The state of an object for an error message: phase and Ready condition. */
export function describeState(last: KubeObject | undefined): string {
  const ready = conditionOf(last, 'Ready');
  const phase = last?.status?.phase ?? 'unknown';
  return ready
    ? `(phase ${phase}, Ready=${ready.status} ${ready.reason}: ${ready.message})`
    : `(phase ${phase}, no Ready condition yet)`;
}

export function customObjects(kc: KubeConfig): CustomObjectsApi {
  return kc.makeApiClient(CustomObjectsApi);
}

/** The coordinates of a namespaced kind for CustomObjectsApi. */
export function coordinates(resource: Resource, namespace: string) {
  return { group: resource.group, version: resource.version, plural: resource.plural, namespace };
}

/**
 * Lists the object and then watches it from the list's resourceVersion,
 * handing every state it sees to spec.check until check returns a value
 * (resolve) or throws (reject). A watch that ends (the API server closes
 * watches after a few minutes; client-node ends one that is quiet for 30 s)
 * or fails is started again from a fresh list; errors that waiting cannot fix
 * (unauthorized, forbidden, the kind not installed) reject at once.
 */
export function watchObject<O extends KubeObject, T>(
  kc: KubeConfig,
  resource: Resource,
  namespace: string,
  name: string,
  opts: WaitOptions,
  spec: WatchSpec<O, T>,
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const what = `${resource.kind} ${namespace}/${name}`;
  const fieldSelector = `metadata.name=${name}`;
  const path = `/apis/${resource.group}/${resource.version}/namespaces/${encodeURIComponent(namespace)}/${resource.plural}`;
  const watcher = new Watch(kc);
  return new Promise<T>((resolve, reject) => {
    let finished = false;
    let last: O | undefined;
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
    const evaluate = (obj: O | undefined) => {
      if (obj) last = obj;
      try {
        const value = spec.check(obj);
        if (value !== undefined) finish(undefined, value);
      } catch (err) {
        finish(err);
      }
    };
    const onTimeout = () => {
      const message = `${spec.timeoutMessage(last)} after ${timeoutMs} ms`;
      finish(spec.timeoutError ? spec.timeoutError(message, last) : new WaitTimeoutError(message, last));
    };
    const timer = setTimeout(onTimeout, timeoutMs);
    const onAbort = () => finish(opts.signal?.reason ?? new Error('aborted'));
    if (opts.signal?.aborted) return onAbort();
    opts.signal?.addEventListener('abort', onAbort, { once: true });

    // One round: a list, then a watch until it ends. Resolves when the
    // round is over; rejects with errors that end the wait.
    const round = async () => {
      const list = await apiCall(`list ${what}`, () =>
        customObjects(kc).listNamespacedCustomObject({ ...coordinates(resource, namespace), fieldSelector }),
      );
      if (finished) return;
      evaluate((list as { items?: O[] }).items?.[0]);
      if (finished) return;
      const watchStarted = Date.now();
      let ended!: (err: unknown) => void;
      const done = new Promise<unknown>((res) => (ended = res));
      current = await watcher.watch(
        path,
        { fieldSelector, resourceVersion: (list as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion, allowWatchBookmarks: true },
        (type: string, obj: O) => {
          if (type === 'ADDED' || type === 'MODIFIED') evaluate(obj);
          else if (type === 'DELETED') evaluate(undefined);
          // ERROR (410 Gone: the resourceVersion is too old) ends this
          // watch; the next round lists afresh.
          else if (type === 'ERROR') current?.abort();
        },
        (err: unknown) => ended(err),
      );
      if (finished) current.abort();
      const err = await done;
      if (finished) return;
      const code = (err as { statusCode?: number } | null)?.statusCode;
      if (code === 401 || code === 403 || code === 404) {
        throw new KubernetesApiError(code, undefined, `watch ${what}: HTTP ${code}`);
      }
      // A watch that failed, or ended at once, is not restarted in a tight
      // loop of lists.
      if ((err && (err as Error).name !== 'AbortError') || Date.now() - watchStarted < 1000) await sleep(1000);
    };
    const loop = async () => {
      while (!finished) {
        try {
          await round();
        } catch (err) {
          if (finished) return;
          if (err instanceof KubernetesApiError && err.code >= 400 && err.code < 500 && err.code !== 429) {
            return finish(err);
          }
          // The API server is unreachable or overloaded: keep trying until
          // the deadline.
          await sleep(1000);
        }
      }
    };
    void loop();
  });
}

/**
 * Deletes a namespaced object and, unless opts.wait is false, waits (by
 * watching) until it is gone: the controllers' finalizers keep an object
 * until its Vercel resources are deleted or released. An object that does
 * not exist counts as deleted.
 */
export async function deleteObject(
  kc: KubeConfig,
  resource: Resource,
  namespace: string,
  name: string,
  opts: WaitOptions & { wait?: boolean } = {},
): Promise<void> {
  const what = `${resource.kind} ${namespace}/${name}`;
  try {
    await apiCall(`delete ${what}`, () =>
      customObjects(kc).deleteNamespacedCustomObject({ ...coordinates(resource, namespace), name }),
    );
  } catch (err) {
    if (err instanceof KubernetesApiError && err.code === 404) return;
    throw err;
  }
  if (opts.wait === false) return;
  await watchObject<KubeObject, true>(kc, resource, namespace, name, opts, {
    check: (obj) => (obj ? undefined : true),
    timeoutMessage: (last) => {
      const finalizers = last?.metadata?.finalizers?.join(', ');
      return `${what} is still there ${describeState(last)}${finalizers ? `; finalizers: ${finalizers}` : ''}`;
    },
  });
}

/** Reads a namespaced object; rejects with a KubernetesApiError of code 404 when there is none. */
export async function getObject<O>(kc: KubeConfig, resource: Resource, namespace: string, name: string): Promise<O> {
  return apiCall(`get ${resource.kind} ${namespace}/${name}`, () =>
    customObjects(kc).getNamespacedCustomObject({ ...coordinates(resource, namespace), name }),
  );
}

/** Creates a namespaced object and returns it as the API server stored it. */
export async function createObject<O>(kc: KubeConfig, resource: Resource, namespace: string, body: O & { metadata?: { name?: string } }): Promise<O> {
  return apiCall(`create ${resource.kind} ${namespace}/${body.metadata?.name}`, () =>
    customObjects(kc).createNamespacedCustomObject({ ...coordinates(resource, namespace), body }),
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
