// The Heartbeater against the real API server (see sandbox.test.ts for how
// these tests are started): every value the annotation takes is recorded by
// a watch, so a heartbeat that should have been coalesced away would show.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { Watch } from '@kubernetes/client-node';

import {
  KubernetesApiError,
  LAST_ACTIVITY_ANNOTATION,
  activityTimestamp,
  createSandbox,
  deleteSandbox,
  getSandbox,
  sandboxResource,
  startHeartbeat,
} from '../src/index.js';
import type { Heartbeater, Sandbox } from '../src/index.js';
import { eventually, kubeConfig, namespace } from './helpers.js';

const kc = kubeConfig();
const name = 'ts-beats';

after(async () => {
  await deleteSandbox(kc, namespace, name, { timeoutMs: 60_000 });
});

// The annotation's values in the order the API server stored them.
async function recordAnnotations(): Promise<{ values: string[]; stop: () => void }> {
  const values: string[] = [];
  const path = `/apis/${sandboxResource.group}/${sandboxResource.version}/namespaces/${namespace}/${sandboxResource.plural}`;
  const ctl = await new Watch(kc).watch(path, { fieldSelector: `metadata.name=${name}` }, (_type: string, obj: Sandbox) => {
    const v = obj.metadata?.annotations?.[LAST_ACTIVITY_ANNOTATION];
    if (v && values[values.length - 1] !== v) values.push(v);
  }, () => undefined);
  return { values, stop: () => ctl.abort() };
}

async function annotation(): Promise<string | undefined> {
  return (await getSandbox(kc, namespace, name)).metadata?.annotations?.[LAST_ACTIVITY_ANNOTATION];
}

test('a Heartbeater sends the first beat at once and coalesces the next ones into one per interval', async () => {
  await createSandbox(kc, { metadata: { name }, spec: { source: { runtime: 'node24' }, state: 'Stopped' } }, namespace);
  const seen = await recordAnnotations();
  // Long enough that "at once" and "after the interval" cannot be confused
  // on a loaded machine.
  const intervalMs = 8000;
  const hb = startHeartbeat(kc, namespace, name, intervalMs);
  const base = Date.now() - 60_000; // distinct, recognisable times
  const at = (i: number) => new Date(base + i * 1000);
  const until = async (what: string, timeoutMs: number, want: Date) => {
    await eventually(what, timeoutMs, async () => ((await annotation()) === activityTimestamp(want) ? true : undefined)).catch((err: Error) => {
      throw new Error(`${err.message} (the Heartbeater's last error: ${hb.error}; seen: ${seen.values.join(', ')})`);
    });
  };

  try {
    await beats(hb, at, intervalMs, until);
  } finally {
    // A failed assertion must not leave the Heartbeater retrying (its timer
    // would keep the test process alive).
    await hb.stop();
    seen.stop();
  }
  assert.deepEqual(seen.values, [at(1), at(3), at(4)].map((d) => activityTimestamp(d)), 'one patch per interval; at(2) was replaced, at(5) came after stop');
});

async function beats(hb: Heartbeater, at: (i: number) => Date, intervalMs: number, until: (what: string, timeoutMs: number, want: Date) => Promise<void>) {
  const started = Date.now();
  hb.beat(at(1));
  await until('the first beat', intervalMs / 2, at(1));
  assert.ok(Date.now() - started < intervalMs / 2, 'the first beat is sent at once');

  hb.beat(at(2));
  hb.beat(at(3));
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(await annotation(), activityTimestamp(at(1)), 'beats within the interval wait for it to end');
  await until('the coalesced beat', intervalMs + 5000, at(3));

  // stop sends what is pending at once, without waiting for the interval.
  hb.beat(at(4));
  const stopping = Date.now();
  assert.equal(await hb.stop(), undefined);
  assert.ok(Date.now() - stopping < intervalMs, 'stop does not wait for the interval');
  assert.equal(await annotation(), activityTimestamp(at(4)));
  hb.beat(at(5)); // after stop: ignored
  await new Promise((r) => setTimeout(r, 500));
}

test('a Heartbeater reports the error of its last heartbeat', async () => {
  const hb = startHeartbeat(kc, namespace, 'ts-not-there', 1000);
  hb.beat();
  const err = await hb.stop();
  assert.ok(err instanceof KubernetesApiError, `want KubernetesApiError, got ${err}`);
  assert.equal(err.code, 404);
  assert.equal(hb.error, err);
});
