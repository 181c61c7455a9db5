// Forks: a SandboxFork starts spec.replicas new Sandboxes (its children,
// named <fork>-<index>) from one point in time of a running Sandbox or a
// SandboxSnapshot. As pkg/sandboxclient's Fork, Scale, WaitForkReady,
// ForkChildren and DeleteFork.
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { KubeConfig } from '@kubernetes/client-node';

import { ConditionError, GoneError, apiCall } from './errors.js';
import { sandboxResource, sandboxforkResource } from './generated/index.js';
import type { Sandbox, SandboxFork, SandboxForkSpec } from './generated/index.js';
import { coordinates, createObject, customObjects, deleteObject, describeState, getObject, isCurrent, watchObject } from './watch.js';
import type { WaitOptions } from './watch.js';

/** The label a fork puts on its children: its name. */
export const FORK_LABEL = 'sandbox.sentry.io/fork';

/**
 * Where a fork's children start from: exactly one of a running Sandbox
 * (captured now, into the fork's own SandboxSnapshot) or a SandboxSnapshot.
 */
export type ForkSource = { sandbox: string; snapshot?: undefined } | { snapshot: string; sandbox?: undefined };

/** Options of forkSandbox. */
export interface ForkOptions {
  /** Resumes a source Sandbox right after the capture. */
  keepSourceRunning?: boolean;
  /** The children's labels, annotations and spec overrides (spec.template). */
  template?: SandboxForkSpec['template'];
}

/**
 * Creates a SandboxFork named forkName (Go: Fork): replicas new Sandboxes
 * from one point in time of source, labelled with their lineage
 * (sandbox.sentry.io/fork). waitForkReady waits for every child to be
 * Ready; forkChildren lists them; forkAndWait does both.
 */
export async function forkSandbox(
  kc: KubeConfig,
  namespace: string,
  forkName: string,
  source: ForkSource,
  replicas: number,
  opts: ForkOptions = {},
): Promise<SandboxFork> {
  if (!source.sandbox === !source.snapshot) {
    throw new Error(`fork ${namespace}/${forkName}: set exactly one of source.sandbox and source.snapshot`);
  }
  const body: SandboxFork = {
    apiVersion: sandboxforkResource.apiVersion,
    kind: sandboxforkResource.kind,
    metadata: { name: forkName, namespace },
    spec: {
      replicas,
      source: source.sandbox ? { sandboxRef: { name: source.sandbox } } : { snapshotRef: { name: source.snapshot as string } },
      ...(opts.keepSourceRunning ? { keepSourceRunning: true } : {}),
      ...(opts.template ? { template: opts.template } : {}),
    },
  };
  return createObject<SandboxFork>(kc, sandboxforkResource, namespace, body);
}

/** Reads a SandboxFork; rejects with a KubernetesApiError of code 404 when there is none. */
export async function getSandboxFork(kc: KubeConfig, namespace: string, name: string): Promise<SandboxFork> {
  return getObject<SandboxFork>(kc, sandboxforkResource, namespace, name);
}

/**
 * Sets a SandboxFork's spec.replicas (a merge patch; Go: Scale): the
 * controller creates the missing children or deletes the highest-indexed
 * ones. waitForkReady waits for the result.
 */
export async function scaleFork(kc: KubeConfig, namespace: string, forkName: string, replicas: number): Promise<SandboxFork> {
  return apiCall(`scale SandboxFork ${namespace}/${forkName} to ${replicas}`, () =>
    customObjects(kc).patchNamespacedCustomObject(
      { ...coordinates(sandboxforkResource, namespace), name: forkName, body: { spec: { replicas } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    ),
  );
}

/**
 * The test waitForkReady applies to each version: the fork once, for its
 * current spec, it has spec.replicas children and all are Ready; a
 * ConditionError when it Failed.
 */
export function forkReady(fork: SandboxFork): SandboxFork | undefined {
  if (fork.metadata?.deletionTimestamp) {
    throw new GoneError(`SandboxFork ${fork.metadata.namespace}/${fork.metadata.name} is being deleted`);
  }
  if (!isCurrent(fork)) return undefined;
  const want = fork.spec.replicas ?? 1;
  const s = fork.status;
  if (s?.phase === 'Ready') {
    return s.replicas === want && s.readyReplicas === want && (s.children?.length ?? 0) === want ? fork : undefined;
  }
  if (s?.phase === 'Failed') throw new ConditionError('SandboxFork', fork);
  return undefined;
}

/**
 * Waits, by watching, until the SandboxFork has spec.replicas children and
 * all are Ready, for its current spec, and returns it (Go: WaitForkReady).
 * Rejects with a ConditionError when the fork Failed (its source snapshot
 * failed, or the source stayed missing past spec.failureDeadlineSeconds), a
 * GoneError when it does not exist, a WaitTimeoutError when timeoutMs passes.
 */
export async function waitForkReady(kc: KubeConfig, namespace: string, name: string, opts: WaitOptions = {}): Promise<SandboxFork> {
  return watchObject<SandboxFork, SandboxFork>(kc, sandboxforkResource, namespace, name, opts, {
    check: (fork) => {
      if (!fork) throw new GoneError(`SandboxFork ${namespace}/${name} does not exist (or was deleted while waiting)`);
      return forkReady(fork);
    },
    timeoutMessage: (last) =>
      `SandboxFork ${namespace}/${name} does not have its children Ready ${describeState(last)}, ` +
      `${last?.status?.readyReplicas ?? 0}/${last?.spec.replicas ?? 1} ready`,
  });
}

/** Lists the Sandboxes a SandboxFork created (by its sandbox.sentry.io/fork label), by name. */
export async function forkChildren(kc: KubeConfig, namespace: string, forkName: string): Promise<Sandbox[]> {
  const list = await apiCall(`list children of SandboxFork ${namespace}/${forkName}`, () =>
    customObjects(kc).listNamespacedCustomObject({
      ...coordinates(sandboxResource, namespace),
      labelSelector: `${FORK_LABEL}=${forkName}`,
    }),
  );
  const items = ((list as { items?: Sandbox[] }).items ?? []).slice();
  return items.sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? '', 'en', { numeric: true }));
}

/**
 * forkSandbox, then waitForkReady: resolves with the Ready fork and its
 * children.
 */
export async function forkAndWait(
  kc: KubeConfig,
  namespace: string,
  forkName: string,
  source: ForkSource,
  replicas: number,
  opts: ForkOptions & WaitOptions = {},
): Promise<{ fork: SandboxFork; children: Sandbox[] }> {
  await forkSandbox(kc, namespace, forkName, source, replicas, opts);
  const fork = await waitForkReady(kc, namespace, forkName, opts);
  return { fork, children: await forkChildren(kc, namespace, forkName) };
}

/**
 * Deletes a SandboxFork and, unless wait is false, waits until it is gone,
 * its children and its own snapshot deleted or released, per
 * spec.deletionPolicy (Go: DeleteFork). A fork that does not exist counts as
 * deleted.
 */
export async function deleteFork(
  kc: KubeConfig,
  namespace: string,
  name: string,
  opts: WaitOptions & { wait?: boolean } = {},
): Promise<void> {
  return deleteObject(kc, sandboxforkResource, namespace, name, opts);
}
