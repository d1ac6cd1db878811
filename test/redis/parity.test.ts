import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import * as mem from '../../src/index.js';
import { ManualClock } from '../../src/index.js';
import * as red from '../../src/redis/index.js';
import { sameAnswer } from '../helpers/parity.js';
import { seededRandom } from '../helpers/random.mjs';
import { withRedisServer } from '../helpers/redis.js';

// One seeded random sequence of calls (keys, permits, time steps, refunds) goes through the
// Redis class and the in-memory class on one ManualClock; every Decision must be equal,
// field for field (allowed, remaining, retryAfterMs, resetAfterMs, reason), and so must
// every tryAcquire() answer and, at the end, each key's available permits. Calls go one at
// a time: each runs alone, by the algorithm's single-call script where it has one.

type Pair = {
  m: mem.AnyLimiter;
  r: red.TokenBucket | red.FixedWindow | red.SlidingWindow | red.Concurrency;
  windowMs: number;
};

const CASES: [string, (redis: Redis, clock: ManualClock, prefix: string) => Pair][] = [
  [
    'TokenBucket',
    (redis, clock, prefix) => ({
      m: new mem.TokenBucket({ capacity: 10, refillPerSecond: 3.7, clock }),
      r: new red.TokenBucket({ redis, capacity: 10, refillPerSecond: 3.7, clock, prefix }),
      windowMs: 3000,
    }),
  ],
  [
    'LeakyBucket',
    (redis, clock, prefix) => ({
      m: new mem.LeakyBucket({ capacity: 6, ratePerSecond: 2.5, clock }),
      r: new red.LeakyBucket({ redis, capacity: 6, ratePerSecond: 2.5, clock, prefix }) as never,
      windowMs: 2000,
    }),
  ],
  [
    'FixedWindow',
    (redis, clock, prefix) => ({
      m: new mem.FixedWindow({ limit: 9, windowMs: 1000, clock }),
      r: new red.FixedWindow({ redis, limit: 9, windowMs: 1000, clock, prefix }),
      windowMs: 1000,
    }),
  ],
  [
    'SlidingWindow',
    (redis, clock, prefix) => ({
      m: new mem.SlidingWindow({ limit: 11, windowMs: 700, clock }),
      r: new red.SlidingWindow({ redis, limit: 11, windowMs: 700, clock, prefix }) as never,
      windowMs: 700,
    }),
  ],
  [
    'SlidingWindow with segments',
    (redis, clock, prefix) => ({
      m: new mem.SlidingWindow({ limit: 11, windowMs: 700, segments: 7, clock }),
      r: new red.SlidingWindow({
        redis,
        limit: 11,
        windowMs: 700,
        segments: 7,
        clock,
        prefix,
      }) as never,
      windowMs: 700,
    }),
  ],
  [
    'SlidingLog',
    (redis, clock, prefix) => ({
      m: new mem.SlidingLog({ limit: 7, windowMs: 500, clock }),
      r: new red.SlidingLog({ redis, limit: 7, windowMs: 500, clock, prefix }) as never,
      windowMs: 500,
    }),
  ],
  [
    'Concurrency',
    (redis, clock, prefix) => ({
      m: new mem.Concurrency({ limit: 5, clock }),
      r: new red.Concurrency({ redis, limit: 5, clock, prefix, leaseMs: 2 ** 30 }),
      windowMs: 1000,
    }),
  ],
  // Past the narrow table's ranges: the in-memory class takes its wide table (64-bit
  // states), Redis the same units and counts.
  [
    'TokenBucket, wide (capacity past 2^24)',
    (redis, clock, prefix) => ({
      m: new mem.TokenBucket({ capacity: 40_000_000, refillPerSecond: 777_777.7, clock }),
      r: new red.TokenBucket({
        redis,
        capacity: 40_000_000,
        refillPerSecond: 777_777.7,
        clock,
        prefix,
      }),
      windowMs: 60_000,
    }),
  ],
  [
    'LeakyBucket, wide (capacity past 2^24)',
    (redis, clock, prefix) => ({
      m: new mem.LeakyBucket({ capacity: 2 ** 31 - 1, ratePerSecond: 1e6, clock }),
      r: new red.LeakyBucket({
        redis,
        capacity: 2 ** 31 - 1,
        ratePerSecond: 1e6,
        clock,
        prefix,
      }) as never,
      windowMs: 2_000_000,
    }),
  ],
  [
    // A unit of 1 ns: the Redis key counts from an origin of its own (0 here, as memory).
    'TokenBucket, wide (10^9 per second)',
    (redis, clock, prefix) => ({
      m: new mem.TokenBucket({ capacity: 1_000_000, refillPerSecond: 1e9, clock }),
      r: new red.TokenBucket({ redis, capacity: 1_000_000, refillPerSecond: 1e9, clock, prefix }),
      windowMs: 2,
    }),
  ],
  [
    'LeakyBucket, wide (1.5 × 10^8 per second)',
    (redis, clock, prefix) => ({
      m: new mem.LeakyBucket({ capacity: 3000, ratePerSecond: 1.5e8, clock }),
      r: new red.LeakyBucket({
        redis,
        capacity: 3000,
        ratePerSecond: 1.5e8,
        clock,
        prefix,
      }) as never,
      windowMs: 0.05,
    }),
  ],
  [
    'FixedWindow, wide (100 million a day)',
    (redis, clock, prefix) => ({
      m: new mem.FixedWindow({ limit: 100_000_000, windowMs: 86_400_000, clock }),
      r: new red.FixedWindow({ redis, limit: 100_000_000, windowMs: 86_400_000, clock, prefix }),
      windowMs: 86_400_000,
    }),
  ],
  [
    'FixedWindow, wide (2^31 − 1 per 2^31 ms)',
    (redis, clock, prefix) => ({
      m: new mem.FixedWindow({ limit: 2 ** 31 - 1, windowMs: 2 ** 31, clock }),
      r: new red.FixedWindow({ redis, limit: 2 ** 31 - 1, windowMs: 2 ** 31, clock, prefix }),
      windowMs: 2 ** 31,
    }),
  ],
  [
    'SlidingWindow, wide (10 000 per hour)',
    (redis, clock, prefix) => ({
      m: new mem.SlidingWindow({ limit: 10_000, windowMs: 3_600_000, clock }),
      r: new red.SlidingWindow({ redis, limit: 10_000, windowMs: 3_600_000, clock, prefix }),
      windowMs: 3_600_000,
    }),
  ],
  [
    // limit × window past 2^53: the weighted test in doubles, a hair stricter.
    'SlidingWindow, wide (a million per 2^31 ms)',
    (redis, clock, prefix) => ({
      m: new mem.SlidingWindow({ limit: 1_000_000, windowMs: 2 ** 31, clock }),
      r: new red.SlidingWindow({ redis, limit: 1_000_000, windowMs: 2 ** 31, clock, prefix }),
      windowMs: 2 ** 31,
    }),
  ],
  [
    // The previous window's count in steps of 2^13, rounded up, in both.
    'SlidingWindow, wide (2^31 − 1 per 2^31 ms)',
    (redis, clock, prefix) => ({
      m: new mem.SlidingWindow({ limit: 2 ** 31 - 1, windowMs: 2 ** 31, clock }),
      r: new red.SlidingWindow({ redis, limit: 2 ** 31 - 1, windowMs: 2 ** 31, clock, prefix }),
      windowMs: 2 ** 31,
    }),
  ],
  [
    'Concurrency, wide (2^31 − 1)',
    (redis, clock, prefix) => ({
      m: new mem.Concurrency({ limit: 2 ** 31 - 1, clock }),
      r: new red.Concurrency({ redis, limit: 2 ** 31 - 1, clock, prefix, leaseMs: 2 ** 31 - 1 }),
      windowMs: 1000,
    }),
  ],
];

// Refunds of windows and the log follow the in-memory rules (a refund lands in the window
// its permits were taken in; a refunded log entry's time is never reused).
describe('Redis limiters decide exactly as the in-memory classes', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  for (const [name, make] of CASES) {
    for (const withRefunds of [false, true]) {
      it(`${name}: 400 random calls ${withRefunds ? 'with refunds ' : ''}give equal decisions`, async () => {
        const clock = new ManualClock(0);
        const { m, r, windowMs } = make(redis, clock, `parity-${name}-${withRefunds}`);
        const next = seededRandom(name.length * 1000 + (withRefunds ? 7 : 1));
        const keys = ['a', 'b{x}', 42];
        const limit = m.limit;
        for (let step = 0; step < 400; step++) {
          const x = next();
          const key = keys[Math.floor(next() * keys.length)];
          const permits = 1 + Math.floor(next() ** 3 * limit);
          if (x < 0.2) {
            clock.advance(Math.round(next() * windowMs * 1.3 * 1000) / 1000);
          } else {
            const call =
              x < 0.32 && withRefunds ? 'give-back' : x < 0.45 ? 'tryAcquire' : 'consume';
            // tryAcquire alone: its own single-call script where the algorithm has one.
            await sameAnswer(call, m, r, key, permits, step);
          }
        }
        for (const key of keys) {
          const sm = m.stats(key);
          const sr = await r.stats(key);
          expect([key, sr.available]).toEqual([key, sm.available]);
        }
      });
    }
  }

  it('keys that differ only in lone surrogates are as distinct as in memory', async () => {
    // UTF-8 cannot carry a lone surrogate: sent as they are, both would become U+FFFD.
    const keys = ['\uD800', '\uD801', '\uDC00', 'a\uD800b', 'a\uFFFDb', '\uD83D\uDE00', '%uD800'];
    const m = new mem.TokenBucket({ capacity: 1, refillPerSecond: 1e-6 });
    const r = new red.TokenBucket({ redis, capacity: 1, refillPerSecond: 1e-6, prefix: 'lone' });
    const inMemory = keys.map((k) => m.tryAcquire(k));
    const inRedis = [];
    for (const k of keys) inRedis.push(await r.tryAcquire(k));
    expect(inMemory).toEqual(keys.map(() => true));
    expect(inRedis).toEqual(inMemory);
    await r.close();
  });

  it('a wait past 2^52 µs is Infinity, alone and batched, as in memory (a search there never ends)', async () => {
    const clock = new ManualClock(0);
    const o = { capacity: 30_000, refillPerSecond: 3e-6, clock };
    const m = new mem.TokenBucket(o);
    const r = new red.TokenBucket({ ...o, redis, prefix: 'far' });
    for (const key of ['a', 'b']) {
      expect((await r.consume(key, 30_000)).allowed).toBe(m.consume(key, 30_000).allowed);
    }
    clock.advance(0.001);
    const alone = await r.consume('a', 30_000);
    const batched = await Promise.all([r.consume('b', 30_000), r.consume('b', 1)]);
    expect([alone, ...batched]).toEqual([
      m.consume('a', 30_000),
      m.consume('b', 30_000),
      m.consume('b', 1),
    ]);
    expect(alone.retryAfterMs).toBe(Number.POSITIVE_INFINITY);
    await r.close();
  });

  it('a state that lasts past 10^17 ms still gets its TTL (no PX of 1e+17), alone and batched', async () => {
    const clock = new ManualClock(0);
    const o = { capacity: 2 ** 31 - 1, refillPerSecond: 1e-6, clock };
    const m = new mem.TokenBucket(o);
    const r = new red.TokenBucket({ ...o, redis, prefix: 'long' });
    expect(await r.consume('a', 1e8)).toEqual(m.consume('a', 1e8));
    const both = await Promise.all([r.consume('b', 1e8), r.consume('c', 1)]);
    expect(both).toEqual([m.consume('b', 1e8), m.consume('c', 1)]);
    for (const key of ['a', 'b', 'c']) {
      expect((await r.stats(key)).admitted).toBe(m.stats(key).admitted);
    }
    const ttls = await Promise.all(
      ['{a}', '{b}', '{c}'].map(async (tag) => {
        const [name] = await redis.keys(`long:*${tag}*`);
        return redis.pttl(name!);
      }),
    );
    for (const ttl of ttls) expect(ttl).toBeGreaterThan(0);
    await r.close();
  });

  it('stats() counters wrap at 2^32, as in memory', async () => {
    const clock = new ManualClock(0);
    const o = { capacity: 2 ** 31 - 1, refillPerSecond: 1e9, clock };
    const m = new mem.TokenBucket(o);
    const r = new red.TokenBucket({ ...o, redis, prefix: 'wrap' });
    for (let i = 0; i < 3; i++) {
      expect((await r.consume('k', 2 ** 31 - 1)).allowed).toBe(m.consume('k', 2 ** 31 - 1).allowed);
      clock.advance(3000);
    }
    const s = await r.stats('k');
    expect(s.admitted).toBe(3 * (2 ** 31 - 1) - 2 ** 32);
    expect(s).toMatchObject({ admitted: m.stats('k').admitted, rejected: m.stats('k').rejected });
    await r.close();
  });
});
