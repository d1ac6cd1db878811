import { describe, expect, it } from 'vitest';
import { attach, FixedWindow, ManualClock, SlidingLog, TokenBucket } from '../../src/index.js';
import { startWorkers } from '../helpers/threads.js';

// A table that grows in place, up to maxKeys, under load.

describe('a growing key table', () => {
  it('grows from 16 keys to 20 000 active keys without refusing one, counting each exactly', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({
      capacity: 3,
      refillPerSecond: 1,
      keys: 16,
      maxKeys: 50_000,
      clock,
    });
    const before = bucket.byteLength;
    for (let i = 0; i < 20_000; i++) expect(bucket.tryAcquire(`k${i}`)).toBe(true);
    const t = bucket.tableStats();
    expect(t.segments).toBeGreaterThan(5);
    expect(t.slots).toBeGreaterThanOrEqual(20_000);
    expect(t.tableFull).toBe(0);
    expect(bucket.byteLength).toBeGreaterThan(before);
    expect(bucket.byteLength).toBeLessThanOrEqual(bucket.maxByteLength);
    // Every key kept its own state through every growth.
    for (let i = 0; i < 20_000; i += 97) {
      expect(bucket.stats(`k${i}`)).toMatchObject({ admitted: 1, available: 2 });
      expect(bucket.tryAcquire(`k${i}`, 2)).toBe(true);
      expect(bucket.tryAcquire(`k${i}`)).toBe(false);
    }
  });

  it('another thread attached before the growth sees the grown table', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 2, windowMs: 1000, keys: 8, maxKeys: 4096, clock });
    const other = attach<SlidingLog>(log.handle);
    for (let i = 0; i < 2000; i++) expect(log.tryAcquire(`k${i}`, 2)).toBe(true);
    for (let i = 0; i < 2000; i += 13) {
      expect(other.tryAcquire(`k${i}`)).toBe(false); // full, in a segment added later
      expect(other.consume(`k${i}`).retryAfterMs).toBe(1000);
    }
    expect(other.tableStats().segments).toBe(log.tableStats().segments);
  });

  it('reclaims idle keys before it grows', () => {
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: 1, windowMs: 1000, keys: 32, maxKeys: 10_000, clock });
    for (let i = 0; i < 32; i++) expect(fw.tryAcquire(`a${i}`)).toBe(true);
    const before = fw.tableStats();
    clock.advance(1000); // every key idle: new keys take their slots
    for (let i = 0; i < 32; i++) expect(fw.tryAcquire(`b${i}`)).toBe(true);
    const after = fw.tableStats();
    expect(after.segments).toBe(before.segments);
    expect(after.reclaims).toBeGreaterThan(0);
  });

  it('stops at maxKeys: beyond it whenFull decides, with a finite retryAfterMs', () => {
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: 1, windowMs: 1000, keys: 32, maxKeys: 64, clock });
    let admitted = 0;
    for (let i = 0; i < 400; i++) if (fw.tryAcquire(`a${i}`)) admitted++;
    const full = fw.tableStats();
    expect(full.segments).toBe(2); // 32 + 32 keys: the ceiling
    expect(admitted).toBeGreaterThanOrEqual(64);
    expect(admitted).toBeLessThanOrEqual(full.slots);
    expect(full.tableFull).toBe(400 - admitted);
    const refused = fw.consume('one-more');
    expect(refused).toMatchObject({ allowed: false, reason: 'table-full' });
    expect(refused.retryAfterMs).toBe(1000); // when the window ends, every slot is idle
    expect(fw.tableStats().segments).toBe(2);
  });

  it('4 threads flood 10× `keys` new keys while hot keys are decided: no false refusal, exact hot counts', async () => {
    const limit = 7;
    const clock = new ManualClock();
    const bucket = new TokenBucket({
      capacity: limit,
      refillPerSecond: 1,
      keys: 1000,
      maxKeys: 100_000,
      clock,
    });
    const hotKeys = 16;
    const group = startWorkers<{ refused: number; hot: number[] }>('threads:flood', 4, {
      limiter: bucket.handle,
      floodKeys: 2500,
      hotKeys,
      hotTries: 2,
    });
    const results = await group.results;
    expect(results.map((r) => r.refused)).toEqual([0, 0, 0, 0]);
    for (let h = 0; h < hotKeys; h++) {
      const total = results.reduce((sum, r) => sum + r.hot[h]!, 0);
      expect(total).toBe(limit); // time stands still: exactly the capacity, in all
    }
    const t = bucket.tableStats();
    expect(t.tableFull).toBe(0);
    expect(t.inserts).toBe(10_000 + hotKeys);
    expect(t.segments).toBeGreaterThan(1);
    expect(bucket.byteLength).toBeLessThanOrEqual(bucket.maxByteLength);
    for (let i = 0; i < 2500; i += 101) {
      expect(bucket.stats(`flood:3:${i}`)).toMatchObject({ admitted: 1, available: limit - 1 });
    }
  });

  it('rejects maxKeys below keys, naming both', () => {
    expect(
      () => new TokenBucket({ capacity: 1, refillPerSecond: 1, keys: 100, maxKeys: 10 }),
    ).toThrow(/option "maxKeys" \(10\) must be at least "keys" \(100\)/);
  });
});
