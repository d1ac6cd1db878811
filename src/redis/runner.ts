import { createHash } from 'node:crypto';
import type { Adapter, Command } from './client.js';

/** A Lua script and its SHA1 (what EVALSHA names it by). */
export class Script {
  readonly sha: string;
  constructor(
    readonly name: string,
    readonly source: string,
  ) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

/** Why a call got no usable answer: Redis could not be reached in time. */
export class Unavailable extends Error {
  override readonly name = 'Unavailable';
}

// Error replies that mean "this node cannot serve now" (loading, failover, cluster down),
// not "the script is wrong": they count as Redis being unavailable.
const TRANSIENT =
  /^(LOADING|READONLY|CLUSTERDOWN|MASTERDOWN|TRYAGAIN|BUSY|NOREPLICAS|OOM|MOVED|ASK)\b/;
// An error reply starts with an upper-case code; client-side errors (closed connection,
// refused, offline queue disabled) do not.
const REPLY = /^[A-Z][A-Z0-9_-]* /;

interface Pending {
  readonly command: Command;
  readonly script: Script;
  readonly resolve: (reply: unknown) => void;
  readonly reject: (error: unknown) => void;
  readonly deadline: number;
  done: boolean;
}

/**
 * Runs scripts for one limiter: every call made in the same tick goes to the adapter in
 * one batch (one write), every call settles within `timeoutMs` whatever the client does
 * (reconnecting, queueing offline), and only NOSCRIPT is retried — by EVAL, which runs the
 * script and caches it on that node. After a timeout or a dropped connection the script may
 * have run; running it again could charge twice, so those are reported, never replayed.
 *
 * One timer covers all calls in flight (armed for the oldest deadline), not one per call.
 */
export class Runner {
  private queue: Pending[] = [];
  private scheduled = false;
  private readonly inFlight = new Set<Pending>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private timerAt = 0;

  constructor(
    private readonly adapter: Adapter,
    private readonly timeoutMs: number,
  ) {}

  run(
    script: Script,
    keys: readonly string[],
    args: readonly string[],
    slot: number,
  ): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const p: Pending = {
        command: { verb: 'EVALSHA', script: script.sha, keys, args, slot },
        script,
        resolve,
        reject,
        deadline: performance.now() + this.timeoutMs,
        done: false,
      };
      this.queue.push(p);
      this.inFlight.add(p);
      this.arm(p.deadline);
      if (!this.scheduled) {
        this.scheduled = true;
        process.nextTick(this.flush);
      }
    });
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const batch = this.queue;
    this.queue = [];
    this.dispatch(batch);
  };

  private dispatch(batch: Pending[]): void {
    let replies: Promise<unknown>[];
    try {
      replies = this.adapter.send(batch.map((p) => p.command));
    } catch (error) {
      for (const p of batch) this.fail(p, error);
      return;
    }
    batch.forEach((p, i) => {
      replies[i]!.then(
        (reply) => this.settle(p, reply),
        (error) => this.fail(p, error),
      );
    });
  }

  private settle(p: Pending, reply: unknown): void {
    if (p.done) return;
    p.done = true;
    this.inFlight.delete(p);
    p.resolve(reply);
  }

  private fail(p: Pending, error: unknown): void {
    if (p.done) return;
    const message = error instanceof Error ? error.message : String(error);
    if (p.command.verb === 'EVALSHA' && message.startsWith('NOSCRIPT')) {
      // The node restarted, failed over or its scripts were flushed: run the source.
      const retry: Pending = {
        ...p,
        command: { ...p.command, verb: 'EVAL', script: p.script.source },
      };
      this.inFlight.delete(p);
      p.done = true;
      this.inFlight.add(retry);
      this.dispatch([retry]);
      return;
    }
    p.done = true;
    this.inFlight.delete(p);
    if (REPLY.test(message) && !TRANSIENT.test(message)) {
      p.reject(
        new Error(`atomic-limiter/redis: script ${p.script.name} failed: ${message}`, {
          cause: error,
        }),
      );
    } else {
      p.reject(new Unavailable(message, { cause: error }));
    }
  }

  private arm(deadline: number): void {
    if (this.timer && this.timerAt <= deadline) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = deadline;
    this.timer = setTimeout(this.expire, Math.max(1, deadline - performance.now()));
    // Calls in flight keep the client busy anyway; this timer alone must not delay exit.
    this.timer.unref?.();
  }

  private readonly expire = (): void => {
    this.timer = undefined;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    for (const p of this.inFlight) {
      if (p.deadline <= now + 0.5) {
        p.done = true;
        this.inFlight.delete(p);
        p.reject(new Unavailable(`no answer from Redis within ${this.timeoutMs} ms`));
      } else if (p.deadline < next) {
        next = p.deadline;
      }
    }
    if (next !== Number.POSITIVE_INFINITY) this.arm(next);
  };
}
