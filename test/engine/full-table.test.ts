import diagnosticsChannel from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import {
  Concurrency,
  chain,
  FixedWindow,
  ManualClock,
  SlidingLog,
  TABLE_FULL_CHANNEL,
  TokenBucket,
} from '../../src/index.js';

// Honest refusals when the key table is full, and memory a user can predict.

/** keys: 1 makes 2 stripes of 16 slots: 32 keyed slots, every key may use any of them. */
function fill(limiter: { tryAcquire(key: string): boolean }, prefix = 'k'): number {
  let inserted = 0;
  for (let i = 0; i < 32; i++) if (limiter.tryAcquire(`${prefix}${i}`)) inserted++;
  return inserted;
}

describe('a full table', () => {
  it("whenFull 'deny' (default): a refusal whose retryAfterMs is when a slot frees, exactly", () => {
    const clock = new ManualClock();
    // Each key's bucket is back to full 1000 ms after its one token was taken.
    const bucket = new TokenBucket({ capacity: 1, refillPerSecond: 1, keys: 1, maxKeys: 1, clock });
    expect(fill(bucket)).toBe(32);
    clock.advance(250);
    const refused = bucket.consume('new');
    expect(refused).toMatchObject({ allowed: false, reason: 'table-full', remaining: 0 });
    expect(refused.retryAfterMs).toBe(750);
    expect(bucket.tryAcquire('new')).toBe(false);
    clock.advance(749);
    expect(bucket.tryAcquire('new')).toBe(false);
    clock.advance(1);
    expect(bucket.tryAcquire('new')).toBe(true); // a slot was idle, and was reclaimed
  });

  it("whenFull 'allow': a new key is granted without state, and says so", () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({
      capacity: 1,
      refillPerSecond: 1,
      keys: 1,
      maxKeys: 1,
      whenFull: 'allow',
      clock,
    });
    expect(bucket.whenFull).toBe('allow');
    expect(fill(bucket)).toBe(32);
    for (let i = 0; i < 5; i++) {
      expect(bucket.consume('new')).toMatchObject({
        allowed: true,
        reason: 'table-full',
        retryAfterMs: 0,
      });
    }
    // Keys that have a slot are still limited.
    expect(bucket.consume('k0')).toMatchObject({ allowed: false, reason: 'limited' });
  });

  it('a held Concurrency table refuses with retryAfterMs Infinity (no slot frees by time alone)', () => {
    const c = new Concurrency({ limit: 1, keys: 1, maxKeys: 1 });
    expect(fill(c)).toBe(32);
    const refused = c.consume('new');
    expect(refused).toMatchObject({
      allowed: false,
      reason: 'table-full',
      retryAfterMs: Number.POSITIVE_INFINITY,
    });
  });

  it('counts new keys that found no slot, and publishes them on a diagnostics channel', () => {
    const bucket = new TokenBucket({ capacity: 1, refillPerSecond: 1, keys: 1, maxKeys: 1 });
    const seen: unknown[] = [];
    const onMessage = (message: unknown) => seen.push(message);
    fill(bucket);
    expect(bucket.tableStats()).toMatchObject({ slots: 32, inserts: 32, tableFull: 0 });
    bucket.tryAcquire('unseen-1'); // nobody listens yet
    diagnosticsChannel.subscribe(TABLE_FULL_CHANNEL, onMessage);
    try {
      bucket.tryAcquire('unseen-2');
      bucket.consume('unseen-3');
    } finally {
      diagnosticsChannel.unsubscribe(TABLE_FULL_CHANNEL, onMessage);
    }
    expect(seen).toEqual([
      { limiter: bucket, key: 'unseen-2', whenFull: 'deny' },
      { limiter: bucket, key: 'unseen-3', whenFull: 'deny' },
    ]);
    expect(bucket.tableStats().tableFull).toBe(3);
  });
});

describe('memory a user can predict', () => {
  it('byteLength tells the shared memory in use; it grows with keys', () => {
    const small = new FixedWindow({ limit: 10, windowMs: 1000, keys: 1000 });
    const large = new FixedWindow({ limit: 10, windowMs: 1000, keys: 100_000 });
    expect(small.byteLength).toBeGreaterThan(0);
    expect(small.byteLength % 64).toBe(0);
    // About 40 bytes per slot, 1.5 slots per key: between 50 and 80 bytes per key.
    const perKey = (large.byteLength - small.byteLength) / 99_000;
    expect(perKey).toBeGreaterThan(50);
    expect(perKey).toBeLessThan(80);
  });

  it('SlidingLog takes a ring per key in use: its memory follows active keys, not `keys`', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({
      limit: 1000,
      windowMs: 60_000,
      keys: 10_000,
      maxBytes: 2 ** 30,
      clock,
    });
    const ringBytes = 2048 * 16; // nextPow2(2 × limit) entries of 16 bytes
    // The table's 10 000 keys take under 2 MiB; the pool starts with room for 8 rings.
    const empty = log.byteLength;
    expect(empty).toBeLessThan(2 * 2 ** 20 + 8 * ringBytes + 64);
    expect(log.maxByteLength).toBeGreaterThan(15_000 * ringBytes);
    for (let k = 0; k < 100; k++) expect(log.tryAcquire(`client:${k}`)).toBe(true);
    // 101 rings (the default key's too), the pool grown by eighths: at most 1/8 unused.
    const used = log.byteLength - empty + 8 * ringBytes;
    expect(used).toBeGreaterThanOrEqual(101 * ringBytes);
    expect(used).toBeLessThanOrEqual(Math.ceil(101 * 1.125 + 1) * ringBytes);
    // Each key's ring is its own: exactly the limit each.
    for (let i = 0; i < 999; i++) log.tryAcquire('client:0');
    expect(log.tryAcquire('client:0')).toBe(false);
    expect(log.stats('client:1').available).toBe(999);
  });

  it('SlidingLog under key churn: a slot keeps its ring, so rings never outnumber slots', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 1000, windowMs: 1000, keys: 64, clock });
    const ringBytes = 2048 * 16;
    const slots = log.tableStats().slots;
    // 20 waves of 48 new keys, each wave idle before the next: 960 keys in all. (48 of 64
    // slots: with 60, a wave filled both stripes of some key, and the table grew, in 2% of
    // runs — random seeds. 0 in 2 000 runs with 48.)
    for (let wave = 0; wave < 20; wave++) {
      for (let k = 0; k < 48; k++) expect(log.tryAcquire(`wave${wave}:${k}`)).toBe(true);
      clock.advance(1000);
    }
    expect(log.tableStats().segments).toBe(1);
    // The pool's rings: at most one per slot and the default key's, plus its last eighth.
    const tableBytes = new SlidingLog({ limit: 1000, windowMs: 1000, keys: 64 }).byteLength;
    expect(log.byteLength - tableBytes).toBeLessThanOrEqual(
      Math.ceil((slots + 1) * 1.125 + 1) * ringBytes,
    );
  });

  it('refuses a configuration over maxBytes (256 MiB by default), saying how much it needs', () => {
    // 10 000 keys of a 1 000-permit log: 2 048 entries of 16 bytes per slot.
    expect(() => new SlidingLog({ limit: 1000, windowMs: 60_000, keys: 10_000 })).toThrow(
      /need 470\.\d MiB of shared memory, more than "maxBytes" allows \(256\.0 MiB\); lower "keys" or "limit", or raise "maxBytes"/,
    );
    expect(
      () => new SlidingLog({ limit: 1000, windowMs: 60_000, keys: 1000, maxKeys: 100_000 }),
    ).toThrow(
      /a table growing to 100000 keys reserves .* MiB of shared memory, more than "maxBytes" allows \(256\.0 MiB\); lower "maxKeys" or "limit"/,
    );
    // Without maxKeys the ceiling is what the budget holds: the defaults always construct.
    const log = new SlidingLog({ limit: 1000, windowMs: 60_000 });
    expect(log.maxByteLength).toBeLessThanOrEqual(256 * 2 ** 20);
    expect(log.maxKeys).toBeGreaterThanOrEqual(log.keys);
    expect(log.byteLength).toBeLessThan(64 * 2 ** 20);
    expect(() => new TokenBucket({ capacity: 1, refillPerSecond: 1, maxBytes: 1000 })).toThrow(
      RangeError,
    );
    expect(
      () => new TokenBucket({ capacity: 1, refillPerSecond: 1, keys: 100_000, maxBytes: 2 ** 20 }),
    ).toThrow(/lower "keys", or raise "maxBytes"/);
  });

  it('rejects bad whenFull and maxBytes values, naming the option', () => {
    // @ts-expect-error: not a policy
    expect(() => new TokenBucket({ capacity: 1, refillPerSecond: 1, whenFull: 'maybe' })).toThrow(
      /option "whenFull" must be one of "deny", "allow"/,
    );
    expect(() => new TokenBucket({ capacity: 1, refillPerSecond: 1, maxBytes: 2 ** 40 })).toThrow(
      /option "maxBytes" must be an integer/,
    );
  });
});

describe('acquire() granted with no slot (whenFull: allow) holds nothing', () => {
  it('its lease gives nothing back, alone or in a chain', async () => {
    for (const inChain of [false, true]) {
      const limiter = new Concurrency({ limit: 1, keys: 16, maxKeys: 16, whenFull: 'allow' });
      const others: string[] = [];
      for (let i = 0; limiter.consume('x').reason !== 'table-full'; i++) {
        limiter.release('x');
        if (i > 10_000) throw new Error('the table never filled');
        const d = limiter.consume(`other${i}`);
        if (d.allowed && d.reason === undefined) others.push(`other${i}`);
      }
      const acquirer = inChain ? chain(limiter) : limiter;
      const slotless = await acquirer.acquire('x'); // let through: no slot, nothing taken
      for (const other of others) limiter.release(other);
      expect(limiter.tryAcquire('x')).toBe(true); // the key's only permit
      slotless.release();
      expect(limiter.tryAcquire('x')).toBe(false); // still held
      expect(limiter.stats('x').available).toBe(0);
    }
  });
});
