// The errors the helpers reject with, shared by every kind: what the API
// server answered (KubernetesApiError), a wait that will not end as asked
// without a change (ConditionError, as pkg/sandboxclient's ConditionError),
// and a wait whose time ran out (WaitTimeoutError).
import { ApiException } from '@kubernetes/client-node';

/**
 * An error the API server answered with: `code` is the HTTP status (403 when
 * the caller's role does not allow the request, 404 not found, 409 already
 * exists or conflict, 422 invalid), `reason` the Status reason (Forbidden,
 * NotFound, AlreadyExists, Invalid, ...), and the message is the API
 * server's, e.g. the CRD validation that refused a spec.
 */
export class KubernetesApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = 'KubernetesApiError';
  }
}

/** A condition of any of the kinds' status (Ready, Synced, Claimed, ...). */
export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration?: number;
}

/**
 * A wait's rejection when the object reports a terminal phase: the state
 * asked for will not come without a change (a failed setup command, a failed
 * snapshot capture, a fork whose source failed). `reason` and
 * `conditionMessage` are the condition's (conditionType, usually Ready), as
 * `kubectl describe` shows them.
 */
export class ConditionError extends Error {
  /** The condition's reason, e.g. SetupFailed, CaptureFailed. */
  readonly reason: string;
  /** The condition's message, e.g. which setup step exited with which code. */
  readonly conditionMessage: string;
  constructor(
    readonly kind: string,
    readonly object: { metadata?: { namespace?: string; name?: string }; status?: { phase?: string; conditions?: Condition[] } },
    readonly conditionType = 'Ready',
  ) {
    const cond = object.status?.conditions?.find((c) => c.type === conditionType);
    const reason = cond?.reason ?? 'Unknown';
    const conditionMessage = cond?.message ?? '';
    super(`${kind} ${object.metadata?.namespace}/${object.metadata?.name} failed: ${reason}: ${conditionMessage}`);
    this.name = 'ConditionError';
    this.reason = reason;
    this.conditionMessage = conditionMessage;
  }
}

/** A wait's rejection when its time ran out; the message says the last state seen. */
export class WaitTimeoutError<T = unknown> extends Error {
  constructor(
    message: string,
    /** The last version of the object the wait saw (undefined: none). */
    readonly object: T | undefined,
  ) {
    super(message);
    this.name = 'WaitTimeoutError';
  }
}

/** A wait's rejection when the object does not exist or was deleted while waiting. */
export class GoneError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GoneError';
  }
}

/**
 * Runs one request of @kubernetes/client-node and turns its ApiException
 * (whose message is the raw response with its headers) into a
 * KubernetesApiError carrying the API server's own message, prefixed with
 * `what` (e.g. "get SandboxPool junior/workspace").
 */
export async function apiCall<T>(what: string, request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (err) {
    if (!(err instanceof ApiException)) throw err;
    let reason: string | undefined;
    let message = `HTTP ${err.code}`;
    try {
      const status = typeof err.body === 'string' ? JSON.parse(err.body) : err.body;
      if (status?.message) message = status.message;
      reason = status?.reason;
    } catch {
      // Not a Status object (a proxy's page, say): its start tells more
      // than the code alone.
      if (typeof err.body === 'string' && err.body.trim()) message += `: ${err.body.trim().slice(0, 200)}`;
    }
    throw new KubernetesApiError(err.code, reason, `${what}: ${message}`);
  }
}

/** True for a KubernetesApiError of the given HTTP status. */
export function isApiError(err: unknown, code: number): err is KubernetesApiError {
  return err instanceof KubernetesApiError && err.code === code;
}
