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
