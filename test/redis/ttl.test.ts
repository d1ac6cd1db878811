import type { Redis as IoRedis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { REDIS_TIME_SLACK_MS } from '../../src/redis/base.js';
import * as red from '../../src/redis/index.js';
import { seededRandom } from '../helpers/random.mjs';
import { withRedisServer } from '../helpers/redis.js';

// On Redis time, a call alone keeps its key's TTL (`SET … KEEPTTL`) when the state it writes
// ends no later than the state stored before it, since the TTL there already reaches that
// end; setting a TTL is the dearest part of a write. These tests check the safety of that
// against the server itself: after every step of a random mix of calls alone, batches and
// refunds, the key must live at least until its stored state is fresh again (a key gone
// early forgets what it counted), and not much longer; and a hot key must set its TTL once
// per window or step, not once per call. SlidingLog's state is two keys (its list, and its
// counters, which are what a call SETs): each must live so.

type Limiter =
  | red.TokenBucket
  | red.LeakyBucket
  | red.FixedWindow
  | red.SlidingWindow
  | red.SlidingLog;

interface Case {
  readonly name: string;
  /** The limiter; `block`: in fleet mode (its leases go alone through a script of their own). */
  readonly make: (redis: IoRedis, prefix: string, block?: number) => Limiter;
  /**
   * The µs at which the stored state is fresh again (0: now), from its first key's value:
   * the packed state, or a list's first (newest) entry.
   */
  readonly endUs: (value: Buffer) => number;
  /** How far past that end the TTL may reach by design (a bucket's step), µs. */
  readonly stepUs: number;
  /** How long the run must span on Redis time to pass several windows or steps, µs. */
  readonly spanUs: number;
}

/**
 * The packed state's fields (state.lua.ts: a 4-byte head, its first byte the layout, the
 * writer's settings — `settings` doubles —, then the fields as doubles).
 */
function fields(value: Buffer, settings: number): number[] {
  expect(value[0]).toBe(3);
  const out: number[] = [];
  for (let at = 4 + 8 * settings; at < value.length; at += 8) out.push(value.readDoubleLE(at));
  return out;
}

// Parameters with whole-µs emission intervals at most 2^24 / capacity, so that a bucket's
// unit is 1 µs (its stored tat is the µs at which it is full again).
const CASES: Case[] = [
  {
    name: 'TokenBucket',
    make: (redis, prefix, block) =>
      new red.TokenBucket({ redis, capacity: 20, refillPerSecond: 400, prefix, block }),
    endUs: (v) => fields(v, 2)[0]!,
    // An eighth of the 50 ms the bucket takes to fill, in whole ms.
    stepUs: 6000,
    spanUs: 60_000,
  },
  {
    name: 'LeakyBucket',
    make: (redis, prefix, block) =>
      new red.LeakyBucket({ redis, capacity: 8, ratePerSecond: 250, prefix, block }),
    endUs: (v) => fields(v, 2)[0]!,
    stepUs: 4000,
    spanUs: 60_000,
  },
  {
    name: 'FixedWindow',
    make: (redis, prefix, block) =>
      new red.FixedWindow({ redis, limit: 12, windowMs: 15, prefix, block }),
    endUs: (v) => (fields(v, 1)[0]! + 1) * 15_000,
    stepUs: 0,
    spanUs: 60_000,
  },
  {
    name: 'SlidingWindow',
    make: (redis, prefix, block) =>
      new red.SlidingWindow({ redis, limit: 12, windowMs: 15, prefix, block }),
    endUs: (v) => {
      const [win, prev, curr] = fields(v, 2) as [number, number, number];
      if (curr > 0) return (win + 2) * 15_000;
      return prev > 0 ? (win + 1) * 15_000 : 0;
    },
    stepUs: 0,
    spanUs: 60_000,
  },
  {
    // "g<segment µs>/<segments>@<options version> segment admitted rejected c1 … cN": ci counts segment
    // (segment − N + i), of 5 ms.
    name: 'SlidingWindow with segments',
    make: (redis, prefix, block) =>
      new red.SlidingWindow({ redis, limit: 12, windowMs: 15, segments: 3, prefix, block }),
    endUs: (v) => {
      const [tag, ...rest] = v.toString().split(' ');
      expect(tag).toBe('g5000/3@0');
      const [seg, , , ...counts] = rest.map(Number) as [number, ...number[]];
      for (let i = counts.length; i >= 1; i--) if (counts[i - 1]! > 0) return (seg + i) * 5000;
      return 0;
    },
    stepUs: 0,
    spanUs: 60_000,
  },
  {
    // The list's newest entry is the last grant's time.
    name: 'SlidingLog',
    make: (redis, prefix, block) =>
      new red.SlidingLog({ redis, limit: 12, windowMs: 15, prefix, block }),
    endUs: (v) => Number(v.toString()) + 15_000,
    stepUs: 0,
    spanUs: 60_000,
  },
];

// Each key's value (a list's: its first entry) and PTTL, and Redis TIME before and after
// them, in one script (atomic).
const CHECK = `local t0 = redis.call('TIME')
local out = {}
for i, k in ipairs(KEYS) do
  local v
  if redis.call('TYPE', k).ok == 'list' then
    v = redis.call('LINDEX', k, 0)
  else
    v = redis.call('GET', k)
  end
  out[2 * i - 1] = v or false
  out[2 * i] = redis.call('PTTL', k)
end
local t1 = redis.call('TIME')
return {t0[1], t0[2], t1[1], t1[2], unpack(out)}`;

/** The SETs of `key` that scripts run while `body` runs, by how they treat the TTL. */
async function countSets(
  redis: IoRedis,
  key: string,
  body: () => Promise<void>,
): Promise<{ px: number; keep: number; other: number }> {
  const counts = { px: 0, keep: 0, other: 0 };
  const monitor = await redis.monitor();
  try {
    const marker = `end:${key}`;
    const seen = new Promise<void>((resolve) => {
      monitor.on('monitor', (_time: string, args: string[]) => {
        const verb = args[0]?.toUpperCase();
        if (verb === 'ECHO' && args[1] === marker) resolve();
        if (verb !== 'SET' || args[1] !== key) return;
        const option = args[3]?.toUpperCase();
        if (option === 'PX') counts.px++;
        else if (option === 'KEEPTTL') counts.keep++;
        else counts.other++;
      });
    });
    await body();
    // MONITOR shows commands in the order they ran: once it shows this one, it has shown
    // every SET before it.
    await redis.echo(marker);
    await seen;
  } finally {
    monitor.disconnect();
  }
  return counts;
}

describe('TTLs on Redis time, with calls alone keeping them', () => {
  let redis: IoRedis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  // Alone: no batch or refund between the calls (both run the shared script, which sets the
  // TTL every time), so that a TTL kept where it had to grow is not set right by them before
  // the state outlives it and its slack.
  for (const [c, alone] of CASES.flatMap((c) => [[c, false] as const, [c, true] as const])) {
    it(`${c.name}: after every call${alone ? ' alone' : ', alone or batched'}, the key lives until its state is fresh`, async () => {
      const prefix = `ttl-${alone ? 'alone-' : ''}${c.name}`;
      const limiter = c.make(redis, prefix);
      // The same key in fleet mode: blocks of 4, each fetched by a lease alone.
      const leaser = c.make(redis, prefix, 4);
      const keys = limiter.redisKeys('k');
      // The key a call SETs: the state's, or (SlidingLog) its counters'.
      const key = keys[keys.length - 1]!;
      const next = seededRandom(c.name.length * 7919);
      let checked = 0;
      let firstUs = 0;
      let lastUs = 0;
      const sets = await countSets(redis, key, async () => {
        for (let step = 0; step < 300 || lastUs - firstUs < c.spanUs; step++) {
          const r = next();
          const permits = 1 + Math.floor(next() * 3);
          if (r < 0.45 || (alone && r >= 0.6)) {
            await (next() < 0.5 ? limiter.tryAcquire('k', permits) : limiter.consume('k', permits));
          } else if (r < 0.6) {
            await leaser.tryAcquire('k', permits);
          } else if (r < 0.85) {
            // One tick: the calls go as one batch (the shared script's batch form).
            const n = 2 + Math.floor(next() * 3);
            await Promise.all(Array.from({ length: n }, () => limiter.consume('k', permits)));
          } else {
            await limiter.refund('k', permits);
          }
          const [s0, us0, s1, us1, ...got] = (await redis.callBuffer(
            'EVAL',
            CHECK,
            keys.length,
            ...keys,
          )) as [Buffer, Buffer, Buffer, Buffer, ...(Buffer | null | number)[]];
          const t0 = Number(s0) * 1e6 + Number(us0);
          const t1 = Number(s1) * 1e6 + Number(us1);
          if (firstUs === 0) firstUs = t0;
          lastUs = t1;
          const value = got[0] as Buffer | null;
          const pttls = keys.map((_, i) => got[2 * i + 1] as number);
          if (value === null) {
            // No state: none of its keys is left.
            expect([step, pttls]).toEqual([step, keys.map(() => -2)]);
            continue;
          }
          const endUs = c.endUs(value);
          for (const pttl of pttls) {
            // PTTL counts from Redis's ms clock at its own moment, between t0 and t1.
            const expiresLeastMs = Math.floor(t0 / 1000) + pttl;
            const expiresMostMs = Math.floor(t1 / 1000) + pttl;
            // A TTL (-1: none) reaching the state's end; 0 for a key in its last ms.
            expect([step, pttl >= 0, expiresLeastMs * 1000 >= endUs]).toEqual([step, true, true]);
            // No longer than the state needs, but for the step, the TTL's rounding up (2 ms),
            // the slack for Redis's cached clock, and the time between a script's TIME and its
            // write (loose: the host is shared).
            const over = c.stepUs + 2000 + REDIS_TIME_SLACK_MS * 1000 + 50_000;
            expect([step, expiresMostMs * 1000 - endUs <= over]).toEqual([step, true]);
          }
          checked++;
        }
      });
      expect(checked).toBeGreaterThan(100);
      // Both ways of writing ran: TTLs kept, and TTLs set when the state outlived them.
      expect(sets.keep).toBeGreaterThan(0);
      expect(sets.px).toBeGreaterThan(0);
      expect(sets.other).toBe(0);
      await leaser.close();
      await limiter.close();
    });
  }

  it('SlidingWindow with segments: a grant in a segment a refund emptied sets the TTL again', async () => {
    // Segments of 200 ms: a TTL kept where it had to grow falls short by far more than its
    // slack.
    const limiter = new red.SlidingWindow({
      redis,
      limit: 10,
      windowMs: 600,
      segments: 3,
      prefix: 'ttl-refunded',
    });
    const [key] = limiter.redisKeys('k') as [string];
    // Each step in the segment it means: just after a segment starts.
    const segmentStart = async () => {
      const [s, us] = await redis.time();
      const now = Number(s) * 1e6 + Number(us);
      await new Promise((r) => setTimeout(r, (200_000 - (now % 200_000)) / 1000 + 5));
    };
    await segmentStart();
    expect(await limiter.tryAcquire('k')).toBe(true);
    await segmentStart();
    expect(await limiter.tryAcquire('k')).toBe(true);
    // The current segment's count back to 0: the state ends a segment earlier, and so does
    // the TTL the refund sets. A grant in the same segment: it ends a segment later again.
    await limiter.refund('k');
    expect(await limiter.tryAcquire('k')).toBe(true);
    const [s0, us0, , , value, pttl] = (await redis.callBuffer('EVAL', CHECK, 1, key)) as [
      Buffer,
      Buffer,
      Buffer,
      Buffer,
      Buffer,
      number,
    ];
    const [, seg] = /^g200000\/3@0 (\d+) 3 0 0 1 1$/.exec(value.toString()) ?? [];
    expect(seg).toBeDefined();
    const endUs = (Number(seg) + 3) * 200_000;
    expect(
      (Math.floor((Number(s0) * 1e6 + Number(us0)) / 1000) + pttl) * 1000,
    ).toBeGreaterThanOrEqual(endUs);
    await limiter.close();
  });

  const HOT: [string, (redis: IoRedis) => Limiter][] = [
    // Fills in 10 s: a step of 1 s; spent far below its rate, it stays full.
    [
      'TokenBucket',
      (redis) => new red.TokenBucket({ redis, capacity: 1e6, refillPerSecond: 1e5, prefix: 'hot' }),
    ],
    [
      'LeakyBucket',
      (redis) => new red.LeakyBucket({ redis, capacity: 1e6, ratePerSecond: 1e5, prefix: 'hot' }),
    ],
    [
      'FixedWindow',
      (redis) => new red.FixedWindow({ redis, limit: 1e6, windowMs: 60_000, prefix: 'hot' }),
    ],
    [
      'SlidingWindow',
      (redis) => new red.SlidingWindow({ redis, limit: 4000, windowMs: 60_000, prefix: 'hot' }),
    ],
    // Segments of 15 s: the TTL is set when a grant starts a segment's count. (A prefix of
    // its own: the key's name is the two-window SlidingWindow's.)
    [
      'SlidingWindow with segments',
      (redis) =>
        new red.SlidingWindow({
          redis,
          limit: 4000,
          windowMs: 60_000,
          segments: 4,
          prefix: 'hot-segments',
        }),
    ],
    // Not SlidingLog: each grant is the newest entry, so its state ends later each time.
  ];
  for (const [name, make] of HOT) {
    it(`${name}: a hot key's calls alone set its TTL once per window or step, not per call`, async () => {
      const limiter = make(redis);
      const [key] = limiter.redisKeys('hot') as [string];
      let admitted = 0;
      const sets = await countSets(redis, key, async () => {
        for (let i = 0; i < 200; i++) if (await limiter.tryAcquire('hot')) admitted++;
      });
      expect(admitted).toBe(200);
      expect(sets.px + sets.keep).toBe(200);
      // The first call sets it; a window (60 s) or a step (1 s) may end during the run.
      expect(sets.px).toBeGreaterThanOrEqual(1);
      expect(sets.px).toBeLessThanOrEqual(3);
      await limiter.close();
    });
  }

  it("WarmingBucket: refusals alone keep the key's TTL, as its state ends where it did", async () => {
    const limiter = new red.WarmingBucket({
      redis,
      ratePerSecond: 1,
      warmupMs: 10_000,
      prefix: 'hot-warming',
    });
    const [key] = limiter.redisKeys('k') as [string];
    const sets = await countSets(redis, key, async () => {
      expect(await limiter.tryAcquire('k')).toBe(true);
      for (let i = 0; i < 50; i++) expect(await limiter.tryAcquire('k')).toBe(false);
    });
    // The grant sets the TTL; each refusal writes its count and keeps it.
    expect(sets).toEqual({ px: 1, keep: 50, other: 0 });
    await limiter.close();
  });
});
