import { expect } from 'vitest';
import type * as mem from '../../src/index.js';
import type * as red from '../../src/redis/index.js';

/** The calls a parity test makes on both limiters. */
export type ParityCall = 'give-back' | 'tryAcquire' | 'consume';

/**
 * Makes one call on an in-memory limiter `m` and on a Redis limiter `r` of the same class, and
 * expects the same answer from both, naming the step. A give-back is Concurrency's
 * release() (both throw, or neither) or another class's refund().
 */
export async function sameAnswer(
  call: ParityCall,
  m: mem.AnyLimiter,
  r: Pick<red.TokenBucket, 'tryAcquire' | 'consume'>,
  key: string | number | undefined,
  permits: number,
  step: number,
): Promise<void> {
  if (call === 'give-back') {
    if (m.algorithm === 'Concurrency') {
      let memError: unknown;
      try {
        (m as mem.Concurrency).release(key, permits);
      } catch (e) {
        memError = e;
      }
      const redisError = await (r as red.Concurrency).release(key, permits).then(
        () => undefined,
        (e) => e,
      );
      expect([step, redisError?.constructor]).toEqual([step, memError?.constructor]);
    } else {
      (m as mem.TokenBucket).refund(key, permits);
      await (r as red.TokenBucket).refund(key, permits);
    }
  } else if (call === 'tryAcquire') {
    const tm = m.tryAcquire(key, permits);
    const tr = await r.tryAcquire(key, permits);
    expect({ step, key, permits, allowed: tr }).toEqual({ step, key, permits, allowed: tm });
  } else {
    const dm = m.consume(key, permits);
    const dr = await r.consume(key, permits);
    expect({ step, key, permits, ...dr }).toEqual({ step, key, permits, ...dm });
  }
}
