import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ManualClock, WarmingBucket } from '../../src/index.js';
import * as red from '../../src/redis/index.js';
import { seededRandom } from '../helpers/random.mjs';
import { withRedisServer } from '../helpers/redis.js';

// One seeded random sequence of calls (keys, permits, time steps, refunds) through the
// Redis and the in-memory WarmingBucket on one ManualClock: every Decision equal, field for
// field, and every tryAcquire() answer, alone and batched.
describe('Redis WarmingBucket decides exactly as the in-memory one', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  for (const [rate, warmupMs, coldFactor] of [
    [100, 2000, 3],
    [7.3, 1234.5, 2.5],
    [0.5, 10_000, 4],
    [3, 900_000, 3], // a warm-up long enough for time units of 2 µs
  ] as const) {
    for (const withRefunds of [false, true]) {
      it(`${rate}/s, warm-up ${warmupMs} ms, cold factor ${coldFactor}: 600 random calls ${withRefunds ? 'with refunds ' : ''}give equal decisions`, async () => {
        const clock = new ManualClock(0);
        const options = { ratePerSecond: rate, warmupMs, coldFactor, clock };
        const m = new WarmingBucket(options);
        const prefix = `warm-${rate}-${withRefunds}`;
        const r = new red.WarmingBucket({ ...options, redis, prefix });
        expect(r.limit).toBe(m.limit);
        const next = seededRandom(rate * 1000 + (withRefunds ? 7 : 1));
        const keys = ['a', 'b{x}', 42];
        const stableMs = 1000 / rate;
        for (let step = 0; step < 600; step++) {
          const x = next();
          const key = keys[Math.floor(next() * keys.length)];
          const permits = 1 + Math.floor(next() ** 4 * m.limit);
          if (x < 0.3) {
            clock.advance(Math.round(next() * stableMs * 4 * 1000) / 1000);
          } else if (x < 0.33) {
            clock.advance(Math.round(next() * warmupMs * 1.2 * 1000) / 1000);
          } else if (x < 0.43 && withRefunds) {
            m.refund(key, permits);
            await r.refund(key, permits);
          } else if (x < 0.55) {
            expect([step, await r.tryAcquire(key, permits)]).toEqual([
              step,
              m.tryAcquire(key, permits),
            ]);
          } else if (x < 0.6) {
            // Two calls in one batch.
            const both = await Promise.all([r.consume(key, permits), r.consume(key, 1)]);
            expect([step, ...both]).toEqual([step, m.consume(key, permits), m.consume(key, 1)]);
          } else {
            const dm = m.consume(key, permits);
            const dr = await r.consume(key, permits);
            expect({ step, key, permits, ...dr }).toEqual({ step, key, permits, ...dm });
          }
        }
        for (const key of keys) {
          // (Counters go with a Redis key once its state is cold: available alone compares.)
          expect([key, (await r.stats(key)).available]).toEqual([key, m.stats(key).available]);
        }
        await r.close();
      });
    }
  }

  it('reproduces the warm-up figures on Redis time, and keeps a key no longer than until cold', async () => {
    const r = new red.WarmingBucket({ redis, ratePerSecond: 100, warmupMs: 2000, prefix: 'rt' });
    expect(await r.tryAcquire('k')).toBe(true);
    const d = await r.consume('k');
    expect(d.allowed).toBe(false);
    expect(d.retryAfterMs).toBeLessThanOrEqual(29.9);
    expect(d.retryAfterMs).toBeGreaterThan(20);
    const [name] = r.redisKeys('k');
    const ttl = await redis.pttl(name!);
    // Cold again 29.9 ms + 1 stored permit × 10 ms after the grant (and Redis's slack).
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(Math.ceil(29.9 + 10) + 1 + 25 + 1);
    await r.close();
  });

  it('rejects bad options before any Redis call, naming the option', () => {
    expect(() => new red.WarmingBucket({ redis, ratePerSecond: 1, warmupMs: 0 })).toThrow(
      /"warmupMs"/,
    );
    expect(
      () => new red.WarmingBucket({ redis, ratePerSecond: 1, warmupMs: 10, coldFactor: 1 }),
    ).toThrow(/"coldFactor"/);
  });
});
