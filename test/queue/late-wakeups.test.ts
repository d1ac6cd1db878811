import { describe, expect, it } from 'vitest';
import { LeakyBucket, ManualClock, TokenBucket } from '../../src/index.js';
import { seededRandom } from '../helpers/random.mjs';
import { scenarioWorker } from '../helpers/threads.js';

// acquire() after a late wake-up: the waiters are granted when they wake, never "as of"
// their due time, so no instant sees more than a leaky bucket's one permit or a token
// bucket's capacity. Tests import from src/ and the worker scenarios from dist/: build first.

/** Lets waitAsync callbacks and promise reactions run (no timers involved). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

function count(promises: Promise<unknown>[]): () => number {
  let n = 0;
  for (const p of promises) {
    p.then(
      () => n++,
      () => {},
    );
  }
  return () => n;
}

describe('waiters woken late', () => {
  it('a LeakyBucket lets its overdue waiters out one interval apart, not at once', async () => {
    const clock = new ManualClock();
    const bucket = new LeakyBucket({ capacity: 5, ratePerSecond: 1, clock });
    expect(bucket.tryAcquire('k')).toBe(true);
    const granted = count(Array.from({ length: 4 }, () => bucket.acquire('k')));
    clock.advance(10_000); // a stall: all four were due long ago
    await settle();
    expect(granted()).toBe(1);
    expect(bucket.tryAcquire('k')).toBe(false);
    for (let n = 2; n <= 4; n++) {
      clock.advance(999.999);
      await settle();
      expect(granted()).toBe(n - 1);
      clock.advance(0.001);
      await settle();
      expect(granted()).toBe(n);
    }
  });

  it('a TokenBucket grants at most its capacity at the instant after a stall, waiters and newcomers together', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 2, refillPerSecond: 1, queueLimit: 10, clock });
    expect(bucket.tryAcquire('k', 2)).toBe(true);
    const granted = count(Array.from({ length: 4 }, () => bucket.acquire('k')));
    clock.advance(10_000);
    await settle();
    const atOnce = granted() + (bucket.tryAcquire('k') ? 1 : 0) + (bucket.tryAcquire('k') ? 1 : 0);
    expect(atOnce).toBe(2);
    clock.advance(1000);
    await settle();
    expect(granted()).toBe(3);
    clock.advance(1000);
    await settle();
    expect(granted()).toBe(4);
    expect(bucket.tryAcquire('k')).toBe(false);
  });

  it('a LeakyBucket at 200 per second through acquire() on two threads: no trailing window holds more than rate × T + 1, and the typical grant is on time to 1 % of an interval', async () => {
    const rate = 200;
    const limiter = new LeakyBucket({ capacity: 50, ratePerSecond: rate });
    const runMs = 4000;
    const workers = [0, 1].map(() =>
      scenarioWorker('queue:leaky-acquirer', {
        workerData: { limiter: limiter.handle, key: 'k', runMs, waiters: 4 },
      }),
    );
    const results = await Promise.all(
      workers.map(
        (worker) =>
          new Promise<number[]>((resolve, reject) => {
            worker.once('message', resolve);
            worker.once('error', reject);
          }),
      ),
    );
    await Promise.all(workers.map((w) => w.terminate()));
    // Grant times (µs, the decision's clock reading), from both threads.
    const times = results.flat().sort((a, b) => a - b);
    const start = times[0]!;
    const end = times[times.length - 1]!;
    for (const windowMs of [5, 50, 1000]) {
      let worst = 0;
      let j = 0;
      for (let i = 0; i < times.length; i++) {
        while (times[i]! - times[j]! >= windowMs * 1000) j++;
        worst = Math.max(worst, i - j + 1);
      }
      expect(worst, `grants in a trailing ${windowMs} ms`).toBeLessThanOrEqual(
        Math.floor((rate * windowMs) / 1000) + 1,
      );
    }
    expect(times.length).toBeLessThanOrEqual(Math.floor(((end - start) / 1e6) * rate + 1));
    // A late grant's lateness is never made up (that would be a burst), so the rate holds
    // as far as the head waiter wakes on time: the typical grant comes within 1 % of an
    // interval after the one before. (A starved machine delays some; the median holds.)
    const intervalUs = 1e6 / rate;
    const late = times
      .slice(1)
      .map((t, i) => t - times[i]! - intervalUs)
      .sort((a, b) => a - b);
    expect(late[Math.floor(late.length / 2)]!).toBeLessThanOrEqual(intervalUs / 100);
  }, 30_000);
});

describe('acquire() when wake-ups are late', () => {
  // A deterministic stand-in for late wake-ups: time moves in uneven steps of 2…25 ms, so
  // the head waiter always looks late, by up to a dozen intervals. A late waiter is granted
  // when it wakes, never as of its due time: one permit per step at most (the bucket's
  // burst of one), never the overdue dozen at once, and never more than the rate allows.
  it.each([
    [
      'LeakyBucket',
      (clock: ManualClock) => new LeakyBucket({ capacity: 2000, ratePerSecond: 500, clock }),
    ],
    [
      'TokenBucket of capacity 1',
      (clock: ManualClock) =>
        new TokenBucket({ capacity: 1, refillPerSecond: 500, queueLimit: 2000, clock }),
    ],
  ] as const)(
    '%s: grants one permit per late wake-up, never a burst of the overdue ones',
    async (_, make) => {
      const clock = new ManualClock();
      const limiter = make(clock);
      let granted = 0;
      const all = Array.from({ length: 1500 }, () =>
        limiter.acquire('k').then(() => {
          granted++;
        }),
      );
      const random = seededRandom(7);
      await settle();
      expect(granted).toBe(1); // the bucket was drained: the first at once
      let steps = 0;
      while (clock.nowMs() < 2000) {
        clock.advance(2 + Math.floor(random() * 23));
        steps++;
        await settle();
        // One permit every 2 ms at most, and one per step: each step is at least 2 ms.
        expect(granted).toBe(1 + steps);
        expect(granted).toBeLessThanOrEqual(Math.floor(clock.nowMs() / 2) + 1);
      }
      // Then on time (the clock moved one interval at a time): one every 2 ms, exactly.
      const before = granted;
      for (let k = 0; k < 100; k++) {
        clock.advance(2);
        await settle();
      }
      expect(granted - before).toBe(100);
      for (let left = 1500 - granted; left > 0; left--) {
        clock.advance(2);
        await settle();
      }
      await Promise.all(all);
      expect(granted).toBe(1500);
    },
    60_000,
  );
});
