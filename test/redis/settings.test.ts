import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/index.js';
import { FixedWindow, SlidingWindow, TokenBucket } from '../../src/redis/index.js';
import { withRedisServer } from '../helpers/redis.js';

// Two limiters of one algorithm on one prefix with different settings (a rolling deploy
// that changed windowMs or segments): a key's state says what wrote it, and a limiter never
// reads or overwrites a state counted under other settings: it refuses the key with an
// error naming the key and both settings.

describe('a key written under other settings', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  it('FixedWindow 10 a minute beside 10 a second: the second is refused with the key and both windows, and admits nothing', async () => {
    const clock = new ManualClock(1_000_000);
    const common = { redis, limit: 10, clock, prefix: 'mixed-fw' };
    const perMinute = new FixedWindow({ ...common, windowMs: 60_000 });
    const perSecond = new FixedWindow({ ...common, windowMs: 1000 });
    let admitted = 0;
    const errors: string[] = [];
    for (let i = 0; i < 40; i++) {
      for (const l of [perMinute, perSecond]) {
        // Alone, and batched with another key's call (the shared script).
        const [a, b] = await Promise.all([
          l.tryAcquire('k').catch((e: Error) => errors.push(e.message)),
          i % 2 === 0 ? l.tryAcquire('k').catch((e: Error) => errors.push(e.message)) : false,
        ]);
        admitted += Number(a === true) + Number(b === true);
      }
      clock.advance(100);
    }
    expect(admitted).toBe(10);
    expect(errors.length).toBeGreaterThan(0);
    for (const e of errors) {
      expect(e).toMatch(
        /mixed-fw:FixedWindow:\{k\} holds a FixedWindow state written with windowMs 60000; this limiter has windowMs 1000: limiters whose settings differ need a prefix each/,
      );
    }
    // The minute's count is intact.
    expect((await perMinute.stats('k')).available).toBe(0);
  });

  it('a limit changed alone is read as the same count (as reconfigure() in memory)', async () => {
    const clock = new ManualClock(1_000_000);
    const common = { redis, windowMs: 1000, clock, prefix: 'limit-only' };
    const ten = new FixedWindow({ ...common, limit: 10 });
    const twenty = new FixedWindow({ ...common, limit: 20 });
    for (let i = 0; i < 10; i++) expect(await ten.tryAcquire('k')).toBe(true);
    expect((await twenty.consume('k')).remaining).toBe(9);
    const slow = new TokenBucket({ redis, capacity: 5, refillPerSecond: 1, clock, prefix: 'cap' });
    const big = new TokenBucket({ redis, capacity: 8, refillPerSecond: 1, clock, prefix: 'cap' });
    expect(await slow.tryAcquire('k', 5)).toBe(true);
    expect((await big.stats('k')).available).toBe(3);
  });

  it('SlidingWindow with and without segments on one prefix: each refuses the other, naming the key', async () => {
    const clock = new ManualClock(1_000_000);
    const common = { redis, limit: 10, windowMs: 1000, clock, prefix: 'mixed-sw' };
    const plain = new SlidingWindow(common);
    const segmented = new SlidingWindow({ ...common, segments: 10 });
    const otherSegments = new SlidingWindow({ ...common, segments: 4 });
    expect(await plain.tryAcquire('a')).toBe(true);
    await expect(segmented.tryAcquire('a')).rejects.toThrow(
      /mixed-sw:SlidingWindow:\{a\} holds no SlidingWindow state with segments \(a SlidingWindow without segments wrote it/,
    );
    await expect(segmented.consume('a')).rejects.toThrow(/mixed-sw:SlidingWindow:\{a\}/);
    expect(await segmented.tryAcquire('b')).toBe(true);
    await expect(plain.tryAcquire('b')).rejects.toThrow(
      /mixed-sw:SlidingWindow:\{b\} holds no SlidingWindow state of a known version/,
    );
    await expect(otherSegments.tryAcquire('b')).rejects.toThrow(
      /mixed-sw:SlidingWindow:\{b\} holds a SlidingWindow state written with windowMs 1000 in 10 segments; this limiter has windowMs 1000 in 4 segments/,
    );
    // Batched too (the shared script).
    const both = await Promise.allSettled([otherSegments.consume('b'), otherSegments.consume('c')]);
    expect(both[0]).toMatchObject({ status: 'rejected' });
    expect(both[1]).toMatchObject({ status: 'fulfilled' });
    expect((await segmented.stats('b')).available).toBe(9);
  });

  it('TokenBucket of another rate: refused with both rates', async () => {
    const clock = new ManualClock(1_000_000);
    const common = { redis, capacity: 10, clock, prefix: 'mixed-tb' };
    const a = new TokenBucket({ ...common, refillPerSecond: 10 });
    const b = new TokenBucket({ ...common, refillPerSecond: 20 });
    expect(await a.tryAcquire('k', 10)).toBe(true);
    await expect(b.tryAcquire('k')).rejects.toThrow(
      /holds a TokenBucket\/LeakyBucket state written with refillPerSecond 10 .*; this limiter has refillPerSecond 20 /,
    );
    expect(await a.tryAcquire('k')).toBe(false);
  });
});
