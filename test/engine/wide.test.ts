import { describe, expect, it } from 'vitest';
import {
  coldWord,
  hotWord,
  type Layout,
  QUEUE_WORDS,
  queueWord,
  rejectedWord,
  slotOfHotWord,
} from '../../src/engine/layout.js';
import {
  type AnyLimiter,
  attach,
  Concurrency,
  FixedWindow,
  LeakyBucket,
  ManualClock,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import { runWorkers } from '../helpers/threads.js';

// Wide limits: options past what the 32-bit state word holds choose a wide
// table, whose state is a 64-bit word changed by one 64-bit CAS. Time is a ManualClock,
// so every count is exact.

const MAX = 2 ** 31 - 1;
const DAY_MS = 86_400_000;
const THREADS = 4;

function admittedOf(limiter: AnyLimiter, key: string, attempts: number, permits = 1): number {
  let n = 0;
  for (let i = 0; i < attempts; i++) if (limiter.tryAcquire(key, permits)) n++;
  return n;
}

describe('the layout follows the options', () => {
  it.each([
    [
      'TokenBucket capacity',
      () => new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1 }),
      () => new TokenBucket({ capacity: 2 ** 24 + 1, refillPerSecond: 1 }),
    ],
    [
      'TokenBucket rate',
      () => new TokenBucket({ capacity: 10, refillPerSecond: 1e6 }),
      () => new TokenBucket({ capacity: 10, refillPerSecond: 1e6 + 1 }),
    ],
    [
      'FixedWindow window',
      () => new FixedWindow({ limit: 10, windowMs: 2 ** 30 }),
      () => new FixedWindow({ limit: 10, windowMs: 2 ** 30 + 1 }),
    ],
    [
      'SlidingWindow limit',
      () => new SlidingWindow({ limit: 4093, windowMs: 3_600_000 }),
      () => new SlidingWindow({ limit: 4094, windowMs: 3_600_000 }),
    ],
    [
      'Concurrency limit',
      () => new Concurrency({ limit: 2 ** 27 }),
      () => new Concurrency({ limit: 2 ** 27 + 1 }),
    ],
  ])('%s: past the narrow range, a line per three slots', (_, narrow, wide) => {
    const a = narrow();
    const b = wide();
    // Same keys (1024: 1536 slots), same everything else: a 32-bit table has four 16-byte
    // hot slots to a 64-byte line, a wide one three, with their rejected counters.
    const slots = 1536;
    expect(b.byteLength - a.byteLength).toBe((slots / 3) * 64 - slots * 16);
  });
});

describe("a wide table keeps every key's counters apart", () => {
  // A wide hot slot has room for `admitted` only; `rejected` lives after the line's three
  // slots (layout.ts). Every key gets counts of its own, in segment 0 and in segments the
  // table grew, next to the default key's.
  const CAP = 2 ** 25; // past 2^24: wide
  const admittedFor = (i: number) => CAP - i;
  const refusalsFor = (i: number) => (i % 4) + 1;
  const rejectedFor = (i: number) => refusalsFor(i) * (i + 1);

  function fill(tb: TokenBucket, keys: number): void {
    for (let i = -1; i < keys; i++) {
      const key = i < 0 ? undefined : `k${i}`;
      const n = i + 1; // the default key counts as 0
      expect(tb.tryAcquire(key, admittedFor(n))).toBe(true);
      // n tokens are left: n + 1 is refused.
      for (let r = 0; r < refusalsFor(n); r++) expect(tb.tryAcquire(key, n + 1)).toBe(false);
    }
  }

  function check(tb: TokenBucket, keys: number, zeroed = -2): void {
    const wrong: string[] = [];
    for (let i = -1; i < keys; i++) {
      const key = i < 0 ? undefined : `k${i}`;
      const n = i + 1;
      const { admitted, rejected } = tb.stats(key);
      const want =
        i === zeroed
          ? { admitted: 0, rejected: 0 }
          : { admitted: admittedFor(n), rejected: rejectedFor(n) };
      if (admitted !== want.admitted || rejected !== want.rejected) {
        wrong.push(`${key}: ${admitted}/${rejected}, want ${want.admitted}/${want.rejected}`);
      }
    }
    expect(wrong).toEqual([]);
  }

  it("lays every slot's rejected word in its own line, apart from every other word", () => {
    // A wide limiter of 16 keys growing to 16 × 2^6: seven segments. Its table (what
    // stats(), reset() and a refused acquire() count through) finds the words
    // rejectedWord() does.
    const tb = new TokenBucket({ capacity: 2 ** 25, refillPerSecond: 1, keys: 16, maxKeys: 1024 });
    const { layout, table } = tb as unknown as {
      layout: Layout;
      table: { rejectedWord(w: number): number };
    };
    expect(layout.wide).toBe(true);
    expect(layout.segments.length).toBe(7);
    const owner = new Map<number, string>();
    const claim = (word: number, what: string) => {
      expect(owner.get(word), `word ${word}: ${what}`).toBeUndefined();
      owner.set(word, what);
    };
    const last = layout.segments[layout.segments.length - 1]!;
    const slots = last.first + last.slots;
    for (let s = 0; s < slots; s++) {
      const w = hotWord(layout, s);
      for (let i = -1; i < 3; i++) claim(w + i, `slot ${s} hot ${i}`);
      for (let i = 0; i < QUEUE_WORDS; i++) claim(queueWord(layout, s) + i, `slot ${s} queue`);
      if (s > 0) for (let i = 0; i < 2; i++) claim(coldWord(layout, s) + i, `slot ${s} cold`);
    }
    for (let s = 0; s < slots; s++) {
      const w = hotWord(layout, s);
      expect(slotOfHotWord(layout, w)).toBe(s);
      const r = rejectedWord(layout, w);
      expect(table.rejectedWord(w)).toBe(r);
      claim(r, `slot ${s} rejected`);
      // One line per decision: the 64-byte line of the slot's ext and state words.
      expect(r >> 4, `slot ${s}`).toBe((w - 1) >> 4);
      expect(w >> 4, `slot ${s}`).toBe((w - 1) >> 4);
      // In the slot's own segment: it exists (and is zero) once the segment does.
      const k = layout.segments.findIndex((g) => s >= g.first && s < g.first + g.slots);
      const start = k <= 0 ? layout.lockBase : layout.segments[k - 1]!.endBytes / 4;
      const end = layout.segments[Math.max(k, 0)]!.endBytes / 4;
      expect(r >= start && r < end, `slot ${s}: word ${r} outside ${start}..${end}`).toBe(true);
    }
  });

  it('in segment 0 and in grown segments, and reset() zeroes one key only', () => {
    const clock = new ManualClock();
    // Refills one token in 11 days: time stands still under the ManualClock anyway.
    const tb = new TokenBucket({ capacity: CAP, refillPerSecond: 1e-6, keys: 16, clock });
    const keys = 300;
    fill(tb, keys);
    expect(tb.tableStats().segments).toBeGreaterThanOrEqual(4);
    check(tb, keys);
    tb.reset('k150');
    check(tb, keys, 150);
    tb.close();
  });

  it('counts a refusal by acquire() with no room to wait on the key it was for', async () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({ capacity: CAP, refillPerSecond: 1e-6, queueLimit: 0, clock });
    expect(tb.tryAcquire('a', CAP)).toBe(true);
    await expect(tb.acquire('a')).rejects.toThrow();
    expect(tb.stats('a')).toMatchObject({ admitted: CAP, rejected: 1 });
    expect(tb.stats('b')).toMatchObject({ admitted: 0, rejected: 0 });
    expect(tb.stats()).toMatchObject({ admitted: 0, rejected: 0 });
    tb.close();
  });
});

describe('TokenBucket and LeakyBucket, wide', () => {
  it('holds a capacity of 2^31 − 1 and takes it in permits of up to the capacity', () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({ capacity: MAX, refillPerSecond: 1, clock });
    expect(tb.tryAcquire('k', 2 ** 30)).toBe(true);
    expect(tb.tryAcquire('k', 2 ** 30)).toBe(false); // 2^30 − 1 left
    expect(tb.tryAcquire('k', 2 ** 30 - 1)).toBe(true);
    expect(tb.consume('k')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 1000 });
    expect(tb.tryAcquire('other', MAX)).toBe(true);
    expect(tb.tryAcquire('other')).toBe(false);
    expect(() => tb.tryAcquire('k', MAX + 1)).toThrow(RangeError);
  });

  it('refills at 10^9 per second exactly: 10^6 per millisecond, none early', () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({ capacity: 2e9, refillPerSecond: 1e9, clock });
    expect(tb.tryAcquire('k', 2e9)).toBe(true);
    clock.advance(1);
    expect(tb.stats('k').available).toBe(1e6);
    expect(tb.tryAcquire('k', 1e6 + 1)).toBe(false);
    expect(tb.tryAcquire('k', 1e6)).toBe(true);
    expect(tb.tryAcquire('k')).toBe(false);
    // The next permit is due in 1 ns: rounded up to the microsecond.
    expect(tb.consume('k').retryAfterMs).toBe(0.001);
    clock.advance(0.001);
    expect(admittedOf(tb, 'k', 5000)).toBe(1000);
  });

  it('stays exact after 200 days of uptime at 10^9 per second (time in units past 2^53)', () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({ capacity: 10, refillPerSecond: 1e9, clock });
    for (const days of [1, 104, 105, 200]) {
      clock.set(days * DAY_MS);
      expect(admittedOf(tb, `day${days}`, 100)).toBe(10);
      // The bucket of a key used the time before is full again, not carried over.
      expect(admittedOf(tb, 'every time', 100)).toBe(10);
      clock.advance(0.001); // 1 µs: 1000 tokens, capped at 10
      expect(admittedOf(tb, `day${days}`, 100)).toBe(10);
    }
  });

  it('reads a key idle for 30 days (longer than its TAT field spans) as full', () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({ capacity: 1000, refillPerSecond: 2e8, clock });
    expect(admittedOf(tb, 'k', 2000)).toBe(1000);
    clock.advance(30 * DAY_MS);
    expect(admittedOf(tb, 'k', 2000)).toBe(1000);
  });

  it('refills at 10^-6 per second with a capacity of 2^31 − 1', () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({ capacity: MAX, refillPerSecond: 1e-6, clock });
    expect(tb.tryAcquire('k', MAX)).toBe(true);
    expect(tb.consume('k')).toMatchObject({ allowed: false, retryAfterMs: 1e9 });
    clock.advance(1e9 - 1);
    expect(tb.tryAcquire('k')).toBe(false);
    clock.advance(1);
    expect(tb.tryAcquire('k')).toBe(true);
  });

  // A wide bucket keeps its TAT in units modulo 2^52, so a grant's new TAT may be any
  // integer there: 2^32 too, once the value that meant "refused".
  it.for([
    [
      'TokenBucket',
      (clock: ManualClock) => new TokenBucket({ capacity: 1000, refillPerSecond: 1e9, clock }),
    ],
    [
      'LeakyBucket',
      (clock: ManualClock) => new LeakyBucket({ capacity: 1000, ratePerSecond: 1e9, clock }),
    ],
  ] as const)('%s grants a request whose new TAT is 2^32 units', ([, make]) => {
    const clock = new ManualClock();
    const bucket = make(clock);
    // 1 unit = 1 ns from the limiter's epoch (the clock's 0): 4 294 967 000 units now, and
    // 296 permits take the TAT to exactly 2^32.
    clock.advance(4294.967);
    expect(bucket.tryAcquire('k', 296)).toBe(true);
    expect(bucket.stats('k')).toMatchObject({ admitted: 296, rejected: 0 });
    expect(bucket.consume('other', 296)).toMatchObject({ allowed: true });
  });

  it('gives refunds back (never above the capacity) and resets', () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({ capacity: 2 ** 30, refillPerSecond: 5e6, clock });
    expect(tb.tryAcquire('k', 2 ** 30)).toBe(true);
    tb.refund('k', 2 ** 29);
    expect(tb.stats('k').available).toBe(2 ** 29);
    tb.refund('k', 2 ** 30);
    expect(tb.stats('k').available).toBe(2 ** 30);
    expect(tb.tryAcquire('k', 2 ** 30)).toBe(true);
    tb.reset('k');
    expect(tb.stats('k')).toEqual({ available: 2 ** 30, queued: 0, admitted: 0, rejected: 0 });
  });

  it('LeakyBucket at 10^8 per second admits only when drained, and serves waiters in order', async () => {
    const clock = new ManualClock();
    const lb = new LeakyBucket({ capacity: 2 ** 25, ratePerSecond: 1e8, clock });
    expect(lb.tryAcquire('k', 2 ** 25)).toBe(true);
    expect(lb.tryAcquire('k')).toBe(false);
    const drainMs = (2 ** 25 / 1e8) * 1000; // 335.54432 ms
    expect(lb.consume('k').retryAfterMs).toBeCloseTo(drainMs, 2);
    const order: number[] = [];
    const waiters = [1, 2, 3].map((i) => lb.acquire('k', 1e6).then(() => order.push(i)));
    // Drained: the first leaves; then one every 10 ms (10^6 at 10^8 per second), each from
    // the time the one before left — never two at once.
    clock.advance(Math.ceil(drainMs));
    await waiters[0];
    expect(order).toEqual([1]);
    clock.advance(10);
    await waiters[1];
    clock.advance(9.999);
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([1, 2]);
    clock.advance(0.001);
    await waiters[2];
    expect(order).toEqual([1, 2, 3]);
  });

  it('TokenBucket acquire() waits for 2^28 permits and is granted exactly when they are due', async () => {
    const clock = new ManualClock();
    const tb = new TokenBucket({
      capacity: 2 ** 29,
      refillPerSecond: 2 ** 29,
      queueLimit: 2 ** 29,
      clock,
    });
    expect(tb.tryAcquire('k', 2 ** 29)).toBe(true);
    let granted = false;
    const lease = tb.acquire('k', 2 ** 28).then(() => {
      granted = true;
    });
    clock.advance(499);
    await new Promise((r) => setImmediate(r));
    expect(granted).toBe(false);
    clock.advance(1);
    await lease;
    expect(granted).toBe(true);
    expect(tb.tryAcquire('k')).toBe(false);
  });
});

describe('FixedWindow and SlidingWindow, wide', () => {
  it('FixedWindow counts 2^31 − 1 per window of 2^31 ms', () => {
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: MAX, windowMs: 2 ** 31, clock });
    expect(fw.tryAcquire('k', 2 ** 30)).toBe(true);
    expect(fw.tryAcquire('k', 2 ** 30)).toBe(false);
    expect(fw.tryAcquire('k', 2 ** 30 - 1)).toBe(true);
    const d = fw.consume('k');
    expect(d.allowed).toBe(false);
    clock.advance(d.retryAfterMs);
    expect(fw.tryAcquire('k', MAX)).toBe(true);
  });

  it('FixedWindow counts a billion per day, and gives back a refund in its own window only', () => {
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: 1e9, windowMs: DAY_MS, clock });
    expect(fw.tryAcquire('k', 1e9)).toBe(true);
    fw.refund('k', 10);
    expect(admittedOf(fw, 'k', 20)).toBe(10);
    const takenUs = clock.nowUs();
    clock.advance(DAY_MS);
    expect(fw.tryAcquire('k', 1e9 - 5)).toBe(true);
    fw.refundTaken('k', 10, takenUs); // yesterday's permits: not today's to give back
    expect(admittedOf(fw, 'k', 20)).toBe(5);
  });

  it('SlidingWindow: 10 000 per hour, weighted across the boundary exactly', () => {
    const clock = new ManualClock();
    const sw = new SlidingWindow({ limit: 10_000, windowMs: 3_600_000, clock });
    clock.set(3_600_000 * 10); // at a window's start
    expect(admittedOf(sw, 'k', 12_000)).toBe(10_000);
    clock.advance(3_600_000 * 1.25); // previous window weighs 3/4: 7 500
    expect(sw.stats('k').available).toBe(2_500);
    expect(admittedOf(sw, 'k', 3_000)).toBe(2_500);
    clock.advance(3_600_000 * 2);
    expect(admittedOf(sw, 'k', 12_000)).toBe(10_000);
  });

  it('SlidingWindow: 2^31 − 1 per second, the previous window never under-counted', () => {
    const clock = new ManualClock();
    const sw = new SlidingWindow({ limit: MAX, windowMs: 1000, clock });
    clock.set(1_000_000);
    expect(sw.tryAcquire('k', MAX)).toBe(true);
    expect(sw.tryAcquire('k')).toBe(false);
    clock.advance(1500); // the full previous window weighs 1/2
    const available = sw.stats('k').available;
    // Exact would be ⌊MAX / 2⌋; the previous count is kept to 2^14 (rounded up).
    expect(available).toBeLessThanOrEqual(Math.floor(MAX / 2));
    expect(available).toBeGreaterThanOrEqual(Math.floor(MAX / 2) - 2 ** 14);
    expect(sw.tryAcquire('k', available)).toBe(true);
    expect(sw.tryAcquire('k')).toBe(false);
  });

  it('SlidingWindow with segments keeps its narrow range and says so', () => {
    expect(() => new SlidingWindow({ limit: MAX, windowMs: 3_600_000, segments: 60 })).toThrow(
      /"limit" must be an integer from 1 to \d+ with 60 segments/,
    );
  });
});

describe('Concurrency, wide', () => {
  it('holds up to 2^31 − 1 permits, and releases give them back', async () => {
    const c = new Concurrency({ limit: MAX });
    expect(c.tryAcquire('k', 2 ** 30)).toBe(true);
    expect(c.tryAcquire('k', 2 ** 30)).toBe(false);
    expect(c.tryAcquire('k', 2 ** 30 - 1)).toBe(true);
    expect(c.stats('k').available).toBe(0);
    c.release('k', 2 ** 30);
    expect(c.stats('k').available).toBe(2 ** 30);
    expect(() => c.release('k', MAX)).toThrow(
      /exceed the permits held for this key \(1073741823\)/,
    );
    const lease = await c.acquire('k', 2 ** 30);
    lease.release();
    c.release('k', 2 ** 30 - 1);
    expect(c.stats('k').available).toBe(MAX);
  });
});

describe('wide tables across threads and keys', () => {
  it.each([
    [
      'TokenBucket',
      () => new TokenBucket({ capacity: MAX, refillPerSecond: 1e9, clock: new ManualClock() }),
    ],
    [
      'LeakyBucket',
      () => new LeakyBucket({ capacity: MAX, ratePerSecond: 1e9, clock: new ManualClock() }),
    ],
    [
      'FixedWindow',
      () => new FixedWindow({ limit: MAX, windowMs: 2 ** 31, clock: new ManualClock() }),
    ],
    [
      'SlidingWindow',
      () => new SlidingWindow({ limit: MAX, windowMs: 2 ** 31, clock: new ManualClock() }),
    ],
    ['Concurrency', () => new Concurrency({ limit: MAX, clock: new ManualClock() })],
  ])('%s: 4 threads taking 2^28 at a time get exactly what the limit holds', async (name, make) => {
    const limiter = make();
    const attempts = 2000;
    const permits = 2 ** 28;
    const results = await runWorkers<{ admitted: number }>('threads:hot-key', THREADS, {
      limiter: limiter.handle,
      key: 'hot',
      attempts,
      permits,
    });
    const admitted = results.reduce((a, r) => a + r.admitted, 0);
    // LeakyBucket admits only a drained bucket: one call while time stands still.
    expect(admitted).toBe(name === 'LeakyBucket' ? 1 : Math.floor(MAX / permits));
    const stats = limiter.stats('hot');
    expect(stats.admitted).toBe(admitted * permits);
    expect(stats.available).toBe(name === 'LeakyBucket' ? 0 : MAX - admitted * permits);
  });

  it.each([
    [
      'TokenBucket',
      () => new TokenBucket({ capacity: 5, refillPerSecond: 1e9, clock: new ManualClock() }),
    ],
    [
      'FixedWindow',
      () => new FixedWindow({ limit: 5, windowMs: 2 ** 31, clock: new ManualClock() }),
    ],
    ['Concurrency', () => new Concurrency({ limit: 2 ** 27 + 5, clock: new ManualClock() })],
  ])(
    '%s: counts every permit exactly while 4 threads take and refund on one key',
    async (_, make) => {
      const limiter = make();
      const perThread = 20_000;
      const results = await runWorkers<{ admitted: number; rejected: number }>(
        'threads:counters',
        THREADS,
        { limiter: limiter.handle, key: 'k', attempts: perThread },
      );
      const admitted = results.reduce((a, r) => a + r.admitted, 0);
      const rejected = results.reduce((a, r) => a + r.rejected, 0);
      expect(admitted + rejected).toBe(THREADS * perThread);
      const stats = limiter.stats('k');
      expect({ admitted: stats.admitted, rejected: stats.rejected }).toEqual({
        admitted,
        rejected,
      });
      // Every permit went back: the key is as available as one never used.
      expect(stats.available).toBe(limiter.stats('never-used').available);
    },
  );

  it('4 threads on 3000 keys of a wide FixedWindow: each key exactly its limit', async () => {
    const keys = 3000;
    const limit = 3;
    const limiter = new FixedWindow({ limit, windowMs: 2 ** 31, keys, clock: new ManualClock() });
    const results = await runWorkers<{ admitted: Int32Array; tableFull: number }>(
      'threads:many-keys',
      THREADS,
      { limiter: limiter.handle, keys, rounds: 5 },
    );
    expect(results.map((r) => r.tableFull)).toEqual([0, 0, 0, 0]);
    const wrong: string[] = [];
    for (let k = 0; k < keys; k++) {
      let n = 0;
      for (const r of results) n += r.admitted[k]!;
      if (n !== limit) wrong.push(`key:${k} admitted ${n}`);
    }
    expect(wrong).toEqual([]);
  });

  it('reclaims idle wide slots for new keys and never lets a new key inherit a state', () => {
    const clock = new ManualClock();
    // Room for 16 keys, no growth: 200 keys come and go one window at a time.
    const tb = new TokenBucket({
      capacity: 2 ** 25,
      refillPerSecond: 2 ** 25,
      keys: 16,
      maxKeys: 16,
      clock,
    });
    for (let round = 0; round < 20; round++) {
      for (let k = 0; k < 10; k++) {
        const key = `r${round}k${k}`;
        expect(tb.tryAcquire(key, 2 ** 25)).toBe(true);
        expect(tb.tryAcquire(key)).toBe(false);
      }
      clock.advance(1000); // every bucket is full again: its slot is idle
    }
    const stats = tb.tableStats();
    expect(stats.reclaims).toBeGreaterThan(0);
    expect(stats.tableFull).toBe(0);
  });

  it('attach() opens the wide table with the same state', () => {
    const clock = new ManualClock();
    const sw = new SlidingWindow({ limit: 50_000, windowMs: 60_000, clock });
    expect(sw.tryAcquire('k', 49_999)).toBe(true);
    const other = attach(sw.handle);
    expect(other.tryAcquire('k', 2)).toBe(false);
    expect(other.tryAcquire('k', 1)).toBe(true);
    expect(sw.tryAcquire('k')).toBe(false);
  });
});

describe('bad input past the wide ranges', () => {
  it.each([
    [() => new TokenBucket({ capacity: 2 ** 31, refillPerSecond: 1 }), /"capacity".*2147483647/],
    [() => new TokenBucket({ capacity: 1, refillPerSecond: 1.0001e9 }), /"refillPerSecond"/],
    [() => new TokenBucket({ capacity: 1, refillPerSecond: 0.9e-6 }), /"refillPerSecond"/],
    [() => new LeakyBucket({ capacity: 2 ** 31, ratePerSecond: 1 }), /"capacity"/],
    [() => new FixedWindow({ limit: 2 ** 31, windowMs: 1000 }), /"limit".*2147483647/],
    [() => new FixedWindow({ limit: 1, windowMs: 2 ** 31 + 1 }), /"windowMs"/],
    [() => new SlidingWindow({ limit: 2 ** 31, windowMs: 1000 }), /"limit"/],
    // Under 1 ms a window keeps the narrow range.
    [
      () => new FixedWindow({ limit: 100_000, windowMs: 0.5 }),
      /"limit" must be an integer from 1 to \d+/,
    ],
    [() => new Concurrency({ limit: 2 ** 31 }), /"limit".*2147483647/],
  ])('%#: a RangeError naming the option', (make, message) => {
    expect(make).toThrow(RangeError);
    expect(make).toThrow(message);
  });
});
