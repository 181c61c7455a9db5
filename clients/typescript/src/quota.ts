// What a client reads of its namespace's SandboxQuotas: how much of each
// hard limit is used and where each budget stands (spent, projected, the
// action in force), so a program can tell a user "this workspace is out of
// budget" before its next Sandbox waits. Reading SandboxQuotas needs the
// viewer role (sandbox-controller-sandbox-viewer-role, aggregated into
// `view`), which the editor role does not include.
import type { KubeConfig } from '@kubernetes/client-node';

import { apiCall } from './errors.js';
import { sandboxquotaResource } from './generated/index.js';
import type { SandboxQuota, SandboxQuotaStatus } from './generated/index.js';
import { coordinates, customObjects, getObject } from './watch.js';

/** One budget of a SandboxQuota as its status reports it. */
export type BudgetStatus = NonNullable<SandboxQuotaStatus['budgets']>[number] & {
  /** The SandboxQuota the budget belongs to. */
  quota: string;
  /** spec's limit, in the budget's unit. */
  limit?: string;
  /** spec's enforcement at the limit (Warn, Refuse, Stop). */
  enforcement?: string;
};

/** A namespace's quota state: every limit and budget of its SandboxQuotas. */
export interface NamespaceQuotaStatus {
  /** The SandboxQuotas, by name. */
  quotas: string[];
  /** Every budget of every quota, quota by quota in spec order. */
  budgets: BudgetStatus[];
  /** The budgets whose action in force is Refuse or Stop: new sessions wait (or run ones stop). */
  exceeded: BudgetStatus[];
  /**
   * The hard limits that are reached (used ≥ hard), as "quota: resource
   * used/hard", e.g. "team: runningSandboxes 2/2".
   */
  limitsReached: string[];
}

/** Reads a SandboxQuota; rejects with a KubernetesApiError of code 404 when there is none. */
export async function getSandboxQuota(kc: KubeConfig, namespace: string, name: string): Promise<SandboxQuota> {
  return getObject<SandboxQuota>(kc, sandboxquotaResource, namespace, name);
}

/** Lists the SandboxQuotas of a namespace, by name. */
export async function listSandboxQuotas(kc: KubeConfig, namespace: string): Promise<SandboxQuota[]> {
  const list = await apiCall(`list SandboxQuotas in ${namespace}`, () =>
    customObjects(kc).listNamespacedCustomObject(coordinates(sandboxquotaResource, namespace)),
  );
  const items = ((list as { items?: SandboxQuota[] }).items ?? []).slice();
  return items.sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
}

/** The budgets of one SandboxQuota, each with its spec's limit and enforcement. */
export function budgetsOf(quota: SandboxQuota): BudgetStatus[] {
  const name = quota.metadata?.name ?? '';
  const specs = new Map((quota.spec.budgets ?? []).map((b) => [b.name, b]));
  // A budget the controller has not counted yet is listed from spec alone.
  const reported = new Map((quota.status?.budgets ?? []).map((b) => [b.name, b]));
  const names = [...specs.keys(), ...[...reported.keys()].filter((n) => !specs.has(n))];
  return names.map((n) => ({
    ...(reported.get(n) ?? { name: n }),
    quota: name,
    limit: specs.get(n)?.limit,
    enforcement: specs.get(n)?.enforcement,
    unit: reported.get(n)?.unit ?? specs.get(n)?.unit,
  }));
}

/** Summarises SandboxQuotas (as listSandboxQuotas returns them). */
export function quotaStatusOf(quotas: SandboxQuota[]): NamespaceQuotaStatus {
  const budgets = quotas.flatMap(budgetsOf);
  const limitsReached: string[] = [];
  for (const q of quotas) {
    const hard = q.status?.hard ?? q.spec.hard;
    const used = q.status?.used ?? {};
    for (const [resource, limit] of Object.entries(hard ?? {})) {
      const n = (used as Record<string, number | undefined>)[resource] ?? 0;
      if (typeof limit === 'number' && n >= limit) limitsReached.push(`${q.metadata?.name}: ${resource} ${n}/${limit}`);
    }
  }
  return {
    quotas: quotas.map((q) => q.metadata?.name ?? ''),
    budgets,
    exceeded: budgets.filter((b) => b.action === 'Refuse' || b.action === 'Stop'),
    limitsReached,
  };
}

/**
 * The quota state of a namespace: its SandboxQuotas' budgets and reached
 * limits (an empty state when it has none: nothing limits it).
 */
export async function namespaceQuotaStatus(kc: KubeConfig, namespace: string): Promise<NamespaceQuotaStatus> {
  return quotaStatusOf(await listSandboxQuotas(kc, namespace));
}

