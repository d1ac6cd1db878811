import type { Decision, Key, Limiter } from './limiter.js';
import { permitsError } from './validate.js';

/**
 * Several limiters acting as one: a request is granted by all of them or by none. Each is
 * asked in order; when one refuses, the permits already taken from the earlier ones are
 * refunded. Between the take and the refund other callers may briefly see those permits
 * as used (they come back; they are never lost).
 */
export class Chain {
  readonly limiters: readonly Limiter[];
  /** Largest permits one call may ask for: the smallest limit of the chain. */
  readonly limit: number;

  constructor(limiters: readonly Limiter[]) {
    this.limiters = [...limiters];
    this.limit = Math.min(...this.limiters.map((l) => l.limit));
  }

  private check(permits: number): void {
    if (!(permits >= 1 && permits <= this.limit) || (permits | 0) !== permits) {
      throw permitsError('chain', permits, this.limit);
    }
  }

  private undo(upTo: number, key: Key | undefined, permits: number): void {
    for (let j = upTo - 1; j >= 0; j--) this.limiters[j]!.refund(key, permits);
  }

  /** Takes `permits` from every limiter, or from none. */
  tryAcquire(key?: Key, permits = 1): boolean {
    this.check(permits);
    const ls = this.limiters;
    for (let i = 0; i < ls.length; i++) {
      let ok = false;
      try {
        ok = ls[i]!.tryAcquire(key, permits);
      } finally {
        if (!ok) this.undo(i, key, permits);
      }
      if (!ok) return false;
    }
    return true;
  }

  /**
   * Like `tryAcquire`, with a Decision: on refusal, the refusing limiter's decision; when
   * granted, the tightest figures (fewest remaining, longest reset) of the chain.
   */
  consume(key?: Key, permits = 1): Decision {
    this.check(permits);
    const ls = this.limiters;
    let remaining = Number.POSITIVE_INFINITY;
    let resetAfterMs = 0;
    for (let i = 0; i < ls.length; i++) {
      let d: Decision | undefined;
      try {
        d = ls[i]!.consume(key, permits);
      } finally {
        if (!d?.allowed) this.undo(i, key, permits);
      }
      if (!d.allowed) return d;
      remaining = Math.min(remaining, d.remaining);
      resetAfterMs = Math.max(resetAfterMs, d.resetAfterMs);
    }
    return { allowed: true, remaining, limit: this.limit, retryAfterMs: 0, resetAfterMs };
  }

  /** Gives `permits` back to every limiter of the chain. */
  refund(key?: Key, permits = 1): void {
    this.check(permits);
    for (const l of this.limiters) l.refund(key, permits);
  }
}

/** Composes limiters all-or-nothing: `chain(perSecond, perMinute).tryAcquire(ip)`. */
export function chain(...limiters: Limiter[]): Chain {
  if (limiters.length === 0) throw new TypeError('chain: give at least one limiter');
  return new Chain(limiters);
}
