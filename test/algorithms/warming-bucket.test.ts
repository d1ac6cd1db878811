import { describe, expect, it } from 'vitest';
import { attach, ManualClock, WarmingBucket } from '../../src/index.js';
import { GuavaWarmingUp } from '../helpers/guava.js';
import { seededRandom } from '../helpers/random.mjs';

/** Takes one permit each time the last one's debt is paid; returns the gaps, in ms. */
function gaps(limiter: WarmingBucket, clock: ManualClock, n: number, key?: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    expect(limiter.tryAcquire(key)).toBe(true);
    const refused = limiter.consume(key);
    expect(refused.allowed).toBe(false);
    out.push(refused.retryAfterMs);
    clock.advance(refused.retryAfterMs);
  }
  return out;
}

const sum = (xs: number[]) => Math.round(xs.reduce((a, b) => a + b, 0) * 1000) / 1000;

describe('WarmingBucket (Guava SmoothWarmingUp)', () => {
  it("the Guava port used below gives Guava's own figures (100/s, 2 s warm-up)", () => {
    const guava = new GuavaWarmingUp(100, 2000);
    const g: number[] = [];
    let now = 0;
    for (let i = 0; i < 201; i++) {
      expect(guava.tryAcquire(1, now)).toBe(true);
      expect(guava.tryAcquire(1, now)).toBe(guava.waitMicros(now) === 0);
      g.push(guava.waitMicros(now));
      now += guava.waitMicros(now);
    }
    expect(g.slice(0, 3)).toEqual([29_900, 29_700, 29_500]);
    expect([g[99], g[100], g[200]]).toEqual([10_100, 10_000, 10_000]);
    expect(g.slice(0, 100).reduce((a, b) => a + b)).toBe(2_000_000);
  });

  it('ramps from the cold interval to the stable one: 100/s with a 2 s warm-up', () => {
    const clock = new ManualClock(0);
    const limiter = new WarmingBucket({ ratePerSecond: 100, warmupMs: 2000, clock });
    expect(limiter.limit).toBe(200);
    const g = gaps(limiter, clock, 300);
    expect(g.slice(0, 4)).toEqual([29.9, 29.7, 29.5, 29.3]);
    expect(g[99]).toBe(10.1);
    expect(g.slice(100)).toEqual(g.slice(100).map(() => 10));
    // The first 100 permits take the warm-up period, the first 200 three seconds.
    expect(sum(g.slice(0, 100))).toBe(2000);
    expect(sum(g.slice(0, 200))).toBe(3000);
  });

  it('is cold again after idling for the warm-up, and partly cold after less', () => {
    const clock = new ManualClock(0);
    const limiter = new WarmingBucket({ ratePerSecond: 100, warmupMs: 2000, clock });
    gaps(limiter, clock, 250);
    clock.advance(1000); // half the warm-up: 100 stored permits back, at the threshold
    expect(gaps(limiter, clock, 2)).toEqual([10, 10]);
    clock.advance(2000);
    expect(gaps(limiter, clock, 3)).toEqual([29.9, 29.7, 29.5]);
    // A key idle far longer decodes as cold, too.
    clock.advance(2 ** 40);
    expect(gaps(limiter, clock, 2)).toEqual([29.9, 29.7]);
  });

  it('pays later: a cold request of the whole limit is admitted at once and the next waits for its debt', () => {
    const clock = new ManualClock(0);
    const limiter = new WarmingBucket({ ratePerSecond: 100, warmupMs: 2000, clock });
    const first = limiter.consume('k', 200);
    expect(first).toMatchObject({ allowed: true, remaining: 0, limit: 200, retryAfterMs: 0 });
    const next = limiter.consume('k');
    expect(next).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 3000 });
    clock.advance(2999.999);
    expect(limiter.tryAcquire('k')).toBe(false);
    clock.advance(0.001);
    // Warm now: the next permits come at the stable rate.
    expect(gaps(limiter, clock, 2, 'k')).toEqual([10, 10]);
  });

  for (const [rate, warmupMs, coldFactor] of [
    [100, 2000, 3],
    [7.3, 1234.5, 2.5],
    [100_000, 50, 10],
    [0.5, 10_000, 3],
    [1e9, 1, 3],
    [3, 400_000, 3],
  ] as const) {
    it(`decides as a direct port of Guava's arithmetic, ${rate}/s, warm-up ${warmupMs} ms, cold factor ${coldFactor}`, () => {
      const clock = new ManualClock(0);
      const limiter = new WarmingBucket({ ratePerSecond: rate, warmupMs, coldFactor, clock });
      const guava = new GuavaWarmingUp(rate, warmupMs, coldFactor);
      const next = seededRandom(rate * 7 + warmupMs);
      const stableUs = 1e6 / rate;
      let admitted = 0;
      // Every decision equal; the largest difference between the debts reported.
      let drift = 0;
      for (let i = 0; i < 20_000; i++) {
        const x = next();
        if (x < 0.45) clock.advance(Math.floor(next() * 4 * stableUs) / 1000);
        else if (x < 0.47) clock.advance(Math.floor(next() * 1.5 * warmupMs * 1000) / 1000);
        const permits = 1 + Math.floor(next() ** 4 * limiter.limit);
        const now = clock.nowUs();
        const want = guava.tryAcquire(permits, now);
        if (x < 0.7) {
          expect([i, limiter.tryAcquire(undefined, permits)]).toEqual([i, want]);
        } else {
          const d = limiter.consume(undefined, permits);
          expect([i, d.allowed]).toEqual([i, want]);
          if (!want) {
            const us = Math.round(d.retryAfterMs * 1000);
            drift = Math.max(drift, Math.abs(us - guava.waitMicros(now)));
          }
        }
        if (want) admitted++;
      }
      expect(admitted).toBeGreaterThan(200);
      // The debt owed: Guava's to a few µs (its truncations and the stored permits' quanta,
      // rounded up), a fraction of a percent of the stable interval where time units are µs.
      expect(drift).toBeLessThanOrEqual(5 + stableUs * 0.005);
    });
  }

  it('gives an exact retryAfterMs on a key shared with an attached copy', () => {
    const clock = new ManualClock(5);
    const limiter = new WarmingBucket({ ratePerSecond: 40, warmupMs: 3000, coldFactor: 4, clock });
    const twin = attach<WarmingBucket>(limiter.handle);
    for (let i = 0; i < 50; i++) {
      const l = i % 2 ? twin : limiter;
      expect(l.tryAcquire('k', 1 + (i % 3))).toBe(true);
      const { retryAfterMs } = l.consume('k');
      clock.advance(retryAfterMs - 0.001);
      expect(l.tryAcquire('k')).toBe(false);
      clock.advance(0.001);
    }
    expect(twin.stats('k').admitted).toBe(limiter.stats('k').admitted);
  });

  it('refund undoes the grant it follows', () => {
    const clock = new ManualClock(0);
    const limiter = new WarmingBucket({ ratePerSecond: 100, warmupMs: 2000, clock });
    expect(limiter.tryAcquire('k', 3)).toBe(true);
    limiter.refund('k', 3);
    // As if nothing had been taken: still cold.
    expect(limiter.consume('k')).toMatchObject({ allowed: true });
    expect(limiter.consume('k').retryAfterMs).toBe(29.9);
  });

  it('acquire() serves waiters at the Guava schedule, lateness made up', async () => {
    const clock = new ManualClock(0);
    const limiter = new WarmingBucket({
      ratePerSecond: 100,
      warmupMs: 2000,
      clock,
      queueLimit: 10,
    });
    const order: number[] = [];
    const all = [0, 1, 2, 3].map((i) => limiter.acquire('k').then(() => order.push(i)));
    await Promise.resolve();
    // Late by far more than the gaps: every waiter due by then goes at once, in order.
    clock.advance(29.9 + 29.7 + 29.5);
    await Promise.all(all);
    expect(order).toEqual([0, 1, 2, 3]);
    // The schedule followed the gaps, not the wake-up: the next permit is due at 118.4 ms.
    expect(limiter.consume('k').retryAfterMs).toBe(
      Math.round((29.9 + 29.7 + 29.5 + 29.3 - 89.1) * 1000) / 1000,
    );
  });

  it('rejects bad options naming the option', () => {
    const ok = { ratePerSecond: 10, warmupMs: 1000 };
    for (const [options, pattern] of [
      [{ ...ok, warmupMs: 0 }, /"warmupMs".*above 0.*got 0/],
      [{ ...ok, warmupMs: -5 }, /"warmupMs".*got -5/],
      [{ ...ok, warmupMs: Number.NaN }, /"warmupMs"/],
      [{ ...ok, coldFactor: 1 }, /"coldFactor".*above 1.*got 1/],
      [{ ...ok, coldFactor: 0.5 }, /"coldFactor".*got 0.5/],
      [{ ...ok, ratePerSecond: 0 }, /"ratePerSecond"/],
    ] as const) {
      expect(() => new WarmingBucket(options as never)).toThrow(RangeError);
      expect(() => new WarmingBucket(options as never)).toThrow(pattern);
    }
    expect(() => new WarmingBucket({ ...ok, warmupMs: '1000' } as never)).toThrow(TypeError);
    expect(() => new WarmingBucket({ ...ok, coldFactor: '3' } as never)).toThrow(/"coldFactor"/);
    expect(() => new WarmingBucket({ ratePerSecond: 10 } as never)).toThrow(/"warmupMs"/);
  });
});
