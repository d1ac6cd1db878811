import { describe, expect, it } from 'vitest';
import { attach, ManualClock, TokenBucket } from '../../src/index.js';

describe('the shared key table', () => {
  it('refuses a new key with reason "table-full" when every candidate slot is busy', () => {
    const clock = new ManualClock();
    // keys: 1 still makes 2 stripes of 16 slots: 32 keyed slots in all.
    const bucket = new TokenBucket({ capacity: 1, refillPerSecond: 1, keys: 1, maxKeys: 1, clock });
    let inserted = 0;
    for (let i = 0; i < 100; i++) if (bucket.tryAcquire(`k${i}`)) inserted++;
    expect(inserted).toBe(32);
    const refused = bucket.consume('another');
    expect(refused).toMatchObject({ allowed: false, reason: 'table-full', remaining: 0 });
    // Keys already in the table are not disturbed by the refusals.
    for (let i = 0; i < 100; i++) {
      const admittedCount = bucket.stats(`k${i}`).admitted;
      expect(admittedCount).toBeLessThanOrEqual(1);
    }
  });

  it('reclaims idle slots when space is needed, and each key still gets exactly its limit', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 2, refillPerSecond: 1, keys: 1, maxKeys: 1, clock });
    for (let round = 0; round < 5; round++) {
      // 32 fresh keys per round fill the table; the previous round's keys are idle (full
      // buckets) by now, so their slots are reclaimed.
      for (let i = 0; i < 32; i++) {
        const key = `r${round}:${i}`;
        expect(bucket.tryAcquire(key)).toBe(true);
        expect(bucket.tryAcquire(key)).toBe(true);
        expect(bucket.tryAcquire(key)).toBe(false);
      }
      clock.advance(2000);
    }
  });

  it('never lets a thread holding a stale slot index charge the key that took the slot over', () => {
    const clock = new ManualClock();
    const a = new TokenBucket({ capacity: 1, refillPerSecond: 1, keys: 1, maxKeys: 1, clock });
    const b = attach<TokenBucket>(a.handle); // its own key → slot cache, as another thread's
    // Forty rounds: more than the 16 values of a slot's generation, so a wrapped
    // generation would be caught too.
    for (let round = 0; round < 40; round++) {
      expect(a.tryAcquire('x')).toBe(true); // a caches x's slot
      clock.advance(1000); // x is idle again
      const fresh: string[] = [];
      for (let i = 0; i < 40; i++) {
        const key = `r${round}:${i}`;
        if (b.tryAcquire(key)) fresh.push(key); // fills every slot, reclaiming x's
      }
      expect(fresh.length).toBe(32);
      // a's cached index for x now points at another key's slot.
      const before = fresh.map((k) => b.stats(k).admitted);
      expect(a.consume('x')).toMatchObject({ allowed: false, reason: 'table-full' });
      expect(fresh.map((k) => b.stats(k).admitted)).toEqual(before);
      expect(before.every((n) => n === 1)).toBe(true);
      clock.advance(1000);
    }
  });

  it('holds 100 000 distinct keys at once when asked for 100 000', () => {
    const bucket = new TokenBucket({
      capacity: 1,
      refillPerSecond: 1,
      keys: 100_000,
      clock: new ManualClock(),
    });
    let n = 0;
    for (let i = 0; i < 100_000; i++) if (bucket.tryAcquire(i)) n++;
    expect(n).toBe(100_000);
    for (let i = 0; i < 100_000; i += 997) expect(bucket.tryAcquire(i)).toBe(false);
  });

  it("a thread's cache of key lookups holds a bounded amount of key text", () => {
    // Keys a client chooses may be 4 KB each: the per-thread key → slot cache must not keep
    // every one alive (50 000 of them held ~190 MB before it had a budget).
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1, keys: 1024 });
    const cache = (limiter as unknown as { table: { cache: Map<string, number> } }).table.cache;
    let most = 0;
    for (let i = 0; i < 6000; i++) {
      const key = `${i}:`.padEnd(4000, 'k');
      expect(limiter.tryAcquire(key)).toBe(true);
      expect(limiter.tryAcquire(key)).toBe(true); // answered from the cache or the table alike
      most = Math.max(most, cache.size);
    }
    expect(most * 4000).toBeLessThanOrEqual(2 ** 23);
    expect(most).toBeGreaterThan(1000); // a budget, not a cache turned off
    limiter.close();
  });
});
