import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import * as mem from '../../src/index.js';
import { ManualClock } from '../../src/index.js';
import * as red from '../../src/redis/index.js';
import { withRedisServer } from '../helpers/redis.js';

// Buckets past 10^6 per second count time in units under 1 µs (1 ns at 10^9 per second).
// Unix time in such units is past what a double holds exactly, so a Redis key of such a
// bucket counts from an origin of its own (src/redis/gcra.lua.ts). These tests run at
// Unix-like times on a ManualClock, where units since 1970 would be rounded to 256 ns.

const NOW_MS = 1_760_000_000_000; // November 2025
const CAPACITY = 1_000_000;
const RATE = 1e9;

/**
 * A stored state of a fast bucket: `saved`'s head (the layout byte and the options version
 * in 4 bytes, the writer's two settings), then tat, admitted, rejected, origin.
 */
function state(saved: Buffer, ...fields: number[]): Buffer {
  const b = Buffer.alloc(HEAD + 8 * fields.length);
  saved.copy(b, 0, 0, HEAD);
  for (let i = 0; i < fields.length; i++) b.writeDoubleLE(fields[i]!, HEAD + 8 * i);
  return b;
}

/** The bytes of a bucket's state before its fields (src/redis/state.lua.ts). */
const HEAD = 4 + 8 * 2;

describe('Redis buckets past 10^6 per second', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  const make = (prefix: string, clock: ManualClock) => ({
    r: new red.TokenBucket({ redis, capacity: CAPACITY, refillPerSecond: RATE, clock, prefix }),
    m: new mem.TokenBucket({ capacity: CAPACITY, refillPerSecond: RATE, clock }),
  });

  /** The one key a limiter with this prefix has written. */
  async function keyOf(prefix: string): Promise<string> {
    const keys = await redis.keys(`${prefix}*`);
    expect(keys).toHaveLength(1);
    return keys[0]!;
  }

  it('count nanoseconds exactly at Unix time, as the in-memory class does', async () => {
    const clock = new ManualClock(NOW_MS);
    const { r, m } = make('fast-exact', clock);
    for (const l of [r, m]) expect(await l.consume('k', CAPACITY)).toMatchObject({ allowed: true });
    for (const [advanceMs, expected] of [
      [0.001, 1000], // 1 µs: 1 000 permits at 10^9 per second
      [0.25, 250_000],
      [0.003, 3000],
    ] as const) {
      clock.advance(advanceMs);
      expect((await r.stats('k')).available).toBe(expected);
      expect(m.stats('k').available).toBe(expected);
      expect(await r.tryAcquire('k', expected)).toBe(true);
      expect(await r.tryAcquire('k')).toBe(false);
      expect(m.tryAcquire('k', expected)).toBe(true);
      expect(m.tryAcquire('k')).toBe(false);
    }
    // consume()'s refusal says when one permit comes: after 1 ns, so at the next whole µs
    // (the retry search's step, in memory as in Redis).
    const d = await r.consume('k');
    expect(d).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 0.001 });
    expect(d).toEqual(m.consume('k'));
  });

  it('a key kept busy for weeks moves its origin, keeping what is ahead (one unit stricter)', async () => {
    const clock = new ManualClock(NOW_MS);
    const { r } = make('fast-rebase', clock);
    expect(await r.tryAcquire('k')).toBe(true);
    const name = await keyOf('fast-rebase');
    // As if the key had been kept busy since an origin 2^42 µs (51 days) ago: 2^52 units
    // since it, and 400 000 units (0.4 ms) ahead of now.
    const nowUs = NOW_MS * 1000;
    const origin = Math.floor(nowUs / 2 ** 36) * 2 ** 36 - 2 ** 42;
    const tat = Math.floor((nowUs - origin) * 1000) + 400_000;
    const head = (await redis.getBuffer(name))!;
    await redis.set(name, state(head, tat, 7, 0, origin), 'PX', 60_000);
    // Capacity minus what is ahead, one unit stricter: 599 999.
    expect((await r.stats('k')).available).toBe(CAPACITY - 400_000 - 1);
    expect(await r.tryAcquire('k', CAPACITY - 400_000 - 1)).toBe(true);
    expect(await r.tryAcquire('k')).toBe(false);
    // The key now counts from a recent origin (a multiple of 2^36 µs at or before now).
    const saved = (await redis.getBuffer(name))!;
    expect(saved.length).toBe(HEAD + 8 * 4);
    const newOrigin = saved.readDoubleLE(HEAD + 24);
    expect(newOrigin).toBe(Math.floor(nowUs / 2 ** 36) * 2 ** 36);
    expect(saved.readDoubleLE(HEAD + 8)).toBe(7 + CAPACITY - 400_000 - 1); // admitted
    // And decides exactly from it: 1 µs later, 1 000 permits.
    clock.advance(0.001);
    expect(await r.tryAcquire('k', 1000)).toBe(true);
    expect(await r.tryAcquire('k')).toBe(false);
  });

  it('a key of a bucket past 10^6 per second read by a slower bucket on its prefix is an error naming both rates', async () => {
    const clock = new ManualClock(NOW_MS);
    const { r } = make('fast-kind', clock);
    expect(await r.tryAcquire('k')).toBe(true);
    // The key says who wrote it.
    const slow = new red.TokenBucket({
      redis,
      capacity: 10,
      refillPerSecond: 1e5,
      clock,
      prefix: 'fast-kind',
    });
    await expect(slow.stats('k')).rejects.toThrow(
      /fast-kind:TokenBucket:\{k\} holds a TokenBucket\/LeakyBucket state written with refillPerSecond 1000000000 .*; this limiter has refillPerSecond 100000 /,
    );
  });
});
