// Junior's notification receiver: a Web-standard handler for the operator's
// webhook (docs/clients.md, Notifications). Every delivery is verified with
// the standardwebhooks package (Standard Webhooks v1) on the raw body before
// anything is parsed; duplicates (at-least-once delivery: the same
// webhook-id) are recorded once. It reacts to
//
//   io.sentry.sandbox.sandbox.idle     the conversation's sandbox stopped after
//                                      its idle window: the next message
//                                      resumes it (the handler's heartbeat)
//   io.sentry.sandbox.sandbox.deleted  the Sandbox is gone: the conversation
//                                      starts afresh on its next message
//
// and records the others it receives (ready, failed). What it records goes to
// a store: here a directory (JUNIOR_STATE_DIR), one file per delivery, created
// exclusively so a duplicate is seen as one, and one file per Sandbox with
// its last state. A deployment uses its platform's durable store instead.
//
// Configuration (environment): SANDBOX_WEBHOOK_SECRET ("whsec_" + the base64
// of the signing Secret's value), JUNIOR_STATE_DIR.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { Webhook } from 'standardwebhooks';

const PREFIX = 'io.sentry.sandbox.sandbox.';
const MAX_BODY = 1 << 20;

/** What the receiver does for each Sandbox event type. */
const reactions = {
  ready: 'running',
  idle: 'idle: the next message resumes it',
  failed: 'failed',
  deleted: 'deleted: the conversation starts afresh',
};

/** A store in a directory: deliveries recorded once by id, and each Sandbox's last state. */
export function directoryStore(dir) {
  return {
    /** Records the delivery unless its id was seen; false for a duplicate. */
    async once(id, record) {
      await mkdir(path.join(dir, 'deliveries'), { recursive: true });
      try {
        await writeFile(path.join(dir, 'deliveries', `${id}.json`), JSON.stringify(record), { flag: 'wx' });
        return true;
      } catch (err) {
        if (err.code === 'EEXIST') return false;
        throw err;
      }
    },
    async setState(sandbox, state) {
      await mkdir(path.join(dir, 'sandboxes'), { recursive: true });
      await writeFile(path.join(dir, 'sandboxes', `${sandbox}.json`), JSON.stringify(state));
    },
    async state(sandbox) {
      try {
        return JSON.parse(await readFile(path.join(dir, 'sandboxes', `${sandbox}.json`), 'utf8'));
      } catch (err) {
        if (err.code === 'ENOENT') return undefined;
        throw err;
      }
    },
  };
}

/**
 * A receiver verifying with secret and recording into store. log gets one
 * object per delivery (no secret, no signature in it).
 */
export function createWebhookHandler({ secret, store, log = (line) => console.log(JSON.stringify(line)) }) {
  const wh = new Webhook(secret);
  return async function webhook(req) {
    if (req.method !== 'POST') return new Response(null, { status: 405, headers: { allow: 'POST' } });
    const body = await req.text();
    if (body.length > MAX_BODY) return new Response('body too large', { status: 413 });
    let event;
    try {
      // Throws for a forged body or signature, or a timestamp more than
      // five minutes off (a replay).
      event = wh.verify(body, {
        'webhook-id': req.headers.get('webhook-id') ?? '',
        'webhook-timestamp': req.headers.get('webhook-timestamp') ?? '',
        'webhook-signature': req.headers.get('webhook-signature') ?? '',
      });
    } catch (err) {
      log({ verified: false, error: err instanceof Error ? err.message : String(err) });
      return new Response('bad signature', { status: 401 });
    }
    const id = req.headers.get('webhook-id');
    const transition = event.type?.startsWith(PREFIX) ? event.type.slice(PREFIX.length) : '';
    const reaction = reactions[transition] ?? 'ignored';
    const first = await store.once(id, { type: event.type, subject: event.subject, time: event.time });
    if (first && reactions[transition]) {
      await store.setState(event.subject, { state: transition, at: event.time, sessionID: event.data?.sessionID, webhookID: id });
    }
    log({ verified: true, webhookID: id, type: event.type, subject: event.subject, sessionID: event.data?.sessionID, duplicate: !first, reaction });
    // Answer at once: the work is recorded, not done in the request.
    return new Response(null, { status: 204 });
  };
}

let fromEnv;

/** The receiver configured from the environment (built on first use). */
export default async function webhook(req) {
  if (!fromEnv) {
    const { SANDBOX_WEBHOOK_SECRET, JUNIOR_STATE_DIR } = process.env;
    if (!SANDBOX_WEBHOOK_SECRET || !JUNIOR_STATE_DIR) {
      throw new Error('junior-serverless webhook: SANDBOX_WEBHOOK_SECRET and JUNIOR_STATE_DIR must be set');
    }
    fromEnv = createWebhookHandler({ secret: SANDBOX_WEBHOOK_SECRET, store: directoryStore(JUNIOR_STATE_DIR) });
  }
  return fromEnv(req);
}
