import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/index.js';
import { Blocks } from '../../src/redis/fleet/blocks.js';
import { FixedWindow, SlidingLog, SlidingWindow } from '../../src/redis/index.js';
import { withRedisServer } from '../helpers/redis.js';

// Fleet mode never admits past a window's limit: blocks age out with the window their
// permits were counted in, a SlidingLog give-back drops the block's own entries, and a
// lease that lands after reset() is not kept. Each limiter made here stands for a process
// (blocks of its own); one ManualClock drives them all.

let redis: Redis;

withRedisServer((_server, r) => {
  redis = r;
});

/** How many of `n` one-permit decisions `limiter` admits, one after another. */
async function admitted(
  limiter: { tryAcquire(key: string): Promise<boolean> },
  n: number,
): Promise<number> {
  let yes = 0;
  for (let i = 0; i < n; i++) if (await limiter.tryAcquire('k')) yes++;
  return yes;
}

/** Lets replies already sent land (a lease taken ahead is not awaited by anyone). */
async function landed(limiter: { stats(key: string): Promise<unknown> }): Promise<void> {
  await limiter.stats('k');
  await new Promise((resolve) => setImmediate(resolve));
}

describe('fleet mode: windows never exceed their limit', () => {
  it('a FixedWindow block is not spent after the window it was counted in', async () => {
    const clock = new ManualClock(1_000_000); // window-aligned
    const o = { redis, clock, limit: 10, windowMs: 100, block: 5, prefix: 'x1' };
    const a = new FixedWindow(o);
    const b = new FixedWindow(o);
    clock.advance(99);
    expect((await a.consume('k')).allowed).toBe(true); // a block of 5 counted in window 0; 4 held
    clock.advance(1); // window 1
    const n = (await admitted(b, 10)) + (await admitted(a, 10));
    expect(n).toBe(10);
    await a.close();
    await b.close();
  });

  it('a FixedWindow block leased ahead is not spent after its window either', async () => {
    const clock = new ManualClock(1_000_000);
    const o = { redis, clock, limit: 100, windowMs: 100, block: 8, leaseAhead: true, prefix: 'x2' };
    const a = new FixedWindow(o);
    const b = new FixedWindow(o);
    clock.advance(90);
    // 1 + 5 spent: 2 of 8 left, a quarter, so the next 8 are leased ahead in window 0.
    expect(await admitted(a, 6)).toBe(6);
    await landed(a);
    clock.advance(10); // window 1
    const n = (await admitted(b, 100)) + (await admitted(a, 20));
    expect(n).toBe(100);
    await a.close();
    await b.close();
  });

  it('a SlidingWindow block ages out when its fixed window ends, and goes back to it', async () => {
    const clock = new ManualClock(1_000_000);
    const o = { redis, clock, limit: 10, windowMs: 100, block: 5, prefix: 'x3' };
    const a = new SlidingWindow(o);
    const b = new SlidingWindow(o);
    clock.advance(99);
    expect(await a.tryAcquire('k')).toBe(true); // 5 counted in window 0; 4 held
    clock.advance(51); // half of window 0 still weighs: 5 × 0.5
    expect(await admitted(b, 10)).toBe(7);
    // a's 4 go back to window 0 (its previous now, 1 × 0.5), then it leases in window 1:
    // 0.5 + 7 + 2 ≤ 10, as in memory with the one permit spent.
    expect(await admitted(a, 10)).toBe(2);
    await a.close();
    await b.close();
  });

  it('a segmented SlidingWindow block ages out when its segment ends', async () => {
    const clock = new ManualClock(1_000_000);
    const o = { redis, clock, limit: 20, windowMs: 100, segments: 4, block: 10, prefix: 'x4' };
    const a = new SlidingWindow(o);
    const b = new SlidingWindow(o);
    expect(await a.tryAcquire('k')).toBe(true); // 10 counted in segment 0; 9 held
    clock.advance(30); // segment 1
    expect(await admitted(a, 4)).toBe(4);
    // Segment 0 has left the window (10, 110]; the 4 spent at 30 ms are still in it.
    clock.advance(80);
    const late = await admitted(b, 20);
    expect(4 + late).toBeLessThanOrEqual(20);
    await a.close();
    await b.close();
  });
});

describe('fleet mode: a SlidingLog give-back', () => {
  it('drops the block’s own entries, not newer ones of other processes', async () => {
    const clock = new ManualClock(1_000_000);
    const o = { redis, clock, limit: 10, windowMs: 100, prefix: 'x5' };
    const a = new SlidingLog({ ...o, block: 5 });
    const b = new SlidingLog(o);
    const c = new SlidingLog(o);
    expect(await a.tryAcquire('k')).toBe(true); // 5 entries at 0 ms; 4 held
    clock.advance(50);
    expect(await admitted(b, 5)).toBe(5); // 5 entries at 50 ms
    clock.advance(10);
    await a.close(); // 4 of the entries at 0 ms go
    clock.advance(41); // (1, 101]: the entry at 0 ms has left, b's 5 are in
    expect(await admitted(c, 10)).toBe(5);
    const log = await redis.lrange(a.redisKeys('k')[0]!, 0, -1);
    expect(log.slice(5)).toEqual(Array(5).fill('1000050000'));
  });

  it('gives nothing back for entries that left the window', async () => {
    const clock = new ManualClock(1_000_000);
    const o = { redis, clock, limit: 10, windowMs: 100, prefix: 'x6' };
    const a = new SlidingLog({ ...o, block: 5 });
    const b = new SlidingLog(o);
    const c = new SlidingLog(o);
    expect(await a.tryAcquire('k')).toBe(true);
    clock.advance(50);
    expect(await admitted(b, 5)).toBe(5);
    clock.advance(51);
    await a.close(); // at 101 ms: its entries at 0 ms no longer count
    expect(await admitted(c, 10)).toBe(5);
  });
});

describe('fleet mode: a SlidingLog lease larger than the limit', () => {
  it('takes at most the limit, on an empty log and on one whose entries left the window', async () => {
    // A hot key's two leases ahead go as one lease of twice a block: more than the limit
    // when a block is more than half of it.
    const clock = new ManualClock(1_000_000);
    const log = new SlidingLog({ redis, clock, limit: 10, windowMs: 100, block: 8, prefix: 'x7' });
    const lease = (asked: number) =>
      (
        log as unknown as {
          call(op: string, tag: string, n: number, least: string): Promise<unknown>;
        }
      )
        .call('b', 'k', asked, '1')
        .then((reply) => (reply as unknown[])[5]);
    expect(await lease(16)).toBe(10);
    clock.advance(150); // every entry has left the window; the log still holds them
    expect(await lease(16)).toBe(10);
    expect(await redis.llen(log.redisKeys('k')[0]!)).toBe(10);
    await log.close();
  });
});

describe('fleet mode: reset()', () => {
  it('a block fetched before reset() and landing after it is not kept', async () => {
    const clock = new ManualClock(0);
    const o = { redis, clock, limit: 10, windowMs: 60_000, prefix: 'x7' };
    const a = new FixedWindow({ ...o, block: 5 });
    const b = new FixedWindow(o);
    const [first] = await Promise.all([a.consume('k'), a.reset('k')]);
    expect(first.allowed).toBe(true); // decided before the reset
    // As in memory: a fresh limit of 10 after the reset, for everyone.
    expect((await admitted(b, 10)) + (await admitted(a, 10))).toBe(10);
    await a.close();
  });

  it('a block leased ahead before reset() and landing after it is not kept', async () => {
    const clock = new ManualClock(0);
    const o = { redis, clock, limit: 100, windowMs: 60_000, prefix: 'x8' };
    const a = new FixedWindow({ ...o, block: 8, leaseAhead: true });
    const b = new FixedWindow(o);
    expect(await admitted(a, 6)).toBe(6); // the next 8 leased ahead, sent at once
    await a.reset('k');
    await landed(a);
    expect((await admitted(b, 100)) + (await admitted(a, 10))).toBe(100);
    await a.close();
  });
});

describe('fleet mode: late answers', () => {
  it('a refusal that lands after the clock moved into the next window is not cached there', async () => {
    const clock = new ManualClock(1_000_000);
    // No lease goes out ahead, so the 11th call fetches, and Redis refuses it.
    const a = new FixedWindow({ redis, clock, limit: 10, windowMs: 1000, block: 2, prefix: 'x7b' });
    expect(await admitted(a, 10)).toBe(10);
    const late = a.consume('k'); // refused in window 0 ...
    clock.advance(1000); // ... and answered in window 1
    expect(await late).toMatchObject({ allowed: false, reason: 'limited' });
    expect((await a.consume('k')).allowed).toBe(true);
    await a.close();
  });

  it('the permits of a lease from an older window never join a newer block', () => {
    const b = new Blocks(8);
    const s = b.slotOf('k');
    const e = b.epoch(s);
    // (permits, taken at, counting until, ages out at): µs of the script, local ms.
    expect(b.add(s, 5, 1000, 2000, 10_000, e)).toBe(true);
    expect(b.add(s, 3, 500, 1000, 9_000, e)).toBe(false); // a late lease of the window before
    expect(b.permits(s)).toBe(5);
    expect(b.take(s, 1, 9_500, b.owner(s))).toBe(true); // its age-out did not become the block's
    expect(b.add(s, 4, 2100, 3000, 11_000, e)).toBe(true); // a later window: the 4 left go
    expect(b.drain(s)).toEqual({ permits: 4, takenUs: 2100, tag: 'k' });
    // One window's leases share the older taking time and the earlier age-out.
    expect(b.add(s, 2, 2200, 3000, 12_000, e)).toBe(true);
    expect(b.add(s, 3, 2150, 3000, 11_500, e)).toBe(true);
    expect(b.take(s, 1, 11_600, b.owner(s))).toBe(false);
    expect(b.drain(s)).toEqual({ permits: 5, takenUs: 2150, tag: 'k' });
  });

  it('a call waiting for a fetch whose fetcher died takes it over when its claim lapses', async () => {
    const b = new Blocks(8);
    const s = b.slotOf('k');
    // A claim nobody will end: what a thread terminated mid-fetch leaves in the blocks.
    expect(b.claimFetch(s, 200)).toBeGreaterThan(0);
    expect(b.fetching(s)).toBe(true);
    await b.waitFetch(s, 60_000); // returns at the lapse, not after a minute
    expect(b.fetching(s)).toBe(false);
    expect(b.claimFetch(s, 200)).toBeGreaterThan(0);
  }, 10_000);
});
