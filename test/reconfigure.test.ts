import { describe, expect, it } from 'vitest';
import {
  attach,
  Concurrency,
  FixedWindow,
  type Key,
  LeakyBucket,
  type Limiter,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
  WarmingBucket,
} from '../src/index.js';

/**
 * One step at `ms` on the ManualClock: `permits` asked (by the copy attached in `decider`,
 * alternately the limiter itself and an attach()ed copy) and whether they are allowed; or
 * a reconfigure() (always by the limiter itself).
 */
type Step = [ms: number, permits: number, allowed: boolean] | [ms: number, options: object];

/** Runs `steps` for `key`, and returns the outcomes (compared whole, so a table reads as one). */
function play(limiter: Limiter, clock: ManualClock, steps: Step[], key?: Key): Step[] {
  const other = attach(limiter.handle) as Limiter;
  const seen: Step[] = [];
  let turn = 0;
  for (const step of steps) {
    clock.set(step[0]);
    if (typeof step[1] === 'object') {
      limiter.reconfigure(step[1]);
      seen.push(step);
    } else {
      const decider = turn++ % 2 === 0 ? other : limiter;
      seen.push([step[0], step[1], decider.tryAcquire(key, step[1])]);
    }
  }
  return seen;
}

const KEYS: (Key | undefined)[] = [undefined, 'k'];

describe('reconfigure() on TokenBucket', () => {
  for (const key of KEYS) {
    it(`keeps the tokens owed and refills at the new rate (${key ?? 'default'} key)`, () => {
      const clock = new ManualClock();
      const bucket = new TokenBucket({ capacity: 4, refillPerSecond: 1, clock });
      const steps: Step[] = [
        [0, 4, true],
        [0, 1, false],
        // Raising the capacity gives the difference at once; 4 tokens stay owed.
        [0, { capacity: 6 }],
        [0, 2, true],
        [0, 1, false],
        // 10 per second: one token per 100 ms.
        [0, { refillPerSecond: 10 }],
        [99, 1, false],
        [100, 1, true],
        [100, 1, false],
        // Lower than what is owed: empty until a token refills at the new rate.
        [100, { capacity: 2, refillPerSecond: 2 }],
        [599, 1, false],
        [600, 1, true],
        [600, 1, false],
        [10_000, 2, true],
        [10_000, 1, false],
      ];
      expect(play(bucket, clock, steps, key)).toEqual(steps);
      expect(bucket.capacity).toBe(2);
      expect(bucket.refillPerSecond).toBe(2);
      expect(bucket.limit).toBe(2);
    });
  }
});

describe('reconfigure() on LeakyBucket', () => {
  it('keeps the outflow owed and leaks it at the new rate', () => {
    const clock = new ManualClock();
    const bucket = new LeakyBucket({ capacity: 4, ratePerSecond: 1, clock });
    const steps: Step[] = [
      [0, 2, true],
      [1000, 1, false],
      [1000, { ratePerSecond: 4 }],
      // 1 permit still owed: 250 ms at 4 per second.
      [1249, 1, false],
      [1250, 1, true],
      [1499, 1, false],
      [1500, 4, true],
    ];
    expect(play(bucket, clock, steps, 'k')).toEqual(steps);
  });
});
