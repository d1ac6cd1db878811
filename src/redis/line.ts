import { QueueFullError } from '../errors.js';
import type { RedisLease } from './options.js';
import type { Reply } from './replies.js';
import { timedOut, type Waiter } from './wait.js';

/** One try of a waiter: a lease, or the refusal's reply. */
export type Attempt = (w: Waiter) => Promise<{ lease?: RedisLease; reply?: Reply }>;

/**
 * This process's acquire() waiters per key, each key's in a FIFO line: only its head asks
 * Redis, after each refusal's wait (`pause`); the head leaving wakes the next one. Across
 * processes heads race (README).
 */
export class WaitingLine {
  private readonly lines = new Map<string, Waiter[]>();

  /** Permits waiting for `tag`. */
  queued(tag: string): number {
    let n = 0;
    for (const w of this.lines.get(tag) ?? []) n += w.permits;
    return n;
  }

  /** Waits in `w.tag`'s line until `attempt` grants, at most `queueLimit` permits waiting. */
  async wait(
    w: Waiter,
    owner: string,
    queueLimit: number,
    attempt: Attempt,
    pause: (w: Waiter, r: Reply) => Promise<void>,
  ): Promise<RedisLease> {
    const line = this.lines.get(w.tag);
    if (!line || line.length === 0) {
      // Nobody of ours waits: one try before queueing.
      const r = await attempt(w);
      if (r.lease) return r.lease;
    }
    if (queueLimit === 0) {
      throw new QueueFullError(`${owner}: option "queueLimit" is 0, so acquire() never waits`);
    }
    if (this.queued(w.tag) + w.permits > queueLimit) {
      throw new QueueFullError(
        `${owner}: ${this.queued(w.tag)} permits already wait for this key (option "queueLimit" is ${queueLimit})`,
      );
    }
    if (w.once) throw timedOut();
    const mine = this.lines.get(w.tag) ?? [];
    this.lines.set(w.tag, mine);
    mine.push(w);
    try {
      while (mine[0] !== w) {
        await w.race(new Promise<void>((resolve) => (w.wake = resolve)));
      }
      for (;;) {
        const r = await attempt(w);
        if (r.lease) return r.lease;
        await w.race(pause(w, r.reply!));
      }
    } finally {
      const i = mine.indexOf(w);
      if (i >= 0) mine.splice(i, 1);
      if (mine.length === 0) this.lines.delete(w.tag);
      else if (i === 0) mine[0]!.wake?.();
    }
  }
}
