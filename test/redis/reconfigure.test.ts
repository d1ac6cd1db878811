import { appendFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import * as mem from '../../src/index.js';
import { ManualClock } from '../../src/index.js';
import * as red from '../../src/redis/index.js';
import { seededRandom } from '../helpers/random.mjs';
import { withRedisServer } from '../helpers/redis.js';

// reconfigure() on Redis against the in-memory classes: one seeded random sequence of
// calls, clock steps and reconfigure()s goes through both on one ManualClock, and every
// decision must be equal, field for field. The Redis side is two limiter objects on one
// prefix (two processes, as far as Redis can tell): one reconfigures, both decide, so the
// other one's decisions are made under options it learns from Redis alone.

type AnyRedis = red.TokenBucket | red.FixedWindow | red.SlidingWindow | red.Concurrency;

interface Case {
  m: mem.AnyLimiter;
  make: (prefix: string, more: { configRefreshMs?: number }) => AnyRedis;
  /** The clock's longest step, ms. */
  windowMs: number;
  /** Options for a reconfigure(), drawn with `next`. */
  options: (next: () => number) => Record<string, number>;
}

const pick = <T>(next: () => number, xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
/** Some of `options`, at least one. */
function some(next: () => number, options: Record<string, number>): Record<string, number> {
  const names = Object.keys(options);
  const chosen = Object.fromEntries(names.filter(() => next() < 0.6).map((n) => [n, options[n]!]));
  if (Object.keys(chosen).length === 0) {
    const n = pick(next, names);
    chosen[n] = options[n]!;
  }
  return chosen;
}

const CASES: [string, (redis: Redis, clock: ManualClock) => Case][] = [
  [
    'TokenBucket',
    (redis, clock) => ({
      m: new mem.TokenBucket({ capacity: 10, refillPerSecond: 3.7, clock }),
      make: (prefix, more) =>
        new red.TokenBucket({ redis, capacity: 10, refillPerSecond: 3.7, clock, prefix, ...more }),
      windowMs: 3000,
      options: (next) =>
        some(next, {
          capacity: 1 + Math.floor(next() * 20),
          refillPerSecond: pick(next, [0.5, 1, 3.7, 7, 10, 25]),
        }),
    }),
  ],
  [
    'LeakyBucket',
    (redis, clock) => ({
      m: new mem.LeakyBucket({ capacity: 6, ratePerSecond: 2.5, clock }),
      make: (prefix, more) =>
        new red.LeakyBucket({
          redis,
          capacity: 6,
          ratePerSecond: 2.5,
          clock,
          prefix,
          ...more,
        }) as never,
      windowMs: 2000,
      options: (next) =>
        some(next, {
          capacity: 1 + Math.floor(next() * 12),
          ratePerSecond: pick(next, [0.5, 2.5, 4, 10]),
        }),
    }),
  ],
  [
    'FixedWindow',
    (redis, clock) => ({
      m: new mem.FixedWindow({ limit: 9, windowMs: 1000, clock }),
      make: (prefix, more) =>
        new red.FixedWindow({ redis, limit: 9, windowMs: 1000, clock, prefix, ...more }),
      windowMs: 1000,
      options: (next) =>
        some(next, {
          limit: 1 + Math.floor(next() * 18),
          windowMs: pick(next, [250, 700, 1000, 1600]),
        }),
    }),
  ],
  [
    'SlidingWindow',
    (redis, clock) => ({
      m: new mem.SlidingWindow({ limit: 11, windowMs: 700, clock }),
      make: (prefix, more) =>
        new red.SlidingWindow({ redis, limit: 11, windowMs: 700, clock, prefix, ...more }) as never,
      windowMs: 700,
      options: (next) =>
        some(next, {
          limit: 1 + Math.floor(next() * 22),
          windowMs: pick(next, [300, 700, 1100]),
        }),
    }),
  ],
  [
    'SlidingWindow with segments',
    (redis, clock) => ({
      m: new mem.SlidingWindow({ limit: 11, windowMs: 700, segments: 7, clock }),
      make: (prefix, more) =>
        new red.SlidingWindow({
          redis,
          limit: 11,
          windowMs: 700,
          segments: 7,
          clock,
          prefix,
          ...more,
        }) as never,
      windowMs: 700,
      // The in-memory count fields of a limit of 11 in 7 segments hold limits up to 13.
      options: (next) => ({ limit: 1 + Math.floor(next() * 13) }),
    }),
  ],
  [
    'SlidingLog',
    (redis, clock) => ({
      m: new mem.SlidingLog({ limit: 7, windowMs: 500, clock }),
      make: (prefix, more) =>
        new red.SlidingLog({ redis, limit: 7, windowMs: 500, clock, prefix, ...more }) as never,
      windowMs: 500,
      // The in-memory log of a limit of 7 holds 16 entries: limits up to 8.
      options: (next) =>
        some(next, {
          limit: 1 + Math.floor(next() * 8),
          windowMs: pick(next, [200, 500, 900]),
        }),
    }),
  ],
  [
    'Concurrency',
    (redis, clock) => ({
      m: new mem.Concurrency({ limit: 5, clock }),
      make: (prefix, more) =>
        new red.Concurrency({ redis, limit: 5, clock, prefix, leaseMs: 2 ** 30, ...more }),
      windowMs: 1000,
      options: (next) => ({ limit: 1 + Math.floor(next() * 10) }),
    }),
  ],
  [
    'WarmingBucket',
    (redis, clock) => ({
      m: new mem.WarmingBucket({ ratePerSecond: 10, warmupMs: 1000, clock }),
      make: (prefix, more) =>
        new red.WarmingBucket({
          redis,
          ratePerSecond: 10,
          warmupMs: 1000,
          clock,
          prefix,
          ...more,
        }) as never,
      windowMs: 1500,
      // One warm-up: the in-memory class forgets a debt longer than a new, shorter warm-up
      // allows for (its state then reads as stale).
      options: (next) =>
        some(next, {
          ratePerSecond: pick(next, [4, 10, 25]),
          coldFactor: pick(next, [2, 3, 5]),
        }),
    }),
  ],
];

describe('reconfigure() on Redis decides exactly as in memory', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  for (const [name, make] of CASES) {
    it(`${name}: 400 random calls and reconfigures by one of two limiters on a prefix give equal decisions`, async () => {
      const clock = new ManualClock(0);
      const c = make(redis, clock);
      const prefix = `reconf-${name.replace(/\W/g, '')}`;
      // B reads the options record before every call; A is the one that reconfigures.
      const a = c.make(prefix, {});
      const b = c.make(prefix, { configRefreshMs: 0 });
      const m = c.m;
      const next = seededRandom(name.length * 7919 + 3 + Number(process.env.SEED ?? 0));
      const keys = ['a', 'b{x}', 42];
      let reconfigures = 0;
      for (let step = 0; step < 400; step++) {
        const x = next();
        const key = pick(next, keys);
        const r = next() < 0.5 ? a : b;
        const permits = 1 + Math.floor(next() ** 3 * m.limit);
        if (process.env.TRACE) {
          appendFileSync(
            process.env.TRACE,
            `${step} ${x.toFixed(2)} ${r === a ? 'A' : 'B'} ${key} ${permits} ${clock.nowUs() / 1000}\n`,
          );
        }
        if (x < 0.2) {
          clock.advance(Math.round(next() * c.windowMs * 1.3 * 1000) / 1000);
        } else if (x < 0.27) {
          const options = c.options(next);
          if (process.env.TRACE)
            appendFileSync(process.env.TRACE, `reconfigure ${JSON.stringify(options)}\n`);
          m.reconfigure(options);
          await (a as red.TokenBucket).reconfigure(options as never);
          reconfigures++;
          expect([step, a.limit]).toEqual([step, m.limit]);
        } else if (x < 0.35) {
          if (name === 'Concurrency') {
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
          } else if (name !== 'WarmingBucket') {
            m.refund(key, permits);
            await r.refund(key, permits);
          }
        } else if (x < 0.5) {
          if (process.env.TRACE) {
            const raw = await redis.getBuffer(r.redisKeys(key)[0]!).catch(() => undefined);
            appendFileSync(
              process.env.TRACE,
              `  state ${raw?.toString('hex')} B at ${(b as never as { version: number }).version}\n`,
            );
          }
          const tm = m.tryAcquire(key, permits);
          const tr = await r.tryAcquire(key, permits);
          if (process.env.TRACE)
            appendFileSync(
              process.env.TRACE,
              `  try ${tm} ${tr} ${JSON.stringify(m.stats(key))}\n`,
            );
          expect({ step, key, permits, allowed: tr }).toEqual({ step, key, permits, allowed: tm });
        } else {
          const dm = m.consume(key, permits);
          const dr = await r.consume(key, permits);
          if (process.env.TRACE)
            appendFileSync(
              process.env.TRACE,
              `  consume ${JSON.stringify(dm)} ${JSON.stringify(dr)}\n`,
            );
          expect({ step, key, permits, ...dr }).toEqual({ step, key, permits, ...dm });
        }
      }
      expect(reconfigures).toBeGreaterThan(10);
      for (const key of keys) {
        const sm = m.stats(key);
        const sr = await b.stats(key);
        expect([key, sr.available]).toEqual([key, sm.available]);
      }
      await a.close();
      await b.close();
    });
  }
});
