// Claims from a SandboxPool: a Sandbox with spec.poolRef takes a warm
// member's Vercel sandbox instead of waiting for a create. claimSandbox
// builds that Sandbox from the pool's template (so a member can serve it),
// creates it unless it exists, waits until it is Ready and says whether it
// took a member or was created cold, and why (its Claimed condition).
import type { KubeConfig } from '@kubernetes/client-node';

import { GoneError, KubernetesApiError } from './errors.js';
import { sandboxpoolResource } from './generated/index.js';
import type { Sandbox, SandboxPool, SandboxSpec } from './generated/index.js';
import { LAST_ACTIVITY_ANNOTATION, activityTimestamp, heartbeat } from './heartbeat.js';
import { getOrCreateSandbox, getSandbox, waitReady } from './sandbox.js';
import type { SandboxInput } from './sandbox.js';
import { conditionOf, deleteObject, describeState, getObject, isCurrent, watchObject } from './watch.js';
import type { WaitOptions } from './watch.js';

/** Options of claimSandbox; the wait options bound the wait for Ready. */
export interface ClaimOptions extends WaitOptions {
  /** Labels of the new Sandbox. */
  labels?: Record<string, string>;
  /** Annotations of the new Sandbox. */
  annotations?: Record<string, string>;
  /**
   * Changes the spec built from the pool's template before the Sandbox is
   * created: typically the claimant's own fields (networkPolicy, ports,
   * timeoutSeconds), which a claimed member takes on. Return a new spec or
   * change the one given.
   */
  customize?: (spec: SandboxSpec) => SandboxSpec | void;
  /**
   * Lets customize change a field a running member cannot take (source,
   * className, resources, env, persistent, setup): the Sandbox is then
   * created cold. Without it such a change rejects with a ColdSpecError
   * before anything is created.
   */
  allowCold?: boolean;
}

/** How a Sandbox with spec.poolRef got its Vercel sandbox (its Claimed condition). */
export interface ClaimResult {
  /** True when it took a ready member; false when it was created cold. */
  claimed: boolean;
  /** The SandboxPool it names. */
  pool: string;
  /** The member Sandbox it took, when claimed. */
  member?: string;
  /** Claimed, or why it was created cold: PoolEmpty, SpecMismatch, PoolNotFound. Undefined while undecided. */
  reason?: string;
  /** The condition's message (which fields mismatched, which member, ...). */
  message?: string;
}

/** claimSandbox's rejection of a spec the pool cannot serve (without allowCold). */
export class ColdSpecError extends Error {
  constructor(
    readonly pool: string,
    /** The differing fields, e.g. "spec.resources". */
    readonly fields: string[],
  ) {
    super(
      `SandboxPool "${pool}" cannot serve this Sandbox: ${fields.join(', ')} differ from its template ` +
        '(a running member cannot take them), so it would be created cold; leave them as the template has them, or set allowCold',
    );
    this.name = 'ColdSpecError';
  }
}

/**
 * The fields the operator compares between a claimant and the pool's template:
 * keep in step with ClaimMismatch in api/v1alpha1/sandboxpool_claim.go, the
 * rule the operator and the Go clients share.
 */
const servedFields = ['source', 'className', 'resources', 'env', 'persistent', 'setup', 'region'] as const;

/**
 * The fields of spec that a member of a pool with this template cannot take
 * (as the operator judges a claim); empty when a member can serve it. An
 * unset field, null and an empty list are the same.
 */
export function poolMismatch(template: SandboxSpec, spec: SandboxSpec): string[] {
  return servedFields.filter((f) => !sameValue(template[f], spec[f])).map((f) => `spec.${f}`);
}

function isAbsent(v: unknown): boolean {
  return v === undefined || v === null || (Array.isArray(v) && v.length === 0);
}

function sameValue(a: unknown, b: unknown): boolean {
  if (isAbsent(a) || isAbsent(b)) return isAbsent(a) && isAbsent(b);
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => sameValue(v, b[i]));
  }
  if (typeof a === 'object' && typeof b === 'object') {
    const ao = a as Record<string, unknown>;
    const bo = b as Record<string, unknown>;
    const keys = new Set([...Object.keys(ao), ...Object.keys(bo)]);
    return [...keys].every((k) => sameValue(ao[k], bo[k]));
  }
  return a === b;
}

/** The claim outcome recorded on a Sandbox (undecided: reason undefined). */
export function claimResultOf(sandbox: Sandbox): ClaimResult {
  const cond = sandbox.status?.conditions?.find((c) => c.type === 'Claimed');
  const claimed = cond?.status === 'True';
  return {
    claimed,
    pool: sandbox.spec.poolRef?.name ?? '',
    member: claimed ? sandbox.status?.claim?.member : undefined,
    reason: cond?.reason,
    message: cond?.message,
  };
}

/** Reads a SandboxPool; rejects with a KubernetesApiError of code 404 when there is none. */
export async function getSandboxPool(kc: KubeConfig, namespace: string, name: string): Promise<SandboxPool> {
  return getObject<SandboxPool>(kc, sandboxpoolResource, namespace, name);
}

/** What a SandboxPool reports about its members and claims (Go: PoolStatus). */
export interface PoolStatus {
  /** spec.replicas, the members asked for. */
  replicas: number;
  /** The members the pool keeps (replicas raised by its policy). */
  target: number;
  /** The members a claim can take now. */
  ready: number;
  /** The unclaimed members that exist. */
  members: number;
  /** The claim rate over the last 10 minutes. */
  claimsPerMinute?: string;
  /** Existing claimants that took a member (hits) or found the pool empty (misses). */
  hits: number;
  misses: number;
  /** How long a new member takes to become claimable, in seconds. */
  replenishSeconds: number;
  /** The Ready condition's reason (Filled, Filling, WaitingForSnapshot, QuotaExceeded) and message. */
  reason?: string;
  message?: string;
}

/** Summarises a SandboxPool's spec and status (Go: PoolStatusOf). */
export function poolStatusOf(pool: SandboxPool): PoolStatus {
  const s = pool.status;
  const ready = conditionOf(pool, 'Ready');
  return {
    replicas: pool.spec.replicas ?? 1,
    target: s?.targetReplicas ?? 0,
    ready: s?.readyReplicas ?? 0,
    members: s?.replicas ?? 0,
    claimsPerMinute: s?.claimsPerMinute,
    hits: s?.hits ?? 0,
    misses: s?.misses ?? 0,
    replenishSeconds: s?.replenishSeconds ?? 0,
    reason: ready?.reason,
    message: ready?.message,
  };
}

/** Reads a SandboxPool and summarises it (Go: PoolStatus). */
export async function getPoolStatus(kc: KubeConfig, namespace: string, name: string): Promise<PoolStatus> {
  return poolStatusOf(await getSandboxPool(kc, namespace, name));
}

/**
 * Waits, by watching, until the SandboxPool holds its target of ready
 * members for its current spec (Ready=True), and returns it (Go:
 * WaitPoolReady).
 */
export async function waitPoolReady(kc: KubeConfig, namespace: string, name: string, opts: WaitOptions = {}): Promise<SandboxPool> {
  return watchObject<SandboxPool, SandboxPool>(kc, sandboxpoolResource, namespace, name, opts, {
    check: (pool) => {
      if (!pool) throw new GoneError(`SandboxPool ${namespace}/${name} does not exist (or was deleted while waiting)`);
      if (pool.metadata?.deletionTimestamp) throw new GoneError(`SandboxPool ${namespace}/${name} is being deleted`);
      return isCurrent(pool) && conditionOf(pool, 'Ready')?.status === 'True' ? pool : undefined;
    },
    timeoutMessage: (last) => `SandboxPool ${namespace}/${name} is not filled ${describeState(last)}`,
  });
}

/**
 * Deletes a SandboxPool and, unless wait is false, waits until it is gone:
 * its unclaimed members and their Vercel sandboxes deleted (Go: DeletePool).
 * Sandboxes that claimed members are not touched.
 */
export async function deletePool(
  kc: KubeConfig,
  namespace: string,
  name: string,
  opts: WaitOptions & { wait?: boolean } = {},
): Promise<void> {
  return deleteObject(kc, sandboxpoolResource, namespace, name, opts);
}

/**
 * The Sandbox that claims a member of pool: the template's spec with
 * spec.poolRef, then opts.customize. Throws a ColdSpecError when customize
 * changed what a member cannot take, unless opts.allowCold; `cold` lists
 * those fields either way.
 */
export function sandboxFromPool(pool: SandboxPool, name: string, opts: ClaimOptions = {}): { sandbox: SandboxInput; cold: string[] } {
  const poolName = pool.metadata?.name ?? '';
  const template = structuredClone(pool.spec.template.spec) as SandboxSpec;
  let spec: SandboxSpec = { ...structuredClone(template), poolRef: { name: poolName } };
  spec = opts.customize?.(spec) ?? spec;
  const cold = poolMismatch(template, spec);
  if (cold.length > 0 && !opts.allowCold) throw new ColdSpecError(poolName, cold);
  const metadata: SandboxInput['metadata'] = { name, namespace: pool.metadata?.namespace };
  if (opts.labels) metadata.labels = { ...opts.labels };
  if (opts.annotations) metadata.annotations = { ...opts.annotations };
  return { sandbox: { metadata, spec }, cold };
}

/**
 * What a conversation starts with when its workspace has a warm pool: unless
 * a Sandbox of that name exists (then it is used as it is and heartbeated,
 * as getOrCreateSandbox does), reads the pool and creates the Sandbox from
 * its template with spec.poolRef; waits until it is Ready (waitReady's
 * rejections apply); and resolves with it and how it got its Vercel sandbox.
 * An empty pool never fails a claim: the Sandbox is created cold and the
 * result says why. A pool that does not exist rejects (KubernetesApiError
 * 404: there is no template), as does an existing Sandbox that names no or
 * another pool.
 */
export async function claimSandbox(
  kc: KubeConfig,
  namespace: string,
  name: string,
  pool: string,
  opts: ClaimOptions = {},
): Promise<{ sandbox: Sandbox; claim: ClaimResult }> {
  const now = new Date();
  let existing: Sandbox | undefined;
  try {
    existing = await getSandbox(kc, namespace, name);
  } catch (err) {
    if (!(err instanceof KubernetesApiError) || err.code !== 404) throw err;
  }
  if (existing) {
    const named = existing.spec.poolRef?.name;
    if (named !== pool) {
      throw new Error(`claim Sandbox ${namespace}/${name} from SandboxPool ${pool}: it exists and names ${named ? `spec.poolRef ${named}` : 'no spec.poolRef'}`);
    }
    await heartbeat(kc, namespace, name, now);
  } else {
    const { sandbox } = sandboxFromPool(await getSandboxPool(kc, namespace, pool), name, opts);
    sandbox.metadata.annotations = { ...sandbox.metadata.annotations, [LAST_ACTIVITY_ANNOTATION]: activityTimestamp(now) };
    await getOrCreateSandbox(kc, sandbox, namespace);
  }
  const ready = await waitReady(kc, namespace, name, opts);
  return { sandbox: ready, claim: claimResultOf(ready) };
}
