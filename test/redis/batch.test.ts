import { Cluster as IoCluster, Redis as IoRedis } from 'ioredis';
import * as nodeRedis from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as mem from '../../src/index.js';
import { BackendUnavailableError, ManualClock } from '../../src/index.js';
import * as red from '../../src/redis/index.js';
import { slotOf, tagOf } from '../../src/redis/keys.js';
import { decisionOfReply } from '../../src/redis/replies.js';
import { EARLY_BATCH, MAX_BATCH } from '../../src/redis/runner.js';
import { seededRandom } from '../helpers/random.mjs';
import { cli, RedisCluster, RedisServer, withRedisServer } from '../helpers/redis.js';

// Calls made in one tick go to Redis as ONE EVALSHA of the script's batch form (per hash
// slot on a Cluster). These tests prove that a batch decides exactly as the calls one by
// one would: the same random ticks go through the Redis class and the in-memory class on
// one ManualClock, and every answer must be equal, in order; the server's own command
// counts show how many commands the ticks took.

type Limiter = mem.TokenBucket | mem.FixedWindow | mem.SlidingLog | mem.Concurrency;
type RedisLimiter = red.TokenBucket | red.FixedWindow | red.SlidingLog | red.Concurrency;
type Make = (redis: unknown, clock: ManualClock, prefix: string) => [Limiter, RedisLimiter];

/** The same TokenBucket in memory and on Redis (`redis`, with `options`), on one clock. */
function buckets(
  redis: unknown,
  clock: ManualClock,
  capacity: number,
  refillPerSecond: number,
  options: Partial<red.TokenBucketOptions> = {},
): [mem.TokenBucket, red.TokenBucket] {
  return [
    new mem.TokenBucket({ capacity, refillPerSecond, clock }),
    new red.TokenBucket({ ...options, redis, capacity, refillPerSecond, clock }),
  ];
}

const CASES: [string, Make, number][] = [
  ['TokenBucket', (redis, clock, prefix) => buckets(redis, clock, 10, 3.7, { prefix }), 3000],
  [
    'LeakyBucket',
    (redis, clock, prefix) => [
      new mem.LeakyBucket({ capacity: 6, ratePerSecond: 2.5, clock }) as never,
      new red.LeakyBucket({ redis, capacity: 6, ratePerSecond: 2.5, clock, prefix }) as never,
    ],
    2000,
  ],
  [
    'FixedWindow',
    (redis, clock, prefix) => [
      new mem.FixedWindow({ limit: 9, windowMs: 1000, clock }),
      new red.FixedWindow({ redis, limit: 9, windowMs: 1000, clock, prefix }),
    ],
    1000,
  ],
  [
    'SlidingWindow',
    (redis, clock, prefix) => [
      new mem.SlidingWindow({ limit: 11, windowMs: 700, clock }) as never,
      new red.SlidingWindow({ redis, limit: 11, windowMs: 700, clock, prefix }) as never,
    ],
    700,
  ],
  [
    // Wide: the weighted test in doubles, and the previous count in steps of 2^13.
    'SlidingWindow, wide (2^31 − 1 per 2^31 ms)',
    (redis, clock, prefix) => [
      new mem.SlidingWindow({ limit: 2 ** 31 - 1, windowMs: 2 ** 31, clock }) as never,
      new red.SlidingWindow({
        redis,
        limit: 2 ** 31 - 1,
        windowMs: 2 ** 31,
        clock,
        prefix,
      }) as never,
    ],
    2 ** 31,
  ],
  [
    'SlidingWindow with segments',
    (redis, clock, prefix) => [
      new mem.SlidingWindow({ limit: 11, windowMs: 700, segments: 7, clock }) as never,
      new red.SlidingWindow({
        redis,
        limit: 11,
        windowMs: 700,
        segments: 7,
        clock,
        prefix,
      }) as never,
    ],
    700,
  ],
  [
    'SlidingLog',
    (redis, clock, prefix) => [
      new mem.SlidingLog({ limit: 7, windowMs: 500, clock }),
      new red.SlidingLog({ redis, limit: 7, windowMs: 500, clock, prefix }),
    ],
    500,
  ],
  [
    'Concurrency',
    (redis, clock, prefix) => [
      new mem.Concurrency({ limit: 5, clock }),
      new red.Concurrency({ redis, limit: 5, clock, prefix, leaseMs: 2 ** 30 }),
    ],
    1000,
  ],
];

/** Successful EVALSHA + EVAL commands run by these servers since their last RESETSTAT. */
async function scriptRuns(ports: readonly number[]): Promise<number> {
  let n = 0;
  for (const port of ports) {
    const info = await cli(port, 'INFO', 'commandstats');
    for (const m of info.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+),.*failed_calls=(\d+)/g)) {
      n += Number(m[1]) - Number(m[2]);
    }
  }
  return n;
}

/** The commands Redis ran while `body` ran (MONITOR): each its arguments, and whether a script ran it. */
async function commandsRun(
  redis: IoRedis,
  body: () => Promise<void>,
): Promise<{ args: string[]; lua: boolean }[]> {
  const run: { args: string[]; lua: boolean }[] = [];
  const monitor = await redis.monitor();
  try {
    const marker = `end-${Math.random()}`;
    const seen = new Promise<void>((resolve) => {
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        if (args[0]?.toLowerCase() === 'echo' && args[1] === marker) resolve();
        run.push({ args: [args[0]!.toLowerCase(), ...args.slice(1)], lua: source === 'lua' });
      });
    });
    await body();
    // MONITOR shows commands in the order they ran: once it shows this one, it has shown
    // every command before it.
    await redis.echo(marker);
    await seen;
  } finally {
    monitor.disconnect();
  }
  return run;
}

/** The EVALSHA and EVAL commands a client sent while `body` ran, each its arguments. */
async function scriptsSent(redis: IoRedis, body: () => Promise<void>): Promise<string[][]> {
  return (await commandsRun(redis, body))
    .filter((c) => !c.lua && (c.args[0] === 'evalsha' || c.args[0] === 'eval'))
    .map((c) => c.args);
}

async function resetStats(ports: readonly number[]): Promise<void> {
  for (const port of ports) await cli(port, 'CONFIG', 'RESETSTAT');
}

/**
 * Loads `r`'s scripts by a call alone and a batch, then zeroes the server's command counts,
 * so that no NOSCRIPT retry is counted.
 */
async function loaded(r: { stats(key: string): Promise<unknown> }, port: number): Promise<void> {
  await r.stats('warm');
  await Promise.all([r.stats('warm'), r.stats('warm')]);
  await resetStats([port]);
}

/**
 * Random ticks of calls (consume, tryAcquire, refund; several keys) through both limiters,
 * time moving between ticks. Every answer must be equal, in order. Returns the calls made
 * and the commands a batch per tick and slot should take: on a standalone ioredis client
 * (`early` EARLY_BATCH) a tick's calls go in batches of `early`.
 */
async function ticks(
  name: string,
  m: Limiter,
  r: RedisLimiter,
  windowMs: number,
  keys: readonly (string | number)[],
  cluster: boolean,
  clock: ManualClock,
  count: number,
  early: number,
): Promise<{ calls: number; commands: number }> {
  const next = seededRandom(name.length * 7919 + keys.length);
  let calls = 0;
  let commands = 0;
  for (let tick = 0; tick < count; tick++) {
    if (next() < 0.4) clock.advance(Math.round(next() * windowMs * 0.6 * 1000) / 1000);
    // Mostly small ticks, sometimes one longer than a batch may be.
    const size = next() < 0.05 ? MAX_BATCH + 5 : 1 + Math.floor(next() * 12);
    const expected: unknown[] = [];
    const got: Promise<unknown>[] = [];
    const batches: Map<number, number>[] = [];
    for (let i = 0; i < size; i++) {
      if (i % early === 0) batches.push(new Map());
      const slots = batches[batches.length - 1]!;
      const key = keys[Math.floor(next() * keys.length)]!;
      const permits = 1 + Math.floor(next() ** 3 * 3);
      const x = next();
      const slot = cluster ? slotOf(tagOf(name, key)) : 0;
      slots.set(slot, (slots.get(slot) ?? 0) + 1);
      if (x < 0.15 && name !== 'Concurrency') {
        m.refund(key, permits);
        got.push(r.refund(key, permits).then(() => 'refunded'));
        expected.push('refunded');
      } else if (x < 0.45) {
        expected.push(m.tryAcquire(key, permits));
        got.push(r.tryAcquire(key, permits));
      } else {
        expected.push(m.consume(key, permits));
        got.push(r.consume(key, permits));
      }
    }
    const answers = await Promise.all(got);
    expect({ tick, answers }).toEqual({ tick, answers: expected });
    calls += size;
    for (const slots of batches) {
      for (const n of slots.values()) commands += Math.ceil(n / MAX_BATCH);
    }
  }
  for (const key of keys) {
    expect([key, (await r.stats(key)).available]).toEqual([key, m.stats(key).available]);
  }
  return { calls, commands };
}

describe('a batch decides as the calls one by one (ioredis, standalone)', () => {
  let server: RedisServer;
  let redis: IoRedis;
  withRedisServer((s, r) => {
    server = s;
    redis = r;
  });

  for (const [name, make, windowMs] of CASES) {
    it(`${name}: random ticks give equal answers, one command per batch of ${EARLY_BATCH} calls`, async () => {
      const clock = new ManualClock(0);
      const [m, r] = make(redis, clock, `b-${name}`);
      await loaded(r, server.port);
      const keys = ['a', 'b{x}', 42, ''];
      const { calls, commands } = await ticks(
        name,
        m,
        r,
        windowMs,
        keys,
        false,
        clock,
        60,
        EARLY_BATCH,
      );
      const runs = (await scriptRuns([server.port])) - keys.length; // the stats() at the end
      expect(runs).toBe(commands);
      expect(calls).toBeGreaterThan(4 * commands);
      await r.close();
    });
  }

  // Every algorithm but Concurrency runs a call that goes alone through a script of its own
  // (compose.lua.ts), with the parameters inline; a batch runs the shared script's batch
  // form. Both read and write the key the same way. (name, the length of
  // the key's binary state (state.lua.ts) or undefined for a text state, the limiters)
  const SINGLES: [
    string,
    number | undefined,
    (clock: ManualClock, prefix: string) => [Limiter, RedisLimiter],
  ][] = [
    ['TokenBucket', 44, (clock, prefix) => buckets(redis, clock, 6, 2.5, { prefix })],
    [
      'LeakyBucket',
      44,
      (clock, prefix) => [
        new mem.LeakyBucket({ capacity: 6, ratePerSecond: 2.5, clock }) as never,
        new red.LeakyBucket({ capacity: 6, ratePerSecond: 2.5, clock, redis, prefix }) as never,
      ],
    ],
    [
      'FixedWindow',
      44,
      (clock, prefix) => [
        new mem.FixedWindow({ limit: 6, windowMs: 1000, clock }),
        new red.FixedWindow({ limit: 6, windowMs: 1000, clock, redis, prefix }),
      ],
    ],
    [
      'SlidingWindow',
      60,
      (clock, prefix) => [
        new mem.SlidingWindow({ limit: 6, windowMs: 700, clock }) as never,
        new red.SlidingWindow({ limit: 6, windowMs: 700, clock, redis, prefix }) as never,
      ],
    ],
    [
      'SlidingWindow with segments',
      undefined,
      (clock, prefix) => [
        new mem.SlidingWindow({ limit: 6, windowMs: 700, segments: 7, clock }) as never,
        new red.SlidingWindow({
          limit: 6,
          windowMs: 700,
          segments: 7,
          clock,
          redis,
          prefix,
        }) as never,
      ],
    ],
    [
      'SlidingLog',
      undefined,
      (clock, prefix) => [
        new mem.SlidingLog({ limit: 6, windowMs: 500, clock }),
        new red.SlidingLog({ limit: 6, windowMs: 500, clock, redis, prefix }),
      ],
    ],
  ];
  // The SHA1 of the limiter's script of every op (what a batch runs the batch form of).
  const sharedSha = (r: RedisLimiter) => (r as unknown as { script: { sha: string } }).script.sha;

  for (const [name, stateBytes, make] of SINGLES) {
    it(`${name}: calls alone run their own scripts and decide as in memory`, async () => {
      const clock = new ManualClock(0);
      const [m, r] = make(clock, `b-single-${name}`);
      await cli(server.port, 'SCRIPT', 'FLUSH');
      await resetStats([server.port]);
      const next = seededRandom(name.length * 31);
      for (let step = 0; step < 300; step++) {
        if (next() < 0.3) clock.advance(Math.round(next() * 1500 * 1000) / 1000);
        const key = next() < 0.5 ? 'a' : 7;
        const permits = 1 + Math.floor(next() ** 3 * 6);
        if (next() < 0.5) {
          expect([step, await r.tryAcquire(key, permits)]).toEqual([
            step,
            m.tryAcquire(key, permits),
          ]);
        } else {
          expect([step, await r.consume(key, permits)]).toEqual([step, m.consume(key, permits)]);
        }
      }
      // The 300 calls were 300 script runs, none by the shared script: never loaded.
      expect(await scriptRuns([server.port])).toBe(300);
      expect(await redis.script('EXISTS', sharedSha(r))).toEqual([0]);
      for (const key of ['a', 7]) {
        const { queued: _, ...got } = await r.stats(key);
        const { queued: __, ...want } = m.stats(key);
        expect([key, got]).toEqual([key, want]);
      }
      await r.close();
    });

    it(`${name}: a key passes between single calls and batches, answers equal`, async () => {
      const clock = new ManualClock(0);
      const [m, r] = make(clock, `b-handover-${name}`);
      const next = seededRandom(name.length * 97);
      let alone = 0;
      let batched = 0;
      for (let step = 0; step < 200; step++) {
        if (next() < 0.3) clock.advance(Math.round(next() * 1500 * 1000) / 1000);
        const size = next() < 0.5 ? 1 : 2 + Math.floor(next() * 3);
        const expected: unknown[] = [];
        const got: Promise<unknown>[] = [];
        for (let i = 0; i < size; i++) {
          const permits = 1 + Math.floor(next() ** 3 * 6);
          if (next() < 0.5) {
            expected.push(m.tryAcquire('k', permits));
            got.push(r.tryAcquire('k', permits));
          } else {
            expected.push(m.consume('k', permits));
            got.push(r.consume('k', permits));
          }
        }
        expect({ step, answers: await Promise.all(got) }).toEqual({ step, answers: expected });
        if (size === 1) alone++;
        else batched++;
      }
      expect(alone).toBeGreaterThan(50);
      expect(batched).toBeGreaterThan(50);
      const { queued: _, ...got } = await r.stats('k');
      const { queued: __, ...want } = m.stats('k');
      expect(got).toEqual(want);
      await r.close();
    });

    // A text state is not checked by the shared script either.
    if (stateBytes === undefined) continue;
    it(`${name}: a key holding another format is an error naming the key, alone or batched`, async () => {
      const [, r] = make(new ManualClock(0), `b-foreign-${name}`);
      const [key] = r.redisKeys('k');
      // The old text form, and a string of the binary form's length: neither is misread.
      for (const value of ['12 3 4 5', 'x'.repeat(stateBytes)]) {
        await redis.set(key!, value);
        const alone = await r.tryAcquire('k').then(
          () => undefined,
          (e: Error) => e.message,
        );
        expect(alone).toMatch(/script atomic-limiter:[a-z-]+ failed: .*holds no .* state/);
        const batch = await Promise.all([
          r.consume('k').then(
            () => undefined,
            (e: Error) => e.message,
          ),
          r.tryAcquire(value),
        ]);
        expect(batch[0]).toMatch(/holds no .* state/);
        expect(batch[1]).toBe(true);
        expect(await redis.get(key!)).toBe(value);
      }
      await r.close();
    });
  }

  // A fleet lease ('b') goes alone through a script of its own too; in a tick with other
  // calls, through the shared script's batch form. The same random calls on two keys that
  // start alike, one each way: replies and states equal.
  // (name, the limiter, the most the clock moves between calls in ms,
  // the most one call asks)
  const LEASERS: [string, (clock: ManualClock, prefix: string) => RedisLimiter, number, number][] =
    [
      [
        'TokenBucket',
        (clock, prefix) =>
          new red.TokenBucket({
            redis,
            capacity: 20,
            refillPerSecond: 2.5,
            block: 8,
            clock,
            prefix,
          }),
        3000,
        16,
      ],
      [
        'TokenBucket past 10^6 per second',
        (clock, prefix) =>
          new red.TokenBucket({
            redis,
            capacity: 50,
            refillPerSecond: 3e6,
            block: 8,
            clock,
            prefix,
          }),
        0.01,
        16,
      ],
      [
        'LeakyBucket',
        (clock, prefix) =>
          new red.LeakyBucket({
            redis,
            capacity: 6,
            ratePerSecond: 2.5,
            block: 3,
            clock,
            prefix,
          }) as never,
        3000,
        16,
      ],
      [
        'FixedWindow',
        (clock, prefix) =>
          new red.FixedWindow({ redis, limit: 20, windowMs: 1000, block: 8, clock, prefix }),
        800,
        16,
      ],
      [
        'SlidingWindow',
        (clock, prefix) =>
          new red.SlidingWindow({
            redis,
            limit: 20,
            windowMs: 700,
            block: 8,
            clock,
            prefix,
          }) as never,
        500,
        16,
      ],
      [
        'SlidingWindow, wide',
        (clock, prefix) =>
          new red.SlidingWindow({
            redis,
            limit: 3_000_000,
            windowMs: 3_600_000,
            block: 8,
            clock,
            prefix,
          }) as never,
        600_000,
        150_000,
      ],
      [
        // Prefixes of their own: a key's name is the two-window SlidingWindow's above, whose
        // state a segmented window does not read.
        'SlidingWindow with segments',
        (clock, prefix) =>
          new red.SlidingWindow({
            redis,
            limit: 20,
            windowMs: 700,
            segments: 7,
            block: 8,
            clock,
            prefix: `${prefix}-segments`,
          }) as never,
        500,
        16,
      ],
      [
        // Segments of 1 ms: a step of the clock rolls a few of the 200 out, or all of them.
        'SlidingWindow with 200 segments',
        (clock, prefix) =>
          new red.SlidingWindow({
            redis,
            limit: 300,
            windowMs: 200,
            segments: 200,
            block: 8,
            clock,
            prefix: `${prefix}-200-segments`,
          }) as never,
        60,
        80,
      ],
      [
        'SlidingLog',
        (clock, prefix) =>
          new red.SlidingLog({ redis, limit: 20, windowMs: 500, block: 8, clock, prefix }),
        400,
        16,
      ],
      [
        // Leases of more than the 1000 entries one LPUSH takes.
        'SlidingLog, leases past 1000 permits',
        (clock, prefix) =>
          new red.SlidingLog({
            redis,
            limit: 5000,
            windowMs: 1000,
            block: 8,
            clock,
            prefix: `${prefix}-5000`,
          }),
        800,
        2500,
      ],
    ];
  for (const [name, make, moveMs, most] of LEASERS) {
    it(`${name}: a lease alone runs its own script and answers as in a batch`, async () => {
      type Call = (op: string, tag: string, permits: number, extra?: string) => Promise<unknown>;
      const run = async (batched: boolean) => {
        const clock = new ManualClock(1_000_000);
        const r = make(clock, `b-lease-${name}-${batched}`);
        const call = (r as unknown as { call: Call }).call.bind(r);
        const next = seededRandom(name.length * 53);
        const replies: unknown[] = [];
        for (let step = 0; step < 300; step++) {
          if (next() < 0.3) clock.advance(Math.round(next() * moveMs * 1000) / 1000);
          const size = 1 + Math.floor(next() * most);
          const least = 1 + Math.floor(next() * size);
          const lease = next() < 0.7;
          const op = lease ? call('b', 'k', size, String(least)) : call('c', 'k', least);
          // Batched: a stats() call of another key in the same tick makes it a batch.
          const [reply] = await Promise.all([op, batched ? r.stats('other') : undefined]);
          // A consume() answers as its Decision (a grant alone replies fewer fields).
          replies.push(lease ? reply : decisionOfReply('c', reply, r.limit));
        }
        if (!batched) {
          // 300 calls alone, each its own script's run; the shared script never loaded.
          expect(await scriptRuns([server.port])).toBe(300);
          expect(await redis.script('EXISTS', sharedSha(r))).toEqual([0]);
        }
        const { queued: _, ...state } = await r.stats('k' as never);
        await r.close();
        return { replies, state };
      };
      await cli(server.port, 'SCRIPT', 'FLUSH');
      await resetStats([server.port]);
      const alone = await run(false);
      const batched = await run(true);
      expect(batched).toEqual(alone);
      const granted = alone.replies.filter((x) => (x as unknown[])[0] === 1).length;
      expect(granted).toBeGreaterThan(15);
      expect(alone.replies.length - granted).toBeGreaterThan(15);
    });
  }

  it('a hot key: equal calls in one tick go as runs; exactly the first `capacity` are admitted', async () => {
    const r = new red.TokenBucket({ redis, capacity: 150, refillPerSecond: 1e-3, prefix: 'b-hot' });
    await Promise.all([r.stats('warm'), r.stats('warm')]);
    await resetStats([server.port]);
    // 200 equal calls, with one on another key in the middle: the run is split around it.
    const calls: Promise<boolean>[] = [];
    for (let i = 0; i < 200; i++) calls.push(r.tryAcquire(i === 60 ? 'other' : 'hot'));
    const got = await Promise.all(calls);
    const hot = got.filter((_, i) => i !== 60);
    expect(hot.slice(0, 150).every(Boolean)).toBe(true);
    expect(hot.slice(150).some(Boolean)).toBe(false);
    expect(got[60]).toBe(true);
    expect(await scriptRuns([server.port])).toBe(Math.ceil(200 / EARLY_BATCH));
    expect(await r.stats('hot')).toMatchObject({ available: 0, admitted: 150, rejected: 49 });
    await r.close();
  });

  it('a batch of one kind of call on distinct keys goes as one argument a call, read by one MGET, and comes back as one flat array', async () => {
    const clock = new ManualClock(0);
    const [m, r] = buckets(redis, clock, 3, 1, { prefix: 'b-flat' });
    await Promise.all([r.stats('warm'), r.stats('warm')]);
    // One batch: as many calls as one takes.
    const n = EARLY_BATCH;
    const keys = Array.from({ length: n }, (_, i) => `k${i}`);
    // Half the keys spent first, so that the batch holds grants and refusals.
    for (const k of keys.slice(0, n / 2)) {
      expect(await r.consume(k, 3)).toEqual(m.consume(k, 3));
    }
    const run = await commandsRun(redis, async () => {
      const got = await Promise.all(keys.map((k) => r.consume(k)));
      expect(got).toEqual(keys.map((k) => m.consume(k)));
    });
    const sent = run
      .filter((c) => !c.lua && (c.args[0] === 'evalsha' || c.args[0] === 'eval'))
      .map((c) => c.args);
    expect(sent).toHaveLength(1);
    // One MGET reads the keys; GET only those it found empty (the half never used).
    const reads = run.filter((c) => c.lua && (c.args[0] === 'mget' || c.args[0] === 'get'));
    expect(reads.map((c) => [c.args[0], c.args.length - 1])).toEqual([
      ['mget', n],
      ...keys.slice(n / 2).map(() => ['get', 1]),
    ]);
    const [verb, sha, numkeys, ...rest] = sent[0]!;
    expect([verb, Number(numkeys)]).toEqual(['evalsha', n]);
    // Keys per call, the mode (op, time, extra), one item a call, the token.
    const argv = rest.slice(n);
    expect(argv).toHaveLength(1 + 3 + n + 1);
    // Run again as sent: one array of numbers and strings, no table per call.
    const reply = (await redis.evalsha(sha!, n, ...rest)) as unknown[];
    expect(reply.some((x) => typeof x !== 'number' && typeof x !== 'string')).toBe(false);
    await r.close();
  });

  it('calls of one tick on keys written under newer options are decided again under them, each once, in order', async () => {
    const clock = new ManualClock(0);
    const options = { redis, capacity: 10, refillPerSecond: 1, clock, prefix: 'b-newer' };
    const a = new red.TokenBucket(options);
    // B reads the options record now, and not again for 2^31 − 1 ms.
    const b = new red.TokenBucket({ ...options, configRefreshMs: 2 ** 31 - 1 });
    await b.consume('warm');
    await a.reconfigure({ capacity: 4 });
    const m = new mem.TokenBucket({ capacity: 4, refillPerSecond: 1, clock });
    for (const k of ['x', 'y']) expect(await a.consume(k)).toEqual(m.consume(k));
    expect(b.capacity).toBe(10);
    // One tick of B: runs and single calls on both keys, every one meeting the newer state.
    const keys = ['x', 'x', 'y', 'x', 'y', 'y', 'y', 'x'];
    const got = await Promise.all(
      keys.map((k, i) => (i % 3 === 0 ? b.consume(k) : b.tryAcquire(k))),
    );
    expect(got).toEqual(keys.map((k, i) => (i % 3 === 0 ? m.consume(k) : m.tryAcquire(k))));
    expect(b.capacity).toBe(4);
    for (const k of ['x', 'y']) expect((await b.stats(k)).admitted).toBe(m.stats(k).admitted);
    await a.close();
    await b.close();
  });

  it('a full batch goes out before its tick ends, so Redis decides it while the next calls are made', async () => {
    const r = new red.TokenBucket({ redis, capacity: 100, refillPerSecond: 1, prefix: 'b-early' });
    await Promise.all([r.stats('warm'), r.stats('warm')]);
    // ioredis's queue of commands written and not yet answered.
    const written = (redis as unknown as { commandQueue: { length: number } }).commandQueue;
    const before = written.length;
    const calls = Array.from({ length: 2 * EARLY_BATCH + 1 }, () => r.tryAcquire('k'));
    const inTick = written.length - before;
    expect(await Promise.all(calls)).toEqual(calls.map(() => true));
    // Two full batches at once; the call left goes when the tick ends.
    expect(inTick).toBe(2);
    expect((await r.stats('k')).admitted).toBe(2 * EARLY_BATCH + 1);
    await r.close();
  });

  it('a tick longer than a batch keeps its calls in order when the node lacks the batch form but holds the single-call one', async () => {
    const clock = new ManualClock(0);
    // Settings of their own: scripts no other test loaded.
    const [m, r] = buckets(redis, clock, EARLY_BATCH, 0.37, { prefix: 'b-order' });
    // A call alone loads the single-call form; the batch form is not loaded yet.
    expect(await r.consume('k')).toEqual(m.consume('k'));
    const n = EARLY_BATCH + 1;
    const got = await Promise.all(Array.from({ length: n }, () => r.consume('k')));
    expect(got).toEqual(Array.from({ length: n }, () => m.consume('k')));
    await r.close();
  });

  it("two hot keys interleaved in one tick go as two runs, each key's calls decided in order", async () => {
    const clock = new ManualClock(0);
    const [m, r] = buckets(redis, clock, 30, 1, { prefix: 'b-two-hot' });
    await Promise.all([r.stats('warm'), r.stats('warm')]);
    const keys = Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? 'a' : 'b'));
    const sent = await scriptsSent(redis, async () => {
      const got = await Promise.all(keys.map((k) => r.tryAcquire(k)));
      expect(got).toEqual(keys.map((k) => m.tryAcquire(k)));
    });
    // A batch each EARLY_BATCH calls: two keys; keys per call, the mode, a run a key, the token.
    expect(sent).toHaveLength(Math.ceil(keys.length / EARLY_BATCH));
    for (const command of sent) expect(command.slice(2)).toHaveLength(1 + 2 + 1 + 3 + 2 + 1);
    for (const k of ['a', 'b']) {
      const { queued: _, ...got } = await r.stats(k);
      const { queued: __, ...want } = m.stats(k);
      expect(got).toEqual(want);
    }
    await r.close();
  });

  // (name, the limiters, the permits of each call, the ms the clock moves between ticks)
  const RUNS: [string, (clock: ManualClock) => readonly [Limiter, RedisLimiter], number, number][] =
    [
      ['TokenBucket', (clock) => buckets(redis, clock, 30, 2, { prefix: 'b-run' }), 2, 400],
      [
        'FixedWindow',
        (clock) => [
          new mem.FixedWindow({ limit: 30, windowMs: 1000, clock }),
          new red.FixedWindow({ redis, limit: 30, windowMs: 1000, clock, prefix: 'b-run' }),
        ],
        2,
        400,
      ],
      [
        'WarmingBucket',
        (clock) => [
          new mem.WarmingBucket({ ratePerSecond: 20, warmupMs: 1000, clock }) as never,
          new red.WarmingBucket({
            redis,
            ratePerSecond: 20,
            warmupMs: 1000,
            clock,
            prefix: 'b-run',
          }) as never,
        ],
        2,
        400,
      ],
      [
        'SlidingWindow',
        (clock) => [
          new mem.SlidingWindow({ limit: 30, windowMs: 1000, clock }) as never,
          new red.SlidingWindow({
            redis,
            limit: 30,
            windowMs: 1000,
            clock,
            prefix: 'b-run',
          }) as never,
        ],
        2,
        700,
      ],
      [
        // Wide: the previous count read back in steps.
        'SlidingWindow, wide',
        (clock) => [
          new mem.SlidingWindow({ limit: 3_000_000, windowMs: 3_600_000, clock }) as never,
          new red.SlidingWindow({
            redis,
            limit: 3_000_000,
            windowMs: 3_600_000,
            clock,
            prefix: 'b-run-wide',
          }) as never,
        ],
        100_001,
        2_500_000,
      ],
    ];
  for (const [name, make, permits, stepMs] of RUNS) {
    it(`${name}: a run of equal calls on one key reads the key once a batch (one MGET) and writes it once, each call decided as alone`, async () => {
      const clock = new ManualClock(0);
      const [m, r] = make(clock);
      await Promise.all([r.stats('warm'), r.stats('warm')]);
      const [key] = r.redisKeys('hot');
      // The key holds a state: one MGET reads it for the whole batch.
      expect(await r.consume('hot')).toEqual(m.consume('hot'));
      for (const [method, calls] of [
        ['consume', 45],
        ['tryAcquire', 20],
        ['consume', 45],
      ] as const) {
        clock.advance(stepMs);
        const run = await commandsRun(redis, async () => {
          const got = await Promise.all(
            Array.from({ length: calls }, () => r[method]('hot', permits) as Promise<unknown>),
          );
          expect(got).toEqual(Array.from({ length: calls }, () => m[method]('hot', permits)));
        });
        // Once per batch of EARLY_BATCH calls.
        const onKey = run.filter((c) => c.lua && c.args[1] === key).map((c) => c.args[0]);
        const batches = Math.ceil(calls / EARLY_BATCH);
        expect([method, onKey]).toEqual([method, Array(batches).fill(['mget', 'set']).flat()]);
      }
      const { queued: _, ...got } = await r.stats('hot');
      const { queued: __, ...want } = m.stats('hot');
      expect(got).toEqual(want);
      await r.close();
    });
  }

  it('a call on a key of another type fails alone; the rest of its batch is decided', async () => {
    const clock = new ManualClock(0);
    const [m, r] = buckets(redis, clock, 3, 1, { prefix: 'b-wrongtype', whenUnavailable: 'allow' });
    await redis.lpush(r.redisKeys('bad')[0]!, 'not a bucket');
    const calls = ['ok', 'bad', 'ok', 'ok', 'bad', 'ok'].map((key) =>
      r.consume(key).then(
        (d) => d,
        (e: Error) => e,
      ),
    );
    const got = await Promise.all(calls);
    const want = ['ok', 'ok', 'ok', 'ok'].map(() => m.consume('ok'));
    expect([got[0], got[2], got[3], got[5]]).toEqual(want);
    for (const e of [got[1], got[4]]) {
      expect(e).toBeInstanceOf(Error);
      expect(e).not.toBeInstanceOf(BackendUnavailableError);
      expect((e as Error).message).toMatch(/script atomic-limiter:gcra failed: WRONGTYPE/);
    }
    await r.close();
  });

  it('SCRIPT FLUSH before a batch: the batch is run by EVAL, each call decided once', async () => {
    const clock = new ManualClock(0);
    const r = new red.FixedWindow({ redis, limit: 5, windowMs: 1000, clock, prefix: 'b-flush' });
    await r.stats('k');
    await cli(server.port, 'SCRIPT', 'FLUSH');
    const got = await Promise.all(Array.from({ length: 8 }, () => r.tryAcquire('k')));
    expect(got).toEqual([true, true, true, true, true, false, false, false]);
    expect((await r.stats('k')).admitted).toBe(5);
    expect((await r.stats('k')).rejected).toBe(3);
    await r.close();
  });

  it('a batch whose reply never comes fails each call by the policy, then recovers', async () => {
    const clock = new ManualClock(0);
    const make = (whenUnavailable: 'deny' | 'throw', prefix: string) =>
      new red.TokenBucket({
        redis,
        capacity: 20,
        refillPerSecond: 1,
        clock,
        prefix,
        timeoutMs: 150,
        whenUnavailable,
      });
    const deny = make('deny', 'b-lost-deny');
    const thrower = make('throw', 'b-lost-throw');
    // Both script forms loaded (a NOSCRIPT reply would show the batch never ran).
    await Promise.all([deny.stats('k'), deny.stats('k'), thrower.stats('k'), thrower.stats('k')]);
    // Redis answers nobody for 600 ms: the batches' replies come too late.
    const pauser = new IoRedis(server.port, '127.0.0.1');
    try {
      await pauser.client('PAUSE', 600, 'ALL');
      const denied = await Promise.all(Array.from({ length: 6 }, () => deny.consume('k')));
      for (const d of denied) {
        expect(d).toMatchObject({ allowed: false, reason: 'unavailable', retryAfterMs: 150 });
      }
      const thrown = await Promise.all(
        Array.from({ length: 6 }, () => thrower.tryAcquire('k').then(String, (e) => e)),
      );
      for (const e of thrown) expect(e).toBeInstanceOf(BackendUnavailableError);
      await pauser.client('UNPAUSE');
    } finally {
      pauser.disconnect();
    }
    // Once Redis answers a probe again, calls go to it (until then they fail fast).
    let stats = await deny.stats('k').catch(() => undefined);
    for (let i = 0; i < 200 && stats === undefined; i++) {
      await new Promise((r) => setTimeout(r, 20));
      stats = await deny.stats('k').catch(() => undefined);
    }
    // The late batch did run (a reply lost is never replayed): 6 permits are gone. The
    // thrower's calls, made once the first batch had found Redis silent, failed fast: they
    // were never sent.
    expect(stats?.available).toBe(14);
    expect((await thrower.stats('k')).available).toBe(20);
    const again = await Promise.all(Array.from({ length: 3 }, () => deny.consume('k')));
    expect(again.map((d) => [d.allowed, d.remaining])).toEqual([
      [true, 13],
      [true, 12],
      [true, 11],
    ]);
    await deny.close();
    await thrower.close();
  });
});

describe('a batch decides as the calls one by one (node-redis, standalone)', () => {
  let server: RedisServer;
  let client: ReturnType<typeof nodeRedis.createClient>;
  beforeAll(async () => {
    server = await RedisServer.start();
    client = nodeRedis.createClient({ url: server.url });
    await client.connect();
  });
  afterAll(async () => {
    client?.destroy();
    await server?.close();
  });

  for (const [name, make, windowMs] of CASES) {
    it(`${name}: random ticks give equal answers, one command per tick`, async () => {
      const clock = new ManualClock(0);
      const [m, r] = make(client, clock, `n-${name}`);
      await loaded(r, server.port);
      const keys = ['a', 'b{x}', 7];
      const { calls, commands } = await ticks(
        name,
        m,
        r,
        windowMs,
        keys,
        false,
        clock,
        40,
        Number.POSITIVE_INFINITY,
      );
      expect((await scriptRuns([server.port])) - keys.length).toBe(commands);
      expect(calls).toBeGreaterThan(4 * commands);
      await r.close();
    });
  }
});

describe('a batch per hash slot on a three-master Redis Cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await RedisCluster.start();
  });
  afterAll(async () => {
    await cluster?.close();
  });

  const clients: [string, (ports: number[]) => Promise<{ c: unknown; close(): void }>][] = [
    [
      'ioredis Cluster',
      async (ports) => {
        const c = new IoCluster(
          ports.map((port) => ({ host: '127.0.0.1', port })),
          { redisOptions: { autoResendUnfulfilledCommands: false }, retryDelayOnFailover: 0 },
        );
        return { c, close: () => c.disconnect() };
      },
    ],
    [
      'node-redis createCluster',
      async (ports) => {
        const c = nodeRedis.createCluster({
          rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
        });
        await c.connect();
        return { c, close: () => void c.destroy() };
      },
    ],
  ];
  for (const [client, open] of clients) {
    for (const [name, make, windowMs] of CASES.filter(([n]) =>
      ['TokenBucket', 'SlidingLog', 'Concurrency'].includes(n),
    )) {
      it(`${client}, ${name}: equal answers, one command per tick and slot`, async () => {
        const { c, close } = await open(cluster.ports);
        try {
          const clock = new ManualClock(0);
          const [m, r] = make(c, clock, `c-${client.replace(/\W/g, '')}`);
          // Keys on all three nodes, in several slots.
          const keys = ['a', 'b', 'c', 'd', 'user:{x}', '{x}', 9];
          for (const k of keys) await r.stats(k);
          await Promise.all(keys.map((k) => r.stats(k)));
          await resetStats(cluster.ports);
          // A Cluster's calls go in one batch per tick and slot.
          const { calls, commands } = await ticks(
            name,
            m,
            r,
            windowMs,
            keys,
            true,
            clock,
            30,
            Number.POSITIVE_INFINITY,
          );
          expect((await scriptRuns(cluster.ports)) - keys.length).toBe(commands);
          expect(calls).toBeGreaterThan(commands);
          await r.close();
        } finally {
          close();
        }
      });
    }
  }
});
