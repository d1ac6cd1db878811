import http from 'node:http';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rateLimit } from '../../src/http/index.js';
import * as mem from '../../src/index.js';
import { LimiterClosedError, ManualClock } from '../../src/index.js';
import * as red from '../../src/redis/index.js';
import { listen, rateFields, request, until } from '../helpers/http.js';
import { sameAnswer } from '../helpers/parity.js';
import { seededRandom } from '../helpers/random.mjs';
import { cli, RedisCluster, RedisProxy, RedisServer, withRedisServer } from '../helpers/redis.js';

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
    // Its keys change layout across 10^6 per second (an origin stored past it).
    'TokenBucket across 10^6 per second',
    (redis, clock) => ({
      m: new mem.TokenBucket({ capacity: 50_000, refillPerSecond: 2e6, clock }),
      make: (prefix, more) =>
        new red.TokenBucket({
          redis,
          capacity: 50_000,
          refillPerSecond: 2e6,
          clock,
          prefix,
          ...more,
        }),
      windowMs: 100,
      options: (next) =>
        some(next, {
          capacity: 1000 + Math.floor(next() * 100_000),
          refillPerSecond: pick(next, [3e5, 8e5, 2e6, 1e7]),
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
      // A shorter warm-up keeps a debt a longer one ran up.
      options: (next) =>
        some(next, {
          ratePerSecond: pick(next, [4, 10, 25]),
          warmupMs: pick(next, [250, 1000, 2000]),
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
    for (const seed of [3, 5, 6]) {
      it(`${name}: 400 random calls and reconfigures by one of two limiters on a prefix give equal decisions (seed ${seed})`, async () => {
        const clock = new ManualClock(0);
        const c = make(redis, clock);
        const prefix = `reconf-${name.replace(/\W/g, '')}-${seed}`;
        // B reads the options record before every call; A is the one that reconfigures.
        const a = c.make(prefix, {});
        const b = c.make(prefix, { configRefreshMs: 0 });
        const m = c.m;
        const next = seededRandom(name.length * 7919 + seed);
        const keys = ['a', 'b{x}', 42];
        let reconfigures = 0;
        for (let step = 0; step < 400; step++) {
          const x = next();
          const key = pick(next, keys);
          const r = next() < 0.5 ? a : b;
          const permits = 1 + Math.floor(next() ** 3 * m.limit);
          if (x < 0.2) {
            clock.advance(Math.round(next() * c.windowMs * 1.3 * 1000) / 1000);
          } else if (x < 0.27) {
            const options = c.options(next);
            m.reconfigure(options);
            await (a as red.TokenBucket).reconfigure(options as never);
            reconfigures++;
            expect([step, a.limit]).toEqual([step, m.limit]);
          } else if (x >= 0.35 || name !== 'WarmingBucket') {
            const call = x < 0.35 ? 'give-back' : x < 0.5 ? 'tryAcquire' : 'consume';
            await sameAnswer(call, m, r, key, permits, step);
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
  }
});

describe('reconfigure() reaches every limiter on the prefix', () => {
  let redis: Redis;
  let port: number;
  withRedisServer((server, r) => {
    redis = r;
    port = server.port;
  });

  it('a limiter learns another one’s reconfigure at once on a key that one wrote since', async () => {
    const clock = new ManualClock(0);
    const options = { redis, limit: 10, windowMs: 60_000, clock, prefix: 'learn-touched' };
    const a = new red.FixedWindow(options);
    const b = new red.FixedWindow(options);
    expect((await b.consume('k', 1)).remaining).toBe(9);
    await a.reconfigure({ limit: 3 });
    // A writes the key under the new options; B, which read the record a moment ago, meets
    // the key's newer version on its next call and decides under them.
    expect((await a.consume('k', 1)).remaining).toBe(1);
    expect(b.limit).toBe(10);
    expect(await b.consume('k', 1)).toMatchObject({ allowed: true, remaining: 0, limit: 3 });
    expect(b.limit).toBe(3);
    expect(await b.consume('k', 1)).toMatchObject({ allowed: false, limit: 3 });
  });

  const EVERY: [string, Record<string, number>, Record<string, number>, string][] = [
    [
      'TokenBucket',
      { capacity: 10, refillPerSecond: 1 },
      { refillPerSecond: 4 },
      'refillPerSecond',
    ],
    ['LeakyBucket', { capacity: 10, ratePerSecond: 1 }, { capacity: 3 }, 'capacity'],
    ['FixedWindow', { limit: 10, windowMs: 1000 }, { windowMs: 3000 }, 'windowMs'],
    ['SlidingWindow', { limit: 10, windowMs: 1000 }, { windowMs: 3000 }, 'windowMs'],
    ['SlidingWindow', { limit: 10, windowMs: 1000, segments: 10 }, { limit: 4 }, 'limit'],
    ['SlidingLog', { limit: 10, windowMs: 1000 }, { windowMs: 3000 }, 'windowMs'],
    ['Concurrency', { limit: 10 }, { limit: 4 }, 'limit'],
    [
      'WarmingBucket',
      { ratePerSecond: 10, warmupMs: 1000, coldFactor: 3 },
      { coldFactor: 5 },
      'coldFactor',
    ],
  ];
  for (const [name, own, change, shown] of EVERY) {
    it(`${name}${own.segments ? ' with segments' : ''}: a key written under new options tells a limiter that has not read them`, async () => {
      const clock = new ManualClock(0);
      const R = (red as unknown as Record<string, new (o: unknown) => red.FixedWindow>)[name]!;
      const prefix = `every-${name}-${own.segments ?? 0}`;
      const a = new R({ ...own, redis, clock, prefix });
      // B reads the record once, now, and not again for 2^31 − 1 ms.
      const b = new R({ ...own, redis, clock, prefix, configRefreshMs: 2 ** 31 - 1 });
      await b.consume('k');
      await a.reconfigure(change);
      await a.consume('k');
      const before = (b as never as Record<string, number>)[shown];
      await b.consume('k');
      expect([before, (b as never as Record<string, number>)[shown]]).toEqual([
        own[shown],
        change[shown],
      ]);
      await a.close();
      await b.close();
    });
  }

  it('a limiter learns it on a key nobody touched since within configRefreshMs of its clock', async () => {
    const clock = new ManualClock(0);
    const options = { redis, limit: 10, windowMs: 60_000, clock, prefix: 'learn-untouched' };
    const a = new red.FixedWindow(options);
    const b = new red.FixedWindow({ ...options, configRefreshMs: 1000 });
    expect((await b.consume('k', 5)).remaining).toBe(5);
    await a.reconfigure({ limit: 3 });
    // Before configRefreshMs: B decides under the options it read at 0.
    clock.advance(999);
    expect(await b.consume('k', 1)).toMatchObject({ allowed: true, remaining: 4, limit: 10 });
    // At configRefreshMs: B reads the record before its call, which counts the 6 permits
    // granted under a limit of 3.
    clock.advance(1);
    expect(await b.consume('k', 1)).toMatchObject({ allowed: false, remaining: 0, limit: 3 });
    expect(b.limit).toBe(3);
  });

  it('a limiter on an ioredis client with a keyPrefix learns it within configRefreshMs too', async () => {
    const prefixed = new Redis(port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      keyPrefix: 'app:',
    });
    const clock = new ManualClock(0);
    const options = { redis: prefixed, limit: 10, windowMs: 60_000, clock, prefix: 'keyprefix' };
    const a = new red.FixedWindow(options);
    const b = new red.FixedWindow({ ...options, configRefreshMs: 1000 });
    try {
      expect((await b.consume('k', 5)).remaining).toBe(5);
      await a.reconfigure({ limit: 3 });
      clock.advance(1000);
      expect(await b.consume('k', 1)).toMatchObject({ allowed: false, remaining: 0, limit: 3 });
      expect(b.limit).toBe(3);
    } finally {
      await a.close();
      await b.close();
      prefixed.disconnect();
    }
  });

  it('calls of one tick made on either side of reconfigure() taking effect are decided in the order they were made', async () => {
    // The second prefix finds the new options' scripts loaded by the first: nothing is
    // refused NOSCRIPT and sent again, which would hide the order the calls went in.
    for (const prefix of ['tick-order-1', 'tick-order-2']) {
      const clock = new ManualClock(0);
      const fw = new red.FixedWindow({ redis, limit: 3, windowMs: 60_000, clock, prefix });
      await fw.consume('k');
      const order: string[] = [];
      const internals = fw as unknown as { configure(at: unknown): void };
      const configure = internals.configure.bind(fw);
      // A call made just before the new options take effect, in the tick they do.
      internals.configure = (at) => {
        void fw.consume('k').then((d) => order.push(`first ${d.allowed}`));
        configure(at);
      };
      await fw.reconfigure({ limit: 2 });
      await fw.consume('k').then((d) => order.push(`second ${d.allowed}`));
      await until(() => order.length === 2, 'both calls answered');
      // One permit of the new limit of 2 is left: the first call takes it.
      expect([prefix, order]).toEqual([prefix, ['first true', 'second false']]);
      await fw.close();
    }
  });

  it('a limiter created with another window on a reconfigured prefix is refused, naming both', async () => {
    const prefix = 'foreign-window';
    const a = new red.FixedWindow({ redis, limit: 10, windowMs: 1000, prefix });
    await a.reconfigure({ limit: 5 });
    const other = new red.FixedWindow({ redis, limit: 10, windowMs: 2000, prefix });
    const error = await other.consume('k').then(
      () => undefined,
      (e: Error) => e.message,
    );
    expect(error).toMatch(/created with windowMs 2000.*with windowMs 1000/);
    await expect(other.reconfigure({ limit: 7 })).rejects.toThrow(/windowMs 2000/);
    // The same window and another limit: it takes up the prefix's options.
    const same = new red.FixedWindow({ redis, limit: 99, windowMs: 1000, prefix });
    expect(await same.consume('k')).toMatchObject({ allowed: true, limit: 5 });
    expect(same.limit).toBe(5);
  });

  it('concurrent reconfigures each get a version, the later on top of the earlier, and the last wins', async () => {
    const prefix = 'concurrent';
    const options = { redis, capacity: 10, refillPerSecond: 1, prefix };
    const a = new red.TokenBucket(options);
    const b = new red.TokenBucket(options);
    await Promise.all([a.reconfigure({ capacity: 20 }), b.reconfigure({ refillPerSecond: 5 })]);
    const key = `${prefix}:TokenBucket:{#config}`;
    expect(await redis.hget(key, 'v')).toBe('2');
    const lineage = JSON.parse((await redis.hget(key, 'p'))!) as number[][];
    // Options left out keep the newest values: whichever came second carries both changes.
    expect(lineage[2]!.slice(0, 2)).toEqual([20, 5]);
    await Promise.all([a.reconfigure({ capacity: 30 }), b.reconfigure({ capacity: 40 })]);
    expect(await redis.hget(key, 'v')).toBe('4');
    const last = (JSON.parse((await redis.hget(key, 'p'))!) as number[][])[4]![0]!;
    expect([30, 40]).toContain(last);
    // Each limiter decides under the last version once it meets it.
    await a.consume('k');
    await b.consume('k');
    expect([a.capacity, b.capacity, a.refillPerSecond, b.refillPerSecond]).toEqual([
      last,
      last,
      5,
      5,
    ]);
  });

  it('fleet mode spends blocks leased under the old options as taken; the next lease asks under the new', async () => {
    const clock = new ManualClock(0);
    const options = { redis, limit: 10, windowMs: 60_000, clock, prefix: 'fleet-reconf', block: 5 };
    const r = new red.FixedWindow(options);
    expect((await r.consume('k')).allowed).toBe(true); // leases 5
    await r.reconfigure({ limit: 6 });
    const allowed: boolean[] = [];
    for (let i = 0; i < 6; i++) allowed.push(await r.tryAcquire('k'));
    // 4 left in the block, then one lease of the 1 permit the new limit leaves.
    expect(allowed).toEqual([true, true, true, true, true, false]);
    await expect(r.reconfigure({ limit: 4 })).rejects.toThrow(/option "block" \(5\)/);
    await r.close();
  });

  it('a record read Redis does not answer fails its call as unavailable, which is then never sent', async () => {
    const server = await RedisServer.start();
    const proxy = await RedisProxy.start(server.port);
    const client = new Redis(proxy.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    client.on('error', () => {});
    try {
      await client.ping();
      const r = new red.FixedWindow({
        redis: client,
        limit: 5,
        windowMs: 1000,
        timeoutMs: 100,
        whenUnavailable: 'deny',
      });
      proxy.hang();
      // The first call reads the record first: no answer within timeoutMs, so the call
      // applies whenUnavailable without sending its script (it would wait timeoutMs again).
      expect(await r.consume('k')).toMatchObject({ allowed: false, reason: 'unavailable' });
      proxy.heal();
      await client.ping();
      expect(await cli(server.port, 'INFO', 'commandstats')).not.toMatch(/cmdstat_eval/);
      await r.close();
    } finally {
      client.disconnect();
      proxy.close();
      await server.close();
    }
  });

  it('close() during a reconfigure() settles it at once', async () => {
    const server = await RedisServer.start();
    const proxy = await RedisProxy.start(server.port);
    const client = new Redis(proxy.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    client.on('error', () => {});
    try {
      const r = new red.FixedWindow({ redis: client, limit: 5, windowMs: 1000, timeoutMs: 60_000 });
      await r.consume('k');
      proxy.hang();
      const pending = r.reconfigure({ limit: 3 });
      await new Promise((resolve) => setImmediate(resolve));
      await r.close();
      await expect(pending).rejects.toBeInstanceOf(LimiterClosedError);
    } finally {
      proxy.heal();
      client.disconnect();
      proxy.close();
      await server.close();
    }
  });
});

describe('reconfigure() on a Redis Cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await RedisCluster.start();
  });
  afterAll(async () => {
    await cluster?.close();
  });

  it('the record and the keys live in other slots: no CROSSSLOT, and a second limiter learns', async () => {
    const nodes = cluster.ports.map((port) => ({ host: '127.0.0.1', port }));
    const options = {
      redisOptions: { autoResendUnfulfilledCommands: false },
      retryDelayOnFailover: 0,
    };
    const c1 = new Cluster(nodes, options);
    const c2 = new Cluster(nodes, options);
    try {
      const clock = new ManualClock(0);
      const common = { limit: 4, windowMs: 60_000, clock, prefix: 'cluster-reconf' };
      const a = new red.SlidingWindow({ redis: c1, ...common });
      const b = new red.SlidingWindow({ redis: c2, ...common });
      const keys = ['a', 'b{x}', 'ü:1', 42];
      for (const k of keys) expect((await b.consume(k, 3)).allowed).toBe(true);
      await a.reconfigure({ limit: 2, windowMs: 30_000 });
      // Every key counts its 3 permits under the new limit: refused, by either limiter.
      for (const k of keys) {
        expect(await a.consume(k)).toMatchObject({ allowed: false, limit: 2 });
        expect(await b.consume(k)).toMatchObject({ allowed: false, limit: 2 });
      }
      expect(b.windowMs).toBe(30_000);
    } finally {
      c1.disconnect();
      c2.disconnect();
    }
  });
});

// A lazy client that never connected: any command would make it connect (its status leaves
// 'wait'), so an unchanged status proves that bad input made no Redis call.
const lazy = () =>
  new Redis({
    autoResendUnfulfilledCommands: false,
    lazyConnect: true,
    port: 1,
    enableOfflineQueue: false,
  });

/** What `f` throws or rejects with, as its class and message. */
async function outcome(f: () => unknown): Promise<string> {
  try {
    await f();
    return 'no error';
  } catch (e) {
    return `${(e as Error).constructor.name}: ${(e as Error).message}`;
  }
}

const BAD: [string, Record<string, unknown>, unknown[]][] = [
  [
    'TokenBucket',
    { capacity: 10, refillPerSecond: 2 },
    [{ capacity: 0 }, { capacity: 1.5 }, { refillPerSecond: 0 }, { refillPerSecond: 'x' }],
  ],
  [
    'LeakyBucket',
    { capacity: 10, ratePerSecond: 2 },
    [{ capacity: -1 }, { ratePerSecond: 2e9 }, { refillPerSecond: 1 }],
  ],
  ['FixedWindow', { limit: 10, windowMs: 1000 }, [{ limit: 0 }, { windowMs: 0 }, { limit: 'x' }]],
  [
    'SlidingWindow',
    { limit: 10, windowMs: 1000 },
    [{ limit: -3 }, { windowMs: Number.NaN }, { segments: 10 }],
  ],
  [
    'SlidingWindow',
    { limit: 10, windowMs: 1000, segments: 10 },
    [{ windowMs: 2000 }, { segments: 5 }, { limit: 100_000 }, { limit: 0 }],
  ],
  ['SlidingLog', { limit: 10, windowMs: 1000 }, [{ limit: 70_000 }, { windowMs: -1 }]],
  ['Concurrency', { limit: 10 }, [{ limit: 0 }, { limit: 2 ** 31 }, { windowMs: 5 }]],
  [
    'WarmingBucket',
    { ratePerSecond: 10, warmupMs: 1000 },
    [{ warmupMs: 0 }, { coldFactor: 1 }, { ratePerSecond: 0 }, { capacity: 3 }],
  ],
];

describe('reconfigure() refuses bad input before any Redis call, as in memory', () => {
  for (const [name, own, bad] of BAD) {
    it(`${name}${own.segments ? ' with segments' : ''}: options the class does not take or out of range`, async () => {
      const redis = lazy();
      const M = (mem as unknown as Record<string, new (o: unknown) => mem.Concurrency>)[name]!;
      const R = (red as unknown as Record<string, new (o: unknown) => red.Concurrency>)[name]!;
      const m = new M(own);
      const r = new R({ ...own, redis });
      for (const options of [...bad, null, 5, 'limit']) {
        const expected = await outcome(() => m.reconfigure(options as never));
        const got = await outcome(() => r.reconfigure(options as never));
        expect([options, got]).toEqual([options, expected]);
        expect(got).toMatch(/^(TypeError|RangeError): /);
      }
      expect(redis.status).toBe('wait');
      await r.close();
      expect(await outcome(() => r.reconfigure({}))).toMatch(/^LimiterClosedError/);
      expect(redis.status).toBe('wait');
    });
  }
});

describe('reconfigure() and waiters', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  for (const name of ['FixedWindow', 'SlidingWindow', 'SlidingLog', 'Concurrency'] as const) {
    it(`${name}: a waiter in acquire() decides again at once under a raised limit, as in memory`, async () => {
      const clock = new ManualClock(0);
      const own = { limit: 3, windowMs: 60_000, queueLimit: 5, clock };
      const options = name === 'Concurrency' ? { limit: 3, queueLimit: 5, clock } : own;
      const M = (mem as unknown as Record<string, new (o: unknown) => mem.FixedWindow>)[name]!;
      const R = (red as unknown as Record<string, new (o: unknown) => red.FixedWindow>)[name]!;
      const m = new M(options);
      const r = new R({ ...options, redis, prefix: `waiters-${name}` });
      const order: string[] = [];
      await r.consume('k', 3);
      m.consume('k', 3);
      const waiting = r.acquire('k').then(() => order.push('redis granted'));
      const waitingM = Promise.resolve(m.acquire('k')).then(() => order.push('memory granted'));
      await new Promise((resolve) => setTimeout(resolve, 20));
      order.push('reconfigure');
      m.reconfigure({ limit: 4 });
      await r.reconfigure({ limit: 4 });
      await Promise.all([waiting, waitingM]);
      // No time passed on the clock: the raised limit alone let both in.
      expect([order[0], order.slice(1).sort()]).toEqual([
        'reconfigure',
        ['memory granted', 'redis granted'],
      ]);
      await r.close();
      m.close();
    });
  }
});

describe('reconfigure() below a waiter', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  for (const name of ['FixedWindow', 'SlidingWindow', 'SlidingLog', 'Concurrency'] as const) {
    it(`${name}: a waiter asking more than a lowered limit rejects with the RangeError memory gives, and is never granted`, async () => {
      const clock = new ManualClock(0);
      const own = { limit: 3, windowMs: 60_000, queueLimit: 5, clock };
      const options = name === 'Concurrency' ? { limit: 3, queueLimit: 5, clock } : own;
      const M = (mem as unknown as Record<string, new (o: unknown) => mem.FixedWindow>)[name]!;
      const R = (red as unknown as Record<string, new (o: unknown) => red.FixedWindow>)[name]!;
      const m = new M(options);
      const r = new R({ ...options, redis, prefix: `below-${name}` });
      const outcome = (p: Promise<unknown>) =>
        p.then(
          () => 'granted',
          (e: Error) => `${e.constructor.name}: ${e.message}`,
        );
      await r.consume('k', 3);
      m.consume('k', 3);
      const waiting = outcome(r.acquire('k', 3));
      const waitingM = outcome(Promise.resolve(m.acquire('k', 3)));
      await new Promise((resolve) => setTimeout(resolve, 20));
      m.reconfigure({ limit: 2 });
      await r.reconfigure({ limit: 2 });
      // The grants are released (or the window passes): nothing but the limit stands in
      // the waiter's way.
      if (name === 'Concurrency') {
        (m as unknown as mem.Concurrency).release('k', 3);
        await (r as unknown as red.Concurrency).release('k', 3);
      }
      clock.advance(60_000);
      const expected = await waitingM;
      expect(expected).toMatch(/^RangeError: .*exceed the limit \(2\)/);
      expect(await waiting).toBe(expected);
      await r.close();
      m.close();
    });
  }
});

describe('reconfigure() below a call under way', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  const CASES: [string, Record<string, number>, Record<string, number>][] = [
    ['FixedWindow', { limit: 3, windowMs: 1000 }, { limit: 2 }],
    ['SlidingWindow', { limit: 3, windowMs: 1000 }, { limit: 2 }],
    ['SlidingLog', { limit: 3, windowMs: 1000 }, { limit: 2 }],
    ['Concurrency', { limit: 3 }, { limit: 2 }],
    ['TokenBucket', { capacity: 3, refillPerSecond: 1 }, { capacity: 2 }],
  ];
  for (const [name, own, lower] of CASES) {
    it(`${name}: a call for more than the limit another process lowered, read before it goes, is the RangeError memory gives`, async () => {
      const clock = new ManualClock(0);
      const R = (red as unknown as Record<string, new (o: unknown) => red.FixedWindow>)[name]!;
      const M = (mem as unknown as Record<string, new (o: unknown) => mem.FixedWindow>)[name]!;
      const prefix = `lowered-${name}`;
      const a = new R({ ...own, redis, clock, prefix });
      // configRefreshMs 0: the record is read before every call.
      const b = new R({ ...own, redis, clock, prefix, configRefreshMs: 0 });
      await a.reconfigure(lower);
      let expected = '';
      try {
        new M({ ...own, ...lower }).consume('k', 3);
      } catch (e) {
        expected = `${(e as Error).constructor.name}: ${(e as Error).message}`;
      }
      expect(expected).toMatch(/^RangeError/);
      const got = await b.consume('k', 3).then(
        (d) => JSON.stringify(d),
        (e: Error) => `${e.constructor.name}: ${e.message}`,
      );
      expect(got).toBe(expected);
      // Nothing was taken.
      expect((await a.stats('k')).available).toBe(2);
      await a.close();
      await b.close();
    });
  }
});

describe('reconfigure() and the HTTP middleware', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  it('the policy headers show a Redis limiter’s new options from the next response on', async () => {
    const clock = new ManualClock(0);
    const limiter = new red.FixedWindow({
      redis,
      limit: 5,
      windowMs: 10_000,
      clock,
      prefix: 'http',
    });
    const middleware = rateLimit({ limiter, key: () => 'one' });
    const server = http.createServer((req, res) =>
      middleware(req, res, () => {
        res.end('ok');
      }),
    );
    const { port, close } = await listen(server);
    try {
      const before = rateFields((await request(port)).headers)['ratelimit-policy'];
      await limiter.reconfigure({ limit: 8, windowMs: 20_000 });
      const after = rateFields((await request(port)).headers)['ratelimit-policy'];
      expect([before, after]).toEqual(['"5-in-10s";q=5;w=10', '"8-in-20s";q=8;w=20']);
    } finally {
      await close();
      await limiter.close();
    }
  });
});
