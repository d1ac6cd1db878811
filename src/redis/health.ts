import type { Adapter } from './client.js';

/** The first probe's delay after Redis was found unavailable, and the longest, in ms. */
export const PROBE_FIRST_MS = 50;
export const PROBE_MAX_MS = 1000;

/** A part of Redis found unavailable: when it may be probed next, and whether it is. */
interface Down {
  /** performance.now() from which a probe may go. */
  probeAt: number;
  delayMs: number;
  probing: boolean;
  /** A key of the part (a Cluster routes the probe by it). */
  key: string;
}

/**
 * Whether Redis answers, as the calls of every limiter on one client have found: once a
 * call finds it unavailable (no answer by its deadline, a dropped or reconnecting
 * connection, a node loading or failing over), later calls fail at once — their limiter
 * applies `whenUnavailable` without waiting `timeoutMs` — until one probe at a time,
 * backing off from PROBE_FIRST_MS to PROBE_MAX_MS, finds Redis answering; then calls go to
 * Redis again. Standalone, the client is one part; on a Cluster each hash slot is (the
 * client routes each by its node), so a node down fails its slots' calls fast while the
 * others go on.
 *
 * A probe is a command of its own (PING; on a Cluster EXISTS of a key in the slot), never a
 * caller's: no caller waits for it. While the client reconnects, the probe goes once the
 * client is ready. Probes go only while calls come (each call that fails fast may start
 * one when it is due), so an idle limiter sends nothing.
 */
export class Health {
  private readonly down = new Map<number, Down>();
  /** performance.now() at which each part last came back (its calls sent before, late). */
  private readonly upAt = new Map<number, number>();

  constructor(private readonly adapter: Adapter) {}

  /** Whether calls of `part` fail fast now; starts a probe when one is due. */
  failsFast(part: number, timeoutMs: number): boolean {
    if (this.down.size === 0) return false;
    const d = this.down.get(part);
    if (d === undefined) return false;
    if (!d.probing && performance.now() >= d.probeAt) this.probe(part, d, timeoutMs);
    return true;
  }

  /** A call of `part` sent at `sentAt` (performance.now()) found Redis unavailable. */
  markDown(part: number, key: string, sentAt: number): void {
    // A call sent before the part last came back says nothing of it now.
    if (this.down.has(part) || sentAt < (this.upAt.get(part) ?? -1)) return;
    this.down.set(part, {
      probeAt: performance.now() + PROBE_FIRST_MS,
      delayMs: PROBE_FIRST_MS,
      probing: false,
      key,
    });
  }

  /** A call of `part` got its own reply: Redis answers (no probe needed). */
  answered(part: number): void {
    if (this.down.size === 0 || !this.down.has(part)) return;
    this.down.delete(part);
    this.upAt.set(part, performance.now());
  }

  private probe(part: number, d: Down, timeoutMs: number): void {
    d.probing = true;
    const done = (ok: boolean) => {
      if (this.down.get(part) !== d) return;
      if (ok) {
        this.down.delete(part);
        this.upAt.set(part, performance.now());
        return;
      }
      d.probing = false;
      d.delayMs = Math.min(PROBE_MAX_MS, d.delayMs * 2);
      d.probeAt = performance.now() + d.delayMs;
    };
    if (!this.adapter.ready()) {
      // Reconnecting: a command now would wait in the client's offline queue. Probe as soon
      // as it is ready again (a restarted Redis is back in use at once).
      this.adapter.onceReady(() => this.send(d, timeoutMs, done));
      return;
    }
    this.send(d, timeoutMs, done);
  }

  private send(d: Down, timeoutMs: number, done: (ok: boolean) => void): void {
    let settled = false;
    const finish = (ok: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      done(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    timer.unref?.();
    let reply: Promise<unknown>;
    try {
      reply = this.adapter.probe(d.key);
    } catch {
      finish(false);
      return;
    }
    reply.then(
      () => finish(true),
      (error: unknown) => {
        // An error reply is an answer: Redis is there (a node loading or failing over says
        // so with LOADING, TRYAGAIN, CLUSTERDOWN…, which are not).
        const message = error instanceof Error ? error.message : String(error);
        finish(/^[A-Z][A-Z0-9_-]* /.test(message) && !TRANSIENT.test(message));
      },
    );
  }
}

/** Error replies that mean "this node cannot serve now", not "the command is wrong". */
export const TRANSIENT =
  /^(LOADING|READONLY|CLUSTERDOWN|MASTERDOWN|TRYAGAIN|BUSY|NOREPLICAS|OOM|MOVED|ASK)\b/;

const byClient = new WeakMap<object, Health>();

/** The Health of `client`, shared by every limiter (and adapter) on it. */
export function healthOf(client: object, adapter: Adapter): Health {
  let h = byClient.get(client);
  if (h === undefined) {
    h = new Health(adapter);
    byClient.set(client, h);
  }
  return h;
}
