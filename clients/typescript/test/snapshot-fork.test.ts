// snapshotAndWait and forkAndWait against the real operator (see
// sandbox.test.ts for how these tests are started): a running Sandbox is
// captured into a SandboxSnapshot, two children are forked from it, scaled to
// one, and everything is deleted through the helpers, which wait for the
// controllers' finalizers.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import {
  FORK_LABEL,
  GoneError,
  createSandbox,
  deleteFork,
  deleteSandbox,
  deleteSnapshot,
  forkAndWait,
  forkChildren,
  forkSandbox,
  getSandbox,
  getSandboxFork,
  getSandboxSnapshot,
  readyCondition,
  scaleFork,
  snapshotAndWait,
  waitForkReady,
  waitReady,
  waitSnapshotReady,
} from '../src/index.js';
import { eventually, kubeConfig, namespace } from './helpers.js';

const kc = kubeConfig();

after(async () => {
  await deleteFork(kc, namespace, 'ts-fork', { timeoutMs: 90_000 }).catch(() => undefined);
  await deleteSnapshot(kc, namespace, 'ts-snap', { timeoutMs: 60_000 }).catch(() => undefined);
  await deleteSandbox(kc, namespace, 'ts-source', { timeoutMs: 60_000 }).catch(() => undefined);
});

test('a snapshot of a running Sandbox, then a fork of it', async () => {
  await createSandbox(kc, { metadata: { name: 'ts-source' }, spec: { source: { runtime: 'node24' }, ports: [3000] } }, namespace);
  await waitReady(kc, namespace, 'ts-source', { timeoutMs: 120_000 });

  const snap = await snapshotAndWait(kc, namespace, 'ts-source', 'ts-snap', { keepSourceRunning: true, labels: { conversation: '7' }, timeoutMs: 120_000 });
  assert.equal(snap.status?.readyToUse, true);
  assert.ok(snap.status?.snapshotID, 'a Ready snapshot has its Vercel id');
  assert.equal(snap.spec.source.sandboxRef?.name, 'ts-source');
  assert.equal(snap.metadata?.labels?.conversation, '7');
  // keepSourceRunning: the source is Ready again.
  const source = await waitReady(kc, namespace, 'ts-source', { timeoutMs: 120_000 });
  assert.equal(source.status?.phase, 'Running');

  const { fork, children } = await forkAndWait(kc, namespace, 'ts-fork', { snapshot: 'ts-snap' }, 2, {
    template: { metadata: { labels: { branch: 'try' } } },
    timeoutMs: 180_000,
  });
  assert.equal(fork.status?.phase, 'Ready');
  assert.equal(fork.status?.readyReplicas, 2);
  assert.deepEqual(children.map((c) => c.metadata?.name), ['ts-fork-0', 'ts-fork-1']);
  for (const child of children) {
    assert.equal(child.metadata?.labels?.[FORK_LABEL], 'ts-fork');
    assert.equal(child.metadata?.labels?.branch, 'try');
    assert.equal(readyCondition(child)?.status, 'True');
    // Inherited from the captured Sandbox's spec.
    assert.deepEqual(child.spec.ports, [3000]);
  }

  await scaleFork(kc, namespace, 'ts-fork', 1);
  const scaled = await waitForkReady(kc, namespace, 'ts-fork', { timeoutMs: 120_000 });
  assert.equal(scaled.status?.readyReplicas, 1);
  assert.deepEqual(scaled.status?.children?.map((c) => c.name), ['ts-fork-0']);
  // The fork counts the surplus child out as soon as it deletes it; the
  // child itself stays listed until its finalizer has deleted its Vercel
  // sandbox (a loaded machine made that outlast waitForkReady).
  const names = await eventually('the surplus child to be deleted', 60_000, async () => {
    const listed = (await forkChildren(kc, namespace, 'ts-fork')).map((c) => c.metadata?.name);
    return listed.length > 1 ? undefined : listed;
  });
  assert.deepEqual(names, ['ts-fork-0']);

  // Deletes wait for the finalizers: the children and the snapshot are gone after.
  await deleteFork(kc, namespace, 'ts-fork', { timeoutMs: 90_000 });
  await assert.rejects(getSandboxFork(kc, namespace, 'ts-fork'), { code: 404 });
  await assert.rejects(getSandbox(kc, namespace, 'ts-fork-0'), { code: 404 });
  await deleteSnapshot(kc, namespace, 'ts-snap', { timeoutMs: 60_000 });
  await assert.rejects(getSandboxSnapshot(kc, namespace, 'ts-snap'), { code: 404 });
});

test('the snapshot and fork waits reject for what does not exist', async () => {
  await assert.rejects(waitSnapshotReady(kc, namespace, 'ts-no-snap', { timeoutMs: 10_000 }), GoneError);
  await assert.rejects(waitForkReady(kc, namespace, 'ts-no-fork', { timeoutMs: 10_000 }), GoneError);
  await assert.rejects(forkSandbox(kc, namespace, 'x', { sandbox: 'a', snapshot: 'b' } as never, 1), /exactly one of source\.sandbox and source\.snapshot/);
});
