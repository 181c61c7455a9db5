// Reading a namespace's SandboxQuotas (see sandbox.test.ts for how these
// tests are started): the Go test creates the SandboxQuota ts-budget, with a
// Creations budget, and binds the tests' ServiceAccount to the viewer role,
// which lets it read quotas (the editor role does not).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { getSandboxQuota, namespaceQuotaStatus, quotaStatusOf } from '../src/index.js';
import type { SandboxQuota } from '../src/index.js';
import { eventually, kubeConfig, namespace } from './helpers.js';

const kc = kubeConfig();

test('namespaceQuotaStatus reads the budgets the controller counts', async (t) => {
  if (!process.env.SANDBOX_TEST_QUOTA) {
    t.skip('SANDBOX_TEST_QUOTA is not set (the Go test creates the quota and sets it)');
    return;
  }
  const quota = await getSandboxQuota(kc, namespace, process.env.SANDBOX_TEST_QUOTA);
  assert.equal(quota.spec.budgets?.[0]?.name, 'creations');
  const status = await eventually('the budget counted', 120_000, async () => {
    const s = await namespaceQuotaStatus(kc, namespace);
    return s.budgets[0]?.countedAt ? s : undefined;
  });
  assert.deepEqual(status.quotas, [process.env.SANDBOX_TEST_QUOTA]);
  const [budget] = status.budgets;
  assert.equal(budget.quota, process.env.SANDBOX_TEST_QUOTA);
  assert.equal(budget.name, 'creations');
  assert.equal(budget.unit, 'Creations');
  assert.equal(budget.limit, '1000');
  assert.equal(budget.enforcement, 'Refuse');
  assert.match(budget.spent ?? '', /^\d+(\.\d+)?$/);
  assert.deepEqual(status.exceeded, []);
  assert.deepEqual(status.limitsReached, []);
});

test('quotaStatusOf lists exceeded budgets and reached limits', () => {
  const quota = (name: string, status: SandboxQuota['status']): SandboxQuota => ({
    metadata: { name },
    spec: { hard: { runningSandboxes: 2, sandboxes: 10 }, budgets: [{ name: 'money', limit: '50', window: { rollingSeconds: 3600 } }] },
    status,
  });
  const s = quotaStatusOf([
    quota('a', { used: { runningSandboxes: 2, sandboxes: 3 }, hard: { runningSandboxes: 2, sandboxes: 10 }, budgets: [{ name: 'money', action: 'Refuse', spent: '51' }] }),
    quota('b', { used: { runningSandboxes: 1 }, budgets: [{ name: 'money', action: 'Warn', spent: '40' }] }),
    quota('c', undefined),
  ]);
  assert.deepEqual(s.quotas, ['a', 'b', 'c']);
  assert.deepEqual(s.exceeded.map((b) => `${b.quota}/${b.name}`), ['a/money']);
  assert.deepEqual(s.limitsReached, ['a: runningSandboxes 2/2']);
  // A budget not counted yet is listed from spec.
  assert.deepEqual({ ...s.budgets[2] }, { name: 'money', quota: 'c', limit: '50', enforcement: undefined, unit: undefined });
});
