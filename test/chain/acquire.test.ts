import { describe, expect, it, vi } from 'vitest';
import { Concurrency, chain, FixedWindow, ManualClock, TokenBucket } from '../../src/index.js';

describe('chain().acquire() and its deadline', () => {
  it('chain().acquire() gives its members one deadline: each waits only for what is left', async () => {
    let now = 1000;
    const spy = vi.spyOn(performance, 'now').mockImplementation(() => now);
    try {
      const asked: (number | undefined)[] = [];
      const member = (tookMs: number) => ({
        limit: 5,
        consume: () => ({
          allowed: true,
          remaining: 4,
          limit: 5,
          retryAfterMs: 0,
          resetAfterMs: 0,
        }),
        refund: () => {},
        acquire: async (_key?: string | number, _permits?: number, o?: { timeoutMs?: number }) => {
          asked.push(o?.timeoutMs);
          now += tookMs; // this member's wait
          return { release() {}, [Symbol.dispose]() {} };
        },
      });
      await chain(member(120), member(100), member(0)).acquire('k', 1, { timeoutMs: 300 });
      expect(asked).toEqual([300, 180, 80]);
      asked.length = 0;
      await chain(member(10)).acquire('k');
      expect(asked).toEqual([undefined]);
      await expect(chain(member(0)).acquire('k', 1, { timeoutMs: -1 })).rejects.toThrow(
        /chain\.acquire: option "timeoutMs" must be from 0/,
      );
    } finally {
      spy.mockRestore();
    }
  });
});

describe('chain().acquire() that fails gives each member its permits back once', () => {
  it('a Concurrency member, directly or in a nested chain, frees only what the chain took', async () => {
    for (const nested of [false, true]) {
      const clock = new ManualClock();
      const conc = new Concurrency({ limit: 5, clock });
      const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
      // queueLimit 0: an acquire() the window cannot serve at once fails with QueueFullError.
      const window = new FixedWindow({ limit: 2, windowMs: 1000, clock });
      expect(conc.tryAcquire('k', 3)).toBe(true); // another caller holds 3
      expect(window.tryAcquire('k', 2)).toBe(true); // the window is spent
      const both = nested ? chain(chain(conc, bucket), window) : chain(conc, bucket, window);
      await expect(both.acquire('k', 2)).rejects.toThrow(/queue/i);
      expect(conc.stats('k').available).toBe(2); // the other caller still holds its 3
      expect(conc.tryAcquire('k', 3)).toBe(false);
      expect(bucket.stats('k').available).toBe(10); // the bucket's 2 came back
    }
  });
});

describe('chain().acquire(): leases and give-backs', () => {
  it('takes from every member; its lease releases each member’s lease once, however often it is released', async () => {
    const clock = new ManualClock();
    const conc = new Concurrency({ limit: 2 });
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    let released = 0; // a member whose own lease counts every release it is asked for
    const counted = {
      limit: 5,
      consume: (key?: string | number, permits?: number) => bucket.consume(key, permits),
      refund: () => {},
      acquire: async () => ({
        release() {
          released++;
        },
        [Symbol.dispose]() {},
      }),
    };
    const lease = await chain(conc, bucket, counted).acquire('k');
    expect([conc.stats('k').available, bucket.stats('k').available]).toEqual([1, 4]);
    lease.release();
    expect(conc.stats('k').available).toBe(2);
    expect(conc.tryAcquire('k')).toBe(true); // someone else's permit now
    lease.release();
    lease[Symbol.dispose]();
    expect(released).toBe(1);
    expect(conc.stats('k').available).toBe(1); // theirs stays held
    expect(bucket.stats('k').available).toBe(4); // a rate limiter keeps what it granted
  });

  it('a member without acquire() is a TypeError naming it, and the members before it keep nothing', async () => {
    const clock = new ManualClock();
    const conc = new Concurrency({ limit: 2 });
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const noAcquire = {
      limit: 5,
      consume: (key?: string | number, permits?: number) => bucket.consume(key, permits),
      refund: (key?: string | number, permits?: number) => bucket.refund(key, permits),
    };
    await expect(chain(conc, bucket, noAcquire).acquire('k')).rejects.toThrow(
      /chain\.acquire: limiter 2 has no acquire\(\) method/,
    );
    expect(conc.stats('k').available).toBe(2);
    expect(bucket.stats('k').available).toBe(5);
  });

  it('an abort while a later member waits rejects with the abort, and the earlier members get their permits back', async () => {
    const clock = new ManualClock();
    const conc = new Concurrency({ limit: 2 });
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const spent = new FixedWindow({ limit: 1, windowMs: 1000, queueLimit: 1, clock });
    expect(spent.tryAcquire('k')).toBe(true);
    const controller = new AbortController();
    const waiting = chain(conc, bucket, spent).acquire('k', 1, { signal: controller.signal });
    await new Promise((resolve) => setImmediate(resolve));
    expect(spent.stats('k').queued).toBe(1); // the chain waits at its third member
    expect([conc.stats('k').available, bucket.stats('k').available]).toEqual([1, 4]);
    controller.abort();
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
    expect([conc.stats('k').available, bucket.stats('k').available]).toEqual([2, 5]);
    expect(spent.stats('k')).toMatchObject({ available: 0, queued: 0 });
  });
});
