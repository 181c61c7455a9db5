// Junior's chat function as a serverless platform runs it: a Web-standard
// handler, (req: Request) => Promise<Response>, with no state of its own
// between requests. Per chat message (POST /message {conversation, text}) it
// gets or creates the conversation's Sandbox — claiming a warm member of the
// SandboxPool named by JUNIOR_POOL when the namespace has one, else a cold
// create — sends the activity heartbeat, runs a command through Vercel's
// official SDK (@vercel/sandbox) on the session in status.sessionID, and
// answers with its output.
//
// Identity: the API server is reached with the platform's OIDC token, asked
// for on every Kubernetes request (kubeConfigForToken's token provider), never
// with a kubeconfig; Vercel with its own token (VERCEL_TOKEN).
//
// Configuration (environment): SANDBOX_API_SERVER, SANDBOX_API_CA_DATA (the
// API server's CA, base64 PEM), JUNIOR_NAMESPACE (default "junior"),
// JUNIOR_POOL (a SandboxPool's name; empty: always cold),
// JUNIOR_IDLE_SECONDS (spec.timeoutSeconds, default 600), VERCEL_TOKEN,
// VERCEL_TEAM_ID, VERCEL_PROJECT_ID. The OIDC token comes from the request's
// x-vercel-oidc-token header, as Vercel passes it to a function, else from
// VERCEL_OIDC_TOKEN (`vercel env pull`, or a local run).
import { Sandbox as VercelSandbox } from '@vercel/sandbox';
import {
  KubernetesApiError,
  SandboxFailedError,
  SandboxTimeoutError,
  claimSandbox,
  ensureReady,
  getSandbox,
  heartbeat,
  kubeConfigForToken,
  waitReady,
} from '@getsentry/sandbox-controller-client';

const MAX_TEXT = 4096;
const READY_TIMEOUT_MS = 60_000;

/** The function's configuration, read per request: nothing is cached between invocations. */
export function configFromEnv(env = process.env) {
  const missing = ['SANDBOX_API_SERVER', 'VERCEL_TOKEN', 'VERCEL_TEAM_ID', 'VERCEL_PROJECT_ID'].filter((k) => !env[k]);
  if (missing.length > 0) throw new Error(`junior-serverless: ${missing.join(', ')} not set (see examples/junior-serverless/README.md)`);
  return {
    server: env.SANDBOX_API_SERVER,
    caData: env.SANDBOX_API_CA_DATA || undefined,
    namespace: env.JUNIOR_NAMESPACE || 'junior',
    pool: env.JUNIOR_POOL || '',
    idleSeconds: Number(env.JUNIOR_IDLE_SECONDS || 600),
    vercel: { token: env.VERCEL_TOKEN, teamId: env.VERCEL_TEAM_ID, projectId: env.VERCEL_PROJECT_ID },
  };
}

/** One Sandbox per conversation: a DNS-1123 name derived from its id. */
export async function sandboxName(conversation) {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(conversation));
  return `conv-${Buffer.from(digest).toString('hex').slice(0, 20)}`;
}

// The invocation's OIDC token. Asked for before every Kubernetes request, so
// a long wait (a watch) still sends a token that is current.
function oidcToken(req) {
  return async () => req.headers.get('x-vercel-oidc-token') || process.env.VERCEL_OIDC_TOKEN || '';
}

export default async function handler(req) {
  const url = new URL(req.url);
  if (url.pathname !== '/message') return Response.json({ error: 'NotFound' }, { status: 404 });
  if (req.method !== 'POST') return Response.json({ error: 'MethodNotAllowed' }, { status: 405, headers: { allow: 'POST' } });
  let msg;
  try {
    msg = await req.json();
  } catch {
    return badRequest('the body is not JSON: want {"conversation": "...", "text": "..."}');
  }
  if (typeof msg?.conversation !== 'string' || msg.conversation === '' || msg.conversation.length > 256) {
    return badRequest('conversation: want a string of 1 to 256 characters');
  }
  if (typeof msg.text !== 'string' || msg.text.length > MAX_TEXT) return badRequest(`text: want a string of at most ${MAX_TEXT} characters`);

  const started = performance.now();
  const cfg = configFromEnv();
  const kc = kubeConfigForToken({ server: cfg.server, caData: cfg.caData, namespace: cfg.namespace, token: oidcToken(req) });
  const name = await sandboxName(msg.conversation);
  try {
    const { sandbox, how } = await conversationSandbox(kc, cfg, name, req.signal);
    const readyMs = performance.now() - started;
    const result = await runOnSession(cfg.vercel, sandbox, msg.text, req.signal);
    return Response.json({
      conversation: msg.conversation,
      sandbox: name,
      how,
      sessionID: sandbox.status.sessionID,
      ...result,
      readyMs: Math.round(readyMs),
      outputMs: Math.round(performance.now() - started),
    });
  } catch (err) {
    return errorResponse(err);
  }
}

/**
 * The conversation's Sandbox, Ready: an existing one is heartbeated (which
 * also resumes it when it went Idle) and waited for; a new one claims a member
 * of cfg.pool when the namespace has that pool, else is created cold.
 * how: "reused", "claimed", or "cold" (with the pool's reason when it had no
 * member to give).
 */
export async function conversationSandbox(kc, cfg, name, signal) {
  const wait = { timeoutMs: READY_TIMEOUT_MS, signal };
  const labels = { app: 'junior' };
  let existing;
  try {
    existing = await getSandbox(kc, cfg.namespace, name);
  } catch (err) {
    if (!(err instanceof KubernetesApiError && err.code === 404)) throw err;
  }
  if (existing) {
    await heartbeat(kc, cfg.namespace, name);
    return { sandbox: await waitReady(kc, cfg.namespace, name, wait), how: 'reused' };
  }
  if (cfg.pool) {
    try {
      const { sandbox, claim } = await claimSandbox(kc, cfg.namespace, name, cfg.pool, {
        ...wait,
        labels,
        customize: (spec) => ({ ...spec, timeoutSeconds: cfg.idleSeconds }),
      });
      return { sandbox, how: claim.claimed ? 'claimed' : `cold (${claim.reason})` };
    } catch (err) {
      // The namespace has no such pool (claimSandbox reads it for its
      // template): create cold, as without a pool.
      if (!(err instanceof KubernetesApiError && err.code === 404)) throw err;
    }
  }
  const { sandbox } = await ensureReady(
    kc,
    { metadata: { name, labels }, spec: { source: { runtime: 'node24' }, timeoutSeconds: cfg.idleSeconds } },
    { namespace: cfg.namespace, ...wait },
  );
  return { sandbox, how: 'cold' };
}

/**
 * Runs the message's command with the official SDK on the session the
 * Sandbox reports. Sandbox.get addresses the Vercel sandbox by name
 * (status.vercelName) and returns its current session, which must be the one
 * in status.sessionID: a different one means the operator has not observed
 * it yet, and the command would run where the operator does not look.
 */
export async function runOnSession(creds, sandbox, text, signal) {
  const { vercelName, sessionID } = sandbox.status ?? {};
  if (!vercelName || !sessionID) throw new Error(`Sandbox ${sandbox.metadata?.name} is Ready without status.vercelName or status.sessionID`);
  const vs = await VercelSandbox.get({ ...creds, name: vercelName, signal });
  const session = vs.currentSession();
  if (session.sessionId !== sessionID) {
    throw new SessionMismatchError(`Vercel sandbox ${vercelName} runs session ${session.sessionId}, the Sandbox reports ${sessionID}`);
  }
  // The message goes in through the environment, never into the shell's
  // text. The counter in the working directory shows which messages one
  // session served.
  const cmd = await session.runCommand({
    cmd: 'sh',
    args: ['-c', 'n=$(( $(cat .junior-count 2>/dev/null || echo 0) + 1 )); echo "$n" > .junior-count; printf "%s #%s\\n" "$JUNIOR_TEXT" "$n"'],
    env: { JUNIOR_TEXT: text },
    signal,
  });
  return { exitCode: cmd.exitCode, output: await cmd.stdout() };
}

export class SessionMismatchError extends Error {
  name = 'SessionMismatchError';
}

function badRequest(message) {
  return Response.json({ error: 'BadRequest', message }, { status: 400 });
}

// What the caller sees of a failure: the condition's reason for a Sandbox
// that cannot become Ready, the API server's status for a refused request;
// never a token.
function errorResponse(err) {
  if (err instanceof SandboxFailedError) return Response.json({ error: err.reason, message: err.conditionMessage }, { status: 502 });
  if (err instanceof SandboxTimeoutError) return Response.json({ error: 'NotReadyYet', message: err.message }, { status: 503 });
  if (err instanceof SessionMismatchError) return Response.json({ error: 'SessionChanged', message: err.message }, { status: 503 });
  if (err instanceof KubernetesApiError) {
    return Response.json({ error: err.reason || 'KubernetesApiError', message: err.message }, { status: err.code === 403 || err.code === 401 ? 502 : 500 });
  }
  return Response.json({ error: 'InternalError', message: err instanceof Error ? err.message : String(err) }, { status: 500 });
}
