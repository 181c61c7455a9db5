// The helpers against a real API server with the operator running: the Go
// test test/clients/typescript_test.go starts the API server, the Vercel
// emulator and the manager, and runs `npm test` with the API server's URL and
// CA and a token of a ServiceAccount bound to the editor role only
// (SANDBOX_TEST_SERVER, SANDBOX_TEST_CA_DATA, SANDBOX_TEST_TOKEN), as a
// serverless function authenticates. By hand, against `make dev`:
//
//	KUBECONFIG=$PWD/bin/dev/kubeconfig npm --prefix clients/typescript test
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  KubernetesApiError,
  LAST_ACTIVITY_ANNOTATION,
  SandboxFailedError,
  SandboxGoneError,
  SandboxTimeoutError,
  activityTimestamp,
  createSandbox,
  deleteSandbox,
  getOrCreateSandbox,
  getSandbox,
  heartbeat,
  kubeConfigForToken,
  SandboxStoppedError,
  ensureReady,
  pauseSandbox,
  readyCondition,
  resumeSandbox,
  waitReady,
  waitStopped,
} from '../src/index.js';
import type { Sandbox, SandboxSpec } from '../src/index.js';
import { eventually, kubeConfig, namespace } from './helpers.js';

const kc = kubeConfig();
const node24: SandboxSpec = { source: { runtime: 'node24' } };

// Every Sandbox a test creates is deleted afterwards, also when it failed.
const created = new Set<string>();
async function create(name: string, spec: SandboxSpec): Promise<Sandbox> {
  const sbx = await createSandbox(kc, { metadata: { name }, spec }, namespace);
  created.add(name);
  return sbx;
}
after(async () => {
  await Promise.allSettled([...created].map((name) => deleteSandbox(kc, namespace, name, { timeoutMs: 60_000 })));
});

describe('a Sandbox through its lifecycle', () => {
  const name = 'ts-conversation';
  let ready: Sandbox;

  before(async () => {
    const sbx = await create(name, { ...node24, ports: [3000], timeoutSeconds: 600 });
    assert.equal(sbx.kind, 'Sandbox');
    assert.equal(sbx.metadata?.namespace, namespace);
    // The API server applied the CRD's defaults.
    assert.equal(sbx.spec.deletionPolicy, 'Delete');
  });

  test('waitReady resolves with the session and its routes', async () => {
    ready = await waitReady(kc, namespace, name, { timeoutMs: 120_000 });
    assert.equal(readyCondition(ready)?.status, 'True');
    assert.equal(ready.status?.phase, 'Running');
    assert.ok(ready.status?.sessionID, 'a Ready Sandbox has a session');
    assert.deepEqual(ready.status?.routes?.map((r) => r.port), [3000]);
  });

  test('getOrCreateSandbox reuses the existing Sandbox', async () => {
    const { sandbox, created: isNew } = await getOrCreateSandbox(kc, { metadata: { name }, spec: node24 }, namespace);
    assert.equal(isNew, false);
    assert.equal(sandbox.metadata?.uid, ready.metadata?.uid);
  });

  test('createSandbox refuses a second Sandbox of the same name', async () => {
    await assert.rejects(createSandbox(kc, { metadata: { name }, spec: node24 }, namespace), (err) => {
      assert.ok(err instanceof KubernetesApiError);
      assert.equal(err.code, 409);
      assert.equal(err.reason, 'AlreadyExists');
      return true;
    });
  });

  test('heartbeat merge-patches the last-activity annotation only', async () => {
    const at = new Date(Date.now() + 1000);
    const patched = await heartbeat(kc, namespace, name, at);
    assert.equal(patched.metadata?.annotations?.[LAST_ACTIVITY_ANNOTATION], activityTimestamp(at));
    assert.match(activityTimestamp(at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    // A merge patch leaves the spec alone: no new generation.
    assert.equal(patched.metadata?.generation, ready.metadata?.generation);
    assert.deepEqual(patched.spec, ready.spec);
  });

  test('deleteSandbox waits until the Sandbox is gone', async () => {
    await deleteSandbox(kc, namespace, name, { timeoutMs: 60_000 });
    await assert.rejects(getSandbox(kc, namespace, name), (err) => {
      assert.ok(err instanceof KubernetesApiError);
      assert.equal(err.code, 404);
      return true;
    });
    // Deleting what is gone is done at once.
    await deleteSandbox(kc, namespace, name, { timeoutMs: 1000 });
  });
});

test('a heartbeat resumes a Sandbox that went idle', async () => {
  const name = 'ts-idle';
  await create(name, { ...node24, timeoutSeconds: 2 });
  const first = await waitReady(kc, namespace, name, { timeoutMs: 120_000 });
  const idle = await eventually('phase Idle', 120_000, async () => {
    const sbx = await getSandbox(kc, namespace, name);
    return sbx.status?.phase === 'Idle' ? sbx : undefined;
  });
  assert.equal(readyCondition(idle)?.reason, 'IdleTimeout');
  // The controller resumes on a heartbeat newer than the stop, which it reads
  // only if the annotation is in the format it parses.
  await heartbeat(kc, namespace, name);
  const resumed = await waitReady(kc, namespace, name, { timeoutMs: 120_000 });
  assert.equal(resumed.status?.phase, 'Running');
  assert.notEqual(resumed.status?.sessionID, first.status?.sessionID, 'the resume starts a new session');
});

test('waitReady rejects with the reason and message of a failed setup', async () => {
  const name = 'ts-bad-setup';
  await create(name, { ...node24, setup: [{ name: 'build', command: 'sh', args: ['-c', 'echo boom >&2; exit 3'] }] });
  await assert.rejects(waitReady(kc, namespace, name, { timeoutMs: 120_000 }), (err) => {
    assert.ok(err instanceof SandboxFailedError, `want SandboxFailedError, got ${err}`);
    assert.equal(err.reason, 'SetupFailed');
    assert.match(err.conditionMessage, /step 1 \(build\) exited with code 3/);
    assert.match(err.message, /boom/);
    assert.equal(err.sandbox.status?.phase, 'Failed');
    return true;
  });
});

test('waitReady times out with the last state it saw', async () => {
  const name = 'ts-waits-for-snapshot';
  await create(name, { source: { snapshotRef: { name: 'not-there' } } });
  const started = Date.now();
  await assert.rejects(waitReady(kc, namespace, name, { timeoutMs: 5_000 }), (err) => {
    assert.ok(err instanceof SandboxTimeoutError, `want SandboxTimeoutError, got ${err}`);
    assert.match(err.message, /SnapshotRefNotFound/);
    return true;
  });
  const took = Date.now() - started;
  assert.ok(took >= 5_000 && took < 15_000, `timed out after ${took} ms, want 5 s`);
});

test('waitReady stops when its signal aborts', async () => {
  const name = 'ts-waits-for-snapshot';
  const controller = new AbortController();
  setTimeout(() => controller.abort(new Error('conversation closed')), 500);
  await assert.rejects(waitReady(kc, namespace, name, { signal: controller.signal }), /conversation closed/);
});

test('waitReady rejects for a Sandbox that does not exist', async () => {
  await assert.rejects(waitReady(kc, namespace, 'ts-never-created', { timeoutMs: 10_000 }), SandboxGoneError);
});

test('createSandbox passes on the API server validation message', async () => {
  await assert.rejects(
    createSandbox(kc, { metadata: { name: 'ts-invalid' }, spec: { source: { runtime: 'node24', snapshotID: 'snap_x' } } }, namespace),
    (err) => {
      assert.ok(err instanceof KubernetesApiError);
      assert.equal(err.code, 422);
      assert.match(err.message, /exactly one of runtime, image, git, tarball, snapshotRef, snapshotID or adopt must be set/);
      return true;
    },
  );
});

test('a ServiceAccount without the editor role is forbidden', async (t) => {
  const { SANDBOX_TEST_SERVER: server, SANDBOX_TEST_CA_DATA: caData, SANDBOX_TEST_UNBOUND_TOKEN: token } = process.env;
  if (!server || !token) {
    t.skip('SANDBOX_TEST_UNBOUND_TOKEN is not set (the Go test sets it)');
    return;
  }
  const stranger = kubeConfigForToken({ server, caData, token, namespace });
  await assert.rejects(createSandbox(stranger, { metadata: { name: 'ts-stranger' }, spec: node24 }), (err) => {
    assert.ok(err instanceof KubernetesApiError);
    assert.equal(err.code, 403);
    assert.equal(err.reason, 'Forbidden');
    assert.match(err.message, /cannot create resource "sandboxes"/);
    return true;
  });
  await assert.rejects(waitReady(stranger, namespace, 'ts-stranger', { timeoutMs: 10_000 }), (err) => {
    assert.ok(err instanceof KubernetesApiError, `want KubernetesApiError, got ${err}`);
    assert.equal(err.code, 403);
    return true;
  });
});

test('a wrong token is refused as unauthorized', async (t) => {
  const { SANDBOX_TEST_SERVER: server, SANDBOX_TEST_CA_DATA: caData } = process.env;
  if (!server) {
    t.skip('SANDBOX_TEST_SERVER is not set (the Go test sets it)');
    return;
  }
  const nobody = kubeConfigForToken({ server, caData, token: 'not-a-token', namespace });
  await assert.rejects(getSandbox(nobody, namespace, 'anything'), (err) => {
    assert.ok(err instanceof KubernetesApiError);
    assert.equal(err.code, 401);
    assert.doesNotMatch(err.message, /not-a-token/);
    return true;
  });
});

test('ensureReady creates with a heartbeat, and on an existing Sandbox heartbeats and waits', async () => {
  const name = 'ts-ensure';
  created.add(name);
  const first = await ensureReady(kc, { metadata: { name }, spec: node24 }, { namespace, timeoutMs: 120_000 });
  assert.equal(first.created, true);
  assert.equal(readyCondition(first.sandbox)?.status, 'True');
  const stamped = first.sandbox.metadata?.annotations?.[LAST_ACTIVITY_ANNOTATION];
  assert.ok(stamped, 'created with a heartbeat');

  const again = await ensureReady(kc, { metadata: { name }, spec: node24 }, { namespace, timeoutMs: 60_000 });
  assert.equal(again.created, false);
  assert.equal(again.sandbox.metadata?.uid, first.sandbox.metadata?.uid);
  const later = again.sandbox.metadata?.annotations?.[LAST_ACTIVITY_ANNOTATION] ?? '';
  assert.ok(later > (stamped ?? ''), `the second call heartbeats: ${later} after ${stamped}`);
});

test('pause, waitStopped, and resume', async () => {
  const name = 'ts-pause';
  await create(name, node24);
  const running = await waitReady(kc, namespace, name, { timeoutMs: 120_000 });
  const paused = await pauseSandbox(kc, namespace, name);
  assert.equal(paused.spec.state, 'Stopped');
  const stopped = await waitStopped(kc, namespace, name, { timeoutMs: 120_000 });
  assert.equal(stopped.status?.phase, 'Stopped');
  // Waiting for Ready on a paused Sandbox would never end: it rejects at once.
  await assert.rejects(waitReady(kc, namespace, name, { timeoutMs: 10_000 }), SandboxStoppedError);

  await resumeSandbox(kc, namespace, name);
  const resumed = await waitReady(kc, namespace, name, { timeoutMs: 120_000 });
  assert.equal(resumed.status?.phase, 'Running');
  assert.notEqual(resumed.status?.sessionID, running.status?.sessionID, 'a resume starts a new session');
});
