// claimSandbox against a real API server with the operator running, as
// sandbox.test.ts (which says how these tests are started): the pools and
// Sandboxes are created with the editor role's rights.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { CustomObjectsApi } from '@kubernetes/client-node';

import {
  ColdSpecError,
  KubernetesApiError,
  LAST_ACTIVITY_ANNOTATION,
  claimSandbox,
  deleteSandbox,
  getSandbox,
  deletePool,
  getPoolStatus,
  getSandboxPool,
  waitPoolReady,
  poolMismatch,
  readyCondition,
  sandboxpoolResource,
} from '../src/index.js';
import type { SandboxPool, SandboxSpec } from '../src/index.js';
import { kubeConfig, namespace } from './helpers.js';

const kc = kubeConfig();
const pools = kc.makeApiClient(CustomObjectsApi);
const coordinates = {
  group: sandboxpoolResource.group,
  version: sandboxpoolResource.version,
  plural: sandboxpoolResource.plural,
  namespace,
};

async function createPool(name: string, replicas: number): Promise<void> {
  const body: SandboxPool = {
    apiVersion: sandboxpoolResource.apiVersion,
    kind: sandboxpoolResource.kind,
    metadata: { name, namespace },
    spec: { replicas, template: { spec: { source: { runtime: 'node24' }, env: [{ name: 'WORKSPACE', value: 'acme' }] } } },
  };
  await pools.createNamespacedCustomObject({ ...coordinates, body });
}

// Claimants first, then the pools, each waited for: no Sandbox and no
// Vercel sandbox may outlive the tests.
const claimants = ['ts-claim', 'ts-cold', 'ts-big'];
after(async () => {
  await Promise.allSettled(claimants.map((name) => deleteSandbox(kc, namespace, name, { timeoutMs: 60_000 })));
  for (const name of ['ts-warm', 'ts-empty']) await deletePool(kc, namespace, name, { timeoutMs: 60_000 });
  await assert.rejects(getSandboxPool(kc, namespace, 'ts-warm'), (err) => err instanceof KubernetesApiError && err.code === 404);
});

describe('claimSandbox', () => {
  before(async () => {
    await createPool('ts-warm', 1);
    await createPool('ts-empty', 0);
    const filled = await waitPoolReady(kc, namespace, 'ts-warm', { timeoutMs: 120_000 });
    assert.ok((filled.status?.readyReplicas ?? 0) >= 1, 'a filled pool has its ready member');
    const status = await getPoolStatus(kc, namespace, 'ts-warm');
    assert.equal(status.replicas, 1);
    assert.ok(status.ready >= 1 && status.target >= 1, `ready ${status.ready}, target ${status.target}`);
    assert.equal(status.reason, 'Filled');
  });

  test('takes a ready member, built from the template with the claimant own fields', async () => {
    const { sandbox, claim } = await claimSandbox(kc, namespace, 'ts-claim', 'ts-warm', {
      labels: { conversation: '1' },
      customize: (spec) => ({ ...spec, ports: [3000], timeoutSeconds: 900 }),
      timeoutMs: 120_000,
    });
    assert.equal(claim.claimed, true);
    assert.equal(claim.pool, 'ts-warm');
    assert.equal(claim.reason, 'Claimed');
    assert.match(claim.member ?? '', /^ts-warm-/);
    assert.equal(sandbox.status?.claim?.member, claim.member);
    assert.equal(readyCondition(sandbox)?.status, 'True');
    assert.equal(sandbox.spec.poolRef?.name, 'ts-warm');
    assert.deepEqual(sandbox.spec.env, [{ name: 'WORKSPACE', value: 'acme' }]);
    assert.deepEqual(sandbox.spec.ports, [3000]);
    assert.equal(sandbox.metadata?.labels?.conversation, '1');
    assert.ok(sandbox.metadata?.annotations?.[LAST_ACTIVITY_ANNOTATION], 'created with a heartbeat');

    // Again: the same Sandbox and outcome, nothing created.
    const again = await claimSandbox(kc, namespace, 'ts-claim', 'ts-warm', { timeoutMs: 60_000 });
    assert.equal(again.sandbox.metadata?.uid, sandbox.metadata?.uid);
    assert.deepEqual(again.claim, claim);
    // An existing Sandbox is not claimed under another pool's name.
    await assert.rejects(claimSandbox(kc, namespace, 'ts-claim', 'ts-empty'), /names spec\.poolRef ts-warm/);
  });

  test('an empty pool creates it cold and says why', async () => {
    const { sandbox, claim } = await claimSandbox(kc, namespace, 'ts-cold', 'ts-empty', { timeoutMs: 120_000 });
    assert.deepEqual({ claimed: claim.claimed, reason: claim.reason, member: claim.member }, { claimed: false, reason: 'PoolEmpty', member: undefined });
    assert.ok(claim.message, 'the reason comes with a message');
    assert.equal(readyCondition(sandbox)?.status, 'True');
  });

  test('a spec the pool cannot serve is refused unless allowCold', async () => {
    const bigger = (spec: SandboxSpec) => ({ ...spec, resources: { vcpus: 4 } });
    await assert.rejects(claimSandbox(kc, namespace, 'ts-big', 'ts-warm', { customize: bigger }), (err) => {
      assert.ok(err instanceof ColdSpecError, `want ColdSpecError, got ${err}`);
      assert.deepEqual(err.fields, ['spec.resources']);
      assert.equal(err.pool, 'ts-warm');
      return true;
    });
    await assert.rejects(getSandbox(kc, namespace, 'ts-big'), (err) => err instanceof KubernetesApiError && err.code === 404);

    const { sandbox, claim } = await claimSandbox(kc, namespace, 'ts-big', 'ts-warm', { customize: bigger, allowCold: true, timeoutMs: 120_000 });
    assert.equal(claim.claimed, false);
    assert.equal(claim.reason, 'SpecMismatch');
    assert.match(claim.message ?? '', /spec\.resources/);
    assert.equal(sandbox.spec.resources?.vcpus, 4);
  });

  test('a pool that does not exist rejects with 404', async () => {
    await assert.rejects(claimSandbox(kc, namespace, 'ts-orphan', 'ts-nothing'), (err) => {
      assert.ok(err instanceof KubernetesApiError);
      assert.equal(err.code, 404);
      assert.match(err.message, /get SandboxPool .*ts-nothing/);
      return true;
    });
  });
});

test('poolMismatch compares what a member cannot take', () => {
  const template: SandboxSpec = { source: { runtime: 'node24' }, env: [{ name: 'A', value: '1' }] };
  assert.deepEqual(poolMismatch(template, { ...template, ports: [80], timeoutSeconds: 60, networkPolicy: { mode: 'DenyAll' } }), []);
  assert.deepEqual(poolMismatch(template, { ...template, setup: [] }), [], 'an empty list is no list');
  assert.deepEqual(poolMismatch(template, { ...template, source: { runtime: 'python3.13' } }), ['spec.source']);
  assert.deepEqual(poolMismatch(template, { ...template, env: [{ name: 'A', value: '2' }], className: 'gpu' }), ['spec.className', 'spec.env']);
});
