import { describe, expect, it } from 'vitest';
import { LeakyBucket, ManualClock, TokenBucket } from '../../src/index.js';
import { admitted } from '../helpers/limiters.js';
import { seededRandom } from '../helpers/random.mjs';

describe('TokenBucket', () => {
  it('refills continuously: one token per 1/refillPerSecond', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 3, refillPerSecond: 4, clock });
    expect(admitted(bucket, 'k', 10)).toBe(3);
    clock.advance(249);
    expect(bucket.tryAcquire('k')).toBe(false);
    clock.advance(1);
    expect(bucket.tryAcquire('k')).toBe(true);
    clock.advance(10_000); // refills to capacity, not beyond
    expect(admitted(bucket, 'k', 10)).toBe(3);
  });

  it('takes several permits at once, or none', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    expect(bucket.tryAcquire('k', 7)).toBe(true);
    expect(bucket.tryAcquire('k', 4)).toBe(false);
    expect(bucket.consume('k', 4).retryAfterMs).toBe(1000);
    expect(bucket.tryAcquire('k', 3)).toBe(true);
    expect(bucket.stats('k')).toMatchObject({ available: 0, admitted: 10, rejected: 8 });
  });

  it('keeps an exact rate for a fractional refill (3 per second)', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 3, refillPerSecond: 3, clock });
    expect(admitted(bucket, 'k', 3)).toBe(3);
    const { retryAfterMs } = bucket.consume('k');
    expect(retryAfterMs).toBeCloseTo(1000 / 3, 2);
    // Over 3000 s of 1 ms steps, exactly 3 per second are granted: no drift. (Capacity
    // above 1 keeps the sub-millisecond lateness of each poll in the bucket.)
    let n = 0;
    for (let ms = 0; ms < 3_000_000; ms += 1) {
      clock.advance(1);
      if (bucket.tryAcquire('k')) n++;
    }
    expect(n).toBe(9000);
  });

  it('has every token of a rate whose interval is no whole number of µs at the exact boundary', () => {
    // 7 per second: an interval of 142 857.142… µs. Emptied, the bucket holds all 7 again
    // exactly 1 000 ms later (not 1 µs later), and 6 one microsecond before.
    for (const [rate, ms, tokens] of [
      [7, 1000, 7],
      [30, 1000, 30],
      [7, 2000, 14],
      [30, 2000, 60],
      [3, 1000, 3],
      [1000 / 7, 49, 7],
    ] as const) {
      const clock = new ManualClock();
      const bucket = new TokenBucket({ capacity: tokens, refillPerSecond: rate, clock });
      expect(bucket.tryAcquire('k', tokens)).toBe(true);
      clock.advance(ms - 0.001);
      expect(bucket.stats('k').available, `${rate}/s after ${ms - 0.001} ms`).toBe(tokens - 1);
      clock.advance(0.001);
      expect(bucket.stats('k').available, `${rate}/s after ${ms} ms`).toBe(tokens);
      expect(bucket.tryAcquire('k', tokens)).toBe(true);
    }
  });

  it('admits, over a long run with random steps, between 0.999 × ideal and ideal + 1', () => {
    const clock = new ManualClock();
    const capacity = 20;
    const rate = 7.3;
    const bucket = new TokenBucket({ capacity, refillPerSecond: rate, clock });
    const random = seededRandom(42);
    let n = 0;
    let elapsedMs = 0;
    for (let i = 0; i < 200_000; i++) {
      const step = Math.floor(random() * 50);
      clock.advance(step);
      elapsedMs += step;
      const permits = 1 + Math.floor(random() * 3);
      if (bucket.tryAcquire('k', permits)) n += permits;
    }
    const ideal = capacity + (rate * elapsedMs) / 1000;
    expect(n).toBeGreaterThanOrEqual(Math.floor(0.999 * ideal));
    expect(n).toBeLessThanOrEqual(ideal + 1);
  });

  it('reports remaining tokens and the time until full', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 2, clock });
    const d = bucket.consume('k', 4);
    expect(d).toEqual({
      allowed: true,
      remaining: 6,
      limit: 10,
      retryAfterMs: 0,
      resetAfterMs: 2000,
    });
  });
});

describe('waits longer than 2^52 µs', () => {
  // At 10^-6 per second, 30 000 tokens take 3 × 10^16 µs to come back (a leaky bucket's
  // 2^24 queued requests, 1.7 × 10^19 µs to leave): past 2^52, whole µs are not all exact
  // doubles, and the exact search for the wait would never end. Key 'near' waits less.
  const cases = [
    [
      'TokenBucket',
      (clock: ManualClock) => new TokenBucket({ capacity: 100_000, refillPerSecond: 1e-6, clock }),
      [100_000, 30_000, 100_000],
    ],
    [
      'TokenBucket, wide',
      (clock: ManualClock) =>
        new TokenBucket({ capacity: 2 ** 31 - 1, refillPerSecond: 1e-6, clock }),
      [2 ** 31 - 1, 30_000, 2 ** 31 - 1],
    ],
    [
      'LeakyBucket',
      (clock: ManualClock) => new LeakyBucket({ capacity: 2 ** 24, ratePerSecond: 1e-6, clock }),
      [2 ** 24, 1, 4000],
    ],
  ] as const;
  for (const [name, make, [farFirst, farAsk, nearFirst]] of cases) {
    it(`${name}: a refusal says Infinity, and a wait under the bound stays exact`, () => {
      const clock = new ManualClock();
      const bucket = make(clock);
      expect(bucket.tryAcquire('far', farFirst)).toBe(true);
      const far = bucket.consume('far', farAsk);
      expect(far).toMatchObject({ allowed: false, retryAfterMs: Number.POSITIVE_INFINITY });
      expect(bucket.tryAcquire('near', nearFirst)).toBe(true);
      const near = bucket.consume('near', 1);
      expect(near.allowed).toBe(false);
      expect(near.retryAfterMs).toBeLessThan(2 ** 52 / 1000);
      clock.advance(near.retryAfterMs - 0.001);
      expect(bucket.tryAcquire('near', 1)).toBe(false);
      clock.advance(0.001);
      expect(bucket.tryAcquire('near', 1)).toBe(true);
    });
  }
});

describe('LeakyBucket', () => {
  it('lets requests leave at a constant rate, never in bursts', () => {
    const clock = new ManualClock();
    const bucket = new LeakyBucket({ capacity: 10, ratePerSecond: 10, clock });
    let n = 0;
    for (let ms = 0; ms < 1000; ms++) {
      if (admitted(bucket, 'k', 5) > 1) throw new Error('burst');
      if (bucket.stats('k').available === 0) n++;
      clock.advance(1);
    }
    // One request every 100 ms in the first second, however often it is asked.
    clock.set(0);
    const bucket2 = new LeakyBucket({ capacity: 10, ratePerSecond: 10, clock });
    let granted = 0;
    for (let ms = 0; ms < 1000; ms++) {
      granted += admitted(bucket2, 'k', 3);
      clock.advance(1);
    }
    expect(granted).toBe(10);
    expect(n).toBeGreaterThan(0);
  });

  it('makes a request of n permits occupy n intervals of the outflow', () => {
    const clock = new ManualClock();
    const bucket = new LeakyBucket({ capacity: 10, ratePerSecond: 10, clock });
    expect(bucket.tryAcquire('k', 3)).toBe(true);
    expect(bucket.consume('k').retryAfterMs).toBe(300);
    clock.advance(299);
    expect(bucket.tryAcquire('k')).toBe(false);
    clock.advance(1);
    expect(bucket.tryAcquire('k')).toBe(true);
  });

  it('refuses a request larger than its capacity as a RangeError', () => {
    const bucket = new LeakyBucket({ capacity: 4, ratePerSecond: 1, clock: new ManualClock() });
    expect(() => bucket.tryAcquire('k', 5)).toThrow(RangeError);
  });
});
