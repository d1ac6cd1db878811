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
} from '../../src/index.js';

/**
 * One step at `ms` on the ManualClock: `permits` asked (alternately by an attach()ed copy
 * and by the limiter itself) and whether they are allowed — a negative number releases
 * that many (Concurrency); or a reconfigure() (always by the limiter itself).
 */
type Step =
  | [ms: number, permits: number, allowed: boolean]
  | [ms: number, released: number]
  | [ms: number, options: object];

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
      if (step[1] < 0) {
        (decider as Concurrency).release(key, -step[1]);
        seen.push(step);
      } else {
        seen.push([step[0], step[1], decider.tryAcquire(key, step[1])]);
      }
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
        // Lowered and raised again: the 6 tokens owed are still owed.
        [100, { capacity: 2 }],
        [100, { capacity: 6 }],
        [100, 1, false],
        // Lower than what is owed: refused until it owes 1 (5 tokens at 2 per second).
        [100, { capacity: 2, refillPerSecond: 2 }],
        [2599, 1, false],
        [2600, 1, true],
        [2600, 1, false],
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

describe('reconfigure() on a wide TokenBucket', () => {
  it('keeps the tokens owed in a 64-bit state, and the version other parts re-read by changes', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 2 ** 26, refillPerSecond: 2 ** 20, clock });
    const version = bucket.optionsVersion;
    const steps: Step[] = [
      [0, 2 ** 26, true],
      [0, 1, false],
      [0, { capacity: 2 ** 26 + 10 }],
      [0, 10, true],
      [0, 1, false],
      // 10^9 per second: 10^6 tokens per ms.
      [0, { refillPerSecond: 1e9 }],
      [1, 1e6, true],
      [1, 1, false],
      [1, { capacity: 5 }],
      [1000, 5, true],
      [1000, 1, false],
    ];
    expect(play(bucket, clock, steps, 'k')).toEqual(steps);
    expect(bucket.optionsVersion).not.toBe(version);
  });
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

describe('reconfigure() on FixedWindow', () => {
  for (const key of KEYS) {
    it(`keeps the window's count: a higher limit admits the difference, a lower one nothing more (${key ?? 'default'} key)`, () => {
      const clock = new ManualClock();
      const window = new FixedWindow({ limit: 3, windowMs: 1000, clock });
      const steps: Step[] = [
        [0, 3, true],
        [0, 1, false],
        [0, { limit: 5 }],
        [0, 2, true],
        [0, 1, false],
        [500, { limit: 2 }],
        [500, 1, false],
        // Raised again in the same window: the 5 granted still count.
        [600, { limit: 6 }],
        [600, 1, true],
        [600, 1, false],
        [700, { limit: 2 }],
        [999, 1, false],
        [1000, 2, true],
        [1000, 1, false],
        // 500 ms windows: the 2 permits count in the window containing now, [1000, 1500).
        [1000, { windowMs: 500 }],
        [1499, 1, false],
        [1500, 2, true],
        [1500, 1, false],
      ];
      expect(play(window, clock, steps, key)).toEqual(steps);
      expect([window.limit, window.windowMs]).toEqual([2, 500]);
    });
  }

  it('keeps the count in a wide table', () => {
    const clock = new ManualClock();
    const window = new FixedWindow({ limit: 2 ** 30, windowMs: 1000, clock });
    const steps: Step[] = [
      [0, 2 ** 30, true],
      [0, { limit: 2 ** 30 + 5 }],
      [0, 6, false],
      [0, 5, true],
      [1000, { limit: 10 }],
      [1000, 10, true],
      [1000, 1, false],
    ];
    expect(play(window, clock, steps, 'k')).toEqual(steps);
  });
});

describe('reconfigure() on SlidingWindow', () => {
  it("keeps both windows' counts, and re-weighs them into a new window length", () => {
    const clock = new ManualClock();
    const window = new SlidingWindow({ limit: 4, windowMs: 1000, clock });
    const steps: Step[] = [
      [0, 4, true],
      [0, 1, false],
      [0, { limit: 6 }],
      [0, 2, true],
      [0, 1, false],
      // The previous window's 6 weigh 3 half-way through the next one.
      [1000, 1, false],
      [1500, 3, true],
      [1500, 1, false],
      // 2000 ms windows: 3 + 3 counted now, in the window [0, 2000).
      [1500, { windowMs: 2000 }],
      [1999, 1, false],
      [2000, 1, false],
      [3000, 3, true],
      [3000, 1, false],
    ];
    expect(play(window, clock, steps, 'k')).toEqual(steps);
  });

  it('keeps both counts in a wide table', () => {
    const clock = new ManualClock();
    const window = new SlidingWindow({ limit: 2 ** 30, windowMs: 1000, clock });
    const steps: Step[] = [
      [0, 2 ** 30, true],
      [0, { limit: 2 ** 30 + 5 }],
      [0, 5, true],
      [0, 1, false],
      [0, { windowMs: 2000 }],
      [1999, 1, false],
      [2000, 1, false],
      // Half-way through the next 2 s window, the previous one weighs half.
      [3000, 2 ** 29, true],
      [3000, 3, false],
    ];
    expect(play(window, clock, steps, 'k')).toEqual(steps);
  });

  it('with segments, keeps the counts of every segment and applies a new limit to them', () => {
    const clock = new ManualClock();
    const window = new SlidingWindow({ limit: 4, windowMs: 1000, segments: 4, clock });
    const steps: Step[] = [
      [0, 4, true],
      [0, { limit: 5 }],
      [0, 1, true],
      [0, 1, false],
      [500, { limit: 3 }],
      [500, 1, false],
      [999, 1, false],
      // The segment of time 0 has left the window.
      [1000, 3, true],
      [1000, 1, false],
      // Down to 1 and back up to 5 in the same window: the 3 granted still count.
      [1000, { limit: 1 }],
      [1000, 1, false],
      [1100, { limit: 5 }],
      [1100, 2, true],
      [1100, 1, false],
    ];
    expect(play(window, clock, steps)).toEqual(steps);
    expect(window.limit).toBe(5);
  });
});

describe('reconfigure() on SlidingLog', () => {
  it('applies a new limit and window to the grants already logged', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 3, windowMs: 1000, clock });
    const steps: Step[] = [
      [0, 3, true],
      [0, 1, false],
      [0, { limit: 4 }],
      [0, 1, true],
      [0, 1, false],
      [100, { limit: 2 }],
      [999, 1, false],
      [1000, 2, true],
      [1000, 1, false],
      [1000, { windowMs: 500 }],
      [1499, 1, false],
      [1500, 2, true],
    ];
    expect(play(log, clock, steps, 'k')).toEqual(steps);
  });
});

describe('reconfigure() on Concurrency', () => {
  for (const key of KEYS) {
    it(`keeps what is held: a lower limit admits nothing until releases bring it under (${key ?? 'default'} key)`, () => {
      const clock = new ManualClock();
      const limiter = new Concurrency({ limit: 2, clock });
      const steps: Step[] = [
        [0, 2, true],
        [0, 1, false],
        [0, { limit: 3 }],
        [0, 1, true],
        [0, 1, false],
        [0, { limit: 1 }],
        [0, -1],
        [0, 1, false],
        [0, -2],
        [0, 1, true],
        [0, 1, false],
      ];
      expect(play(limiter, clock, steps, key)).toEqual(steps);
    });
  }
});

describe('reconfigure() on WarmingBucket', () => {
  it("keeps the next free time and the stored share, as Guava's setRate()", () => {
    const clock = new ManualClock();
    // 10 per second, warm-up 1 s, cold factor 3: 10 stored permits when cold, the first
    // costs 280 ms. At 20 per second: 20 when cold; 18 stored (9 of 10) cost 125 ms.
    const bucket = new WarmingBucket({ ratePerSecond: 10, warmupMs: 1000, clock });
    const steps: Step[] = [
      [0, 1, true],
      [0, { ratePerSecond: 20 }],
      [279, 1, false],
      [280, 1, true],
      [404, 1, false],
      [405, 1, true],
    ];
    expect(play(bucket, clock, steps, 'k')).toEqual(steps);
  });

  it('keeps a debt longer than a shorter warm-up could run up: owed until it is paid', () => {
    const clock = new ManualClock();
    // 4 per second, warm-up 2 s: 8 stored permits when cold, all 8 taken at once owe 3 s
    // (the warm-up's trapezoid, then 4 at the stable 250 ms). A 500 ms warm-up could owe
    // about 1 s at most; the 3 s stay owed.
    const bucket = new WarmingBucket({ ratePerSecond: 4, warmupMs: 2000, clock });
    const steps: Step[] = [
      [0, 8, true],
      [0, { warmupMs: 500 }],
      [2600, 1, false],
      [2999, 1, false],
      [3000, 1, true],
    ];
    expect(play(bucket, clock, steps, 'k')).toEqual(steps);
  });

  it('leaves a cold key cold: it starts as a new limiter with the new options would', () => {
    const clock = new ManualClock();
    const bucket = new WarmingBucket({ ratePerSecond: 10, warmupMs: 1000, clock });
    const steps: Step[] = [
      [0, 1, true],
      [10_000, { ratePerSecond: 20 }],
      // Cold at 20 per second: the first permit costs 145 ms.
      [10_000, 1, true],
      [10_144, 1, false],
      [10_145, 1, true],
    ];
    expect(play(bucket, clock, steps, 'k')).toEqual(steps);
  });
});

describe('reconfigure() and waiting callers', () => {
  it('a waiter in acquire() decides again at once under the new options', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 1, clock });
    expect(bucket.tryAcquire('k')).toBe(true);
    let granted = false;
    const lease = bucket.acquire('k').then(() => {
      granted = true;
    });
    clock.advance(1);
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(false);
    // 1000 per second: the token owed comes back 1 ms after the change.
    bucket.reconfigure({ refillPerSecond: 1000 });
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(false);
    clock.advance(1);
    await lease;
    expect(clock.nowMs()).toBe(2);
  });

  it('a Concurrency waiter is granted when the limit is raised', async () => {
    const clock = new ManualClock();
    const limiter = new Concurrency({ limit: 1, queueLimit: 1, clock });
    expect(limiter.tryAcquire('k')).toBe(true);
    const lease = limiter.acquire('k');
    await new Promise((r) => setImmediate(r));
    limiter.reconfigure({ limit: 2 });
    await lease;
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 0 });
  });
});

describe('reconfigure() seen from an attach()ed copy', () => {
  it('stats() and consume() of a copy report the new limit before it decides again', () => {
    const clock = new ManualClock();
    const limiter = new Concurrency({ limit: 2, clock });
    const other = attach(limiter.handle) as Concurrency;
    expect(other.tryAcquire('k')).toBe(true);
    limiter.reconfigure({ limit: 5 });
    expect(other.stats('k').available).toBe(4);
    expect(other.limit).toBe(5);
    expect(other.consume('k', 4)).toMatchObject({ allowed: true, remaining: 0, limit: 5 });
  });

  it('a copy asking for more permits than its old limit is not refused by it', () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    const other = attach(limiter.handle) as FixedWindow;
    expect(other.tryAcquire('k')).toBe(true);
    limiter.reconfigure({ limit: 10 });
    expect(other.tryAcquire('k', 9)).toBe(true);
    expect(() => other.tryAcquire('k', 11)).toThrow(/exceed the limit \(10\)/);
  });
});
