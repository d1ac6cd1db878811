import { describe, expect, it } from 'vitest';
import { LeakyBucket, LimiterClosedError, ManualClock, TokenBucket } from '../../src/index.js';

// retryAfterMs behind acquire() waiters: the waiters queued ahead are served first, so a
// refused caller's retry is due once their permits and then its own have come. Cases ported
// from golang.org/x/time/rate's reservation tests (a reservation is a waiter here) and
// .NET's TokenBucketRateLimiter CorrectRetryMetadataWithQueuedItem.

/** Lets waitAsync callbacks and promise reactions run (no timers involved). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('retryAfterMs with waiters queued ahead', () => {
  it('counts a waiter queued on a 1-token bucket: the retry is due in two periods, not one', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 5, clock });
    expect(bucket.tryAcquire('k')).toBe(true);
    const waiter = bucket.acquire('k');
    const refused = bucket.consume('k');
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterMs).toBe(2000);
    clock.advance(1000);
    await waiter; // the queue serves its waiter at one period
    await settle();
    expect(bucket.tryAcquire('k')).toBe(false);
    clock.advance(999.999);
    expect(bucket.tryAcquire('k')).toBe(false);
    clock.advance(0.001);
    expect(bucket.tryAcquire('k')).toBe(true);
  });

  it('counts a queued waiter as .NET does: 2 tokens behind 1 queued, 1 per 20 s, wait 60 s', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({
      capacity: 2,
      refillPerSecond: 1 / 20,
      queueLimit: 1,
      clock,
    });
    expect(bucket.tryAcquire('k', 2)).toBe(true);
    const waiter = bucket.acquire('k', 1);
    const refused = bucket.consume('k', 2);
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterMs).toBe(60_000);
    expect(refused.remaining).toBe(0);
    bucket.close();
    await expect(waiter).rejects.toThrow(LimiterClosedError);
  });

  it('stacks reservations as x/time/rate does: 10 per second, burst 2, requests of 2', async () => {
    // rate.NewLimiter(10, 2): reserve 2 at t0 → t0; reserve 2 at t0 → t0 + 200 ms;
    // reserve 2 at t0 + 300 ms → t0 + 400 ms.
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 2, refillPerSecond: 10, queueLimit: 10, clock });
    expect(bucket.tryAcquire('k', 2)).toBe(true);
    const second = bucket.acquire('k', 2);
    // A caller refused at t0 is next after the waiter: at t0 + 400 ms.
    expect(bucket.consume('k', 2).retryAfterMs).toBe(400);
    // One of 1 is due at t0 + 300 ms, behind the waiter's 2.
    expect(bucket.consume('k', 1).retryAfterMs).toBe(300);
    clock.advance(200);
    await second;
    clock.advance(100);
    expect(bucket.consume('k', 2).retryAfterMs).toBe(100);
    clock.advance(100);
    expect(bucket.tryAcquire('k', 2)).toBe(true);
  });

  it('stacks several waiters: each one queued ahead moves the retry one cost later', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 3, refillPerSecond: 4, queueLimit: 20, clock });
    expect(bucket.tryAcquire('k', 3)).toBe(true);
    const expected = [250, 500, 750, 1000, 1250];
    const waiters: Promise<unknown>[] = [];
    for (let n = 0; n < 5; n++) {
      expect(bucket.consume('k').retryAfterMs, `${n} queued ahead`).toBe(expected[n]);
      waiters.push(bucket.acquire('k'));
    }
    // Two of 2 behind five of 1: 7 tokens at 4 per second.
    expect(bucket.consume('k', 2).retryAfterMs).toBe(1750);
    bucket.close();
    for (const waiter of waiters) await expect(waiter).rejects.toThrow(LimiterClosedError);
  });

  it('counts waiters queued on a LeakyBucket: each leaves one interval after the one before', async () => {
    const clock = new ManualClock();
    const bucket = new LeakyBucket({ capacity: 3, ratePerSecond: 1, clock });
    expect(bucket.tryAcquire('k')).toBe(true);
    const a = bucket.acquire('k');
    const b = bucket.acquire('k');
    const refused = bucket.consume('k');
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterMs).toBe(3000);
    clock.advance(1000);
    await a;
    clock.advance(1000);
    await b;
    await settle();
    expect(bucket.consume('k').retryAfterMs).toBe(1000);
    clock.advance(999.999);
    expect(bucket.tryAcquire('k')).toBe(false);
    clock.advance(0.001);
    expect(bucket.tryAcquire('k')).toBe(true);
  });
});
