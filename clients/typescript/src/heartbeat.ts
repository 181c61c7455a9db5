// The activity heartbeat: the annotation the controller reads to keep a
// Sandbox's session running (and to wake an Idle one), one patch at a time
// (heartbeat) or coalesced for work that is active often (Heartbeater), as
// pkg/sandboxclient's Heartbeat and Heartbeater.
import { PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import type { KubeConfig } from '@kubernetes/client-node';

import { apiCall } from './errors.js';
import { sandboxResource } from './generated/index.js';
import type { Sandbox } from './generated/index.js';
import { coordinates, customObjects } from './watch.js';

/**
 * The activity heartbeat annotation. The controller keeps the session running
 * until spec.timeoutSeconds past the latest heartbeat, and a heartbeat newer
 * than an idle stop resumes the sandbox. Its value is an RFC 3339 time.
 */
export const LAST_ACTIVITY_ANNOTATION = 'sandbox.sentry.io/last-activity';

/** The Heartbeater's interval when none is given; keep it well under spec.timeoutSeconds. */
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000;

/**
 * The heartbeat value for a time: RFC 3339 in UTC with milliseconds
 * (`2026-01-02T15:04:05.123Z`), which the controller parses. Milliseconds,
 * not whole seconds: the controller resumes an idle Sandbox only for a
 * heartbeat after the stop, which it records to the second, so a heartbeat
 * cut to the second in the same second as the stop would be ignored.
 */
export function activityTimestamp(at: Date = new Date()): string {
  return at.toISOString();
}

/**
 * Sends an activity heartbeat: a JSON merge patch of the last-activity
 * annotation (custom resources refuse strategic merge patches), which touches
 * nothing else and never conflicts with the controller's writes. Returns the
 * patched Sandbox. Each heartbeat is a write to the API server: a busy client
 * sends one every few seconds at most, not one per request (the idle window,
 * spec.timeoutSeconds, is minutes); a Heartbeater does that for it.
 */
export async function heartbeat(kc: KubeConfig, namespace: string, name: string, at: Date = new Date()): Promise<Sandbox> {
  const body = { metadata: { annotations: { [LAST_ACTIVITY_ANNOTATION]: activityTimestamp(at) } } };
  return apiCall(`heartbeat Sandbox ${namespace}/${name}`, () =>
    customObjects(kc).patchNamespacedCustomObject(
      { ...coordinates(sandboxResource, namespace), name, body },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    ),
  );
}

/**
 * Coalesces activity into heartbeats: beat() is cheap and never waits, and
 * at most one patch per interval goes to the API server, carrying the time
 * of the latest beat. The first beat after a quiet interval is sent at once
 * (it may wake an Idle Sandbox); the beats after it wait for the interval to
 * end and are sent as one. A failed patch is tried again after the interval
 * unless a newer beat replaces it. Stop it when the work ends.
 */
export class Heartbeater {
  private pending: Date | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private inFlight: Promise<void> | undefined;
  private nextAllowed = 0;
  private stopped = false;
  private lastError: unknown;

  constructor(
    private readonly kc: KubeConfig,
    readonly namespace: string,
    readonly name: string,
    readonly intervalMs: number = DEFAULT_HEARTBEAT_INTERVAL_MS,
  ) {}

  /** Records activity at `at` (now by default). Ignored after stop. */
  beat(at: Date = new Date()): void {
    if (this.stopped) return;
    this.pending = at;
    this.schedule();
  }

  /** The error of the last heartbeat sent (undefined once one succeeds again). */
  get error(): unknown {
    return this.lastError;
  }

  /**
   * Ends the Heartbeater: waits for a patch in flight, sends the beat still
   * pending (if any) at once, and resolves with the last heartbeat's error
   * (undefined when it succeeded).
   */
  async stop(): Promise<unknown> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.inFlight;
    if (this.pending) await this.send();
    return this.lastError;
  }

  private schedule(): void {
    if (this.inFlight || this.timer || this.stopped) return;
    const wait = Math.max(0, this.nextAllowed - Date.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.send();
    }, wait);
  }

  private send(): Promise<void> {
    const at = this.pending;
    this.pending = undefined;
    if (!at) return Promise.resolve();
    this.nextAllowed = Date.now() + this.intervalMs;
    this.inFlight = heartbeat(this.kc, this.namespace, this.name, at).then(
      () => {
        this.lastError = undefined;
      },
      (err: unknown) => {
        this.lastError = err;
        // Try again after the interval, unless a newer beat came meanwhile.
        this.pending ??= at;
      },
    ).finally(() => {
      this.inFlight = undefined;
      if (this.pending) this.schedule();
    });
    return this.inFlight;
  }
}

/** Starts a Heartbeater for a Sandbox (Go: StartHeartbeat); intervalMs defaults to 30 s. */
export function startHeartbeat(kc: KubeConfig, namespace: string, name: string, intervalMs?: number): Heartbeater {
  return new Heartbeater(kc, namespace, name, intervalMs);
}
