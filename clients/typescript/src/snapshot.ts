// Snapshots of a running Sandbox: a SandboxSnapshot captures the session's
// filesystem into a Vercel snapshot that new Sandboxes (spec.source.snapshotRef)
// and forks boot from. As pkg/sandboxclient's Snapshot, WaitSnapshotReady and
// DeleteSnapshot.
import type { KubeConfig } from '@kubernetes/client-node';

import { ConditionError, GoneError } from './errors.js';
import { sandboxsnapshotResource } from './generated/index.js';
import type { SandboxSnapshot } from './generated/index.js';
import { createObject, deleteObject, describeState, getObject, isCurrent, watchObject } from './watch.js';
import type { WaitOptions } from './watch.js';

/** Options of snapshotSandbox. */
export interface SnapshotOptions {
  /**
   * Resumes the Sandbox right after the capture; without it the Sandbox
   * stays Stopped (reason Snapshotted) until a heartbeat or resumeSandbox.
   */
  keepSourceRunning?: boolean;
  /** How long Vercel keeps the snapshot, in seconds (Vercel's default when unset). */
  expirationSeconds?: number;
  /** Labels of the SandboxSnapshot. */
  labels?: Record<string, string>;
}

/**
 * Creates a SandboxSnapshot named snapshotName that captures the running
 * session of the Sandbox sandboxName (Go: Snapshot), and returns it as the
 * API server stored it. waitSnapshotReady waits for the capture;
 * snapshotAndWait does both.
 */
export async function snapshotSandbox(
  kc: KubeConfig,
  namespace: string,
  sandboxName: string,
  snapshotName: string,
  opts: SnapshotOptions = {},
): Promise<SandboxSnapshot> {
  const body: SandboxSnapshot = {
    apiVersion: sandboxsnapshotResource.apiVersion,
    kind: sandboxsnapshotResource.kind,
    metadata: { name: snapshotName, namespace, ...(opts.labels ? { labels: { ...opts.labels } } : {}) },
    spec: {
      source: { sandboxRef: { name: sandboxName } },
      ...(opts.keepSourceRunning ? { keepSourceRunning: true } : {}),
      ...(opts.expirationSeconds ? { expirationSeconds: opts.expirationSeconds } : {}),
    },
  };
  return createObject<SandboxSnapshot>(kc, sandboxsnapshotResource, namespace, body);
}

/** Reads a SandboxSnapshot; rejects with a KubernetesApiError of code 404 when there is none. */
export async function getSandboxSnapshot(kc: KubeConfig, namespace: string, name: string): Promise<SandboxSnapshot> {
  return getObject<SandboxSnapshot>(kc, sandboxsnapshotResource, namespace, name);
}

/**
 * The test waitSnapshotReady applies to each version: the snapshot once it
 * is ready to use for its current generation, a ConditionError when it
 * Failed (the capture or a build step failed) or Expired.
 */
export function snapshotReady(snap: SandboxSnapshot): SandboxSnapshot | undefined {
  if (snap.metadata?.deletionTimestamp) {
    throw new GoneError(`SandboxSnapshot ${snap.metadata.namespace}/${snap.metadata.name} is being deleted`);
  }
  if (!isCurrent(snap)) return undefined;
  const ready = snap.status?.conditions?.find((c) => c.type === 'Ready');
  if (snap.status?.readyToUse && ready?.status === 'True') return snap;
  if (snap.status?.phase === 'Failed' || snap.status?.phase === 'Expired') throw new ConditionError('SandboxSnapshot', snap);
  return undefined;
}

/**
 * Waits, by watching, until the SandboxSnapshot is ready to use (status.snapshotID
 * set) and returns it (Go: WaitSnapshotReady). Rejects with a ConditionError
 * when it Failed or Expired, a GoneError when it does not exist or is
 * deleted, and a WaitTimeoutError when timeoutMs passes first.
 */
export async function waitSnapshotReady(kc: KubeConfig, namespace: string, name: string, opts: WaitOptions = {}): Promise<SandboxSnapshot> {
  return watchObject<SandboxSnapshot, SandboxSnapshot>(kc, sandboxsnapshotResource, namespace, name, opts, {
    check: (snap) => {
      if (!snap) throw new GoneError(`SandboxSnapshot ${namespace}/${name} does not exist (or was deleted while waiting)`);
      return snapshotReady(snap);
    },
    timeoutMessage: (last) => `SandboxSnapshot ${namespace}/${name} is not ready to use ${describeState(last)}`,
  });
}

/** snapshotSandbox, then waitSnapshotReady: resolves with the Ready snapshot. */
export async function snapshotAndWait(
  kc: KubeConfig,
  namespace: string,
  sandboxName: string,
  snapshotName: string,
  opts: SnapshotOptions & WaitOptions = {},
): Promise<SandboxSnapshot> {
  await snapshotSandbox(kc, namespace, sandboxName, snapshotName, opts);
  return waitSnapshotReady(kc, namespace, snapshotName, opts);
}

/**
 * Deletes a SandboxSnapshot and, unless wait is false, waits until it is
 * gone: its Vercel snapshot deleted or retained, per spec.deletionPolicy (Go:
 * DeleteSnapshot). A snapshot that does not exist counts as deleted.
 */
export async function deleteSnapshot(
  kc: KubeConfig,
  namespace: string,
  name: string,
  opts: WaitOptions & { wait?: boolean } = {},
): Promise<void> {
  return deleteObject(kc, sandboxsnapshotResource, namespace, name, opts);
}
