import { describe, expect, it } from 'vitest';
import {
  type AnyLimiter,
  Concurrency,
  FixedWindow,
  LeakyBucket,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import { runWorkers, startWorkers, waitForCount } from '../helpers/threads.js';

// Real worker threads on one shared limiter. Time is a frozen ManualClock unless a test
// moves it, so every count below is exact. 4 threads on this 2-core machine: more threads
// than cores, so the OS preempts them at arbitrary instructions.
const THREADS = 4;
// Longer than any of the limiters below takes to return to its initial state
// (TokenBucket: capacity 5 at 1 token/s = 5 s; windows: 1 s, two of them for SlidingWindow).
const IDLE_MS = 10_000;

interface Algorithm {
  name: string;
  make: (options: {
    limit: number;
    clock: ManualClock;
    keys?: number;
    maxKeys?: number;
  }) => AnyLimiter;
  /** Permits a fresh key grants while time stands still. */
  frozenBurst: (limit: number) => number;
}

const algorithms: Algorithm[] = [
  {
    name: 'TokenBucket',
    make: ({ limit, ...rest }) => new TokenBucket({ capacity: limit, refillPerSecond: 1, ...rest }),
    frozenBurst: (limit) => limit,
  },
  {
    name: 'LeakyBucket',
    make: ({ limit, ...rest }) => new LeakyBucket({ capacity: limit, ratePerSecond: 1, ...rest }),
    // Admits only when the bucket has drained: one request while time stands still.
    frozenBurst: () => 1,
  },
  {
    name: 'FixedWindow',
    make: (options) => new FixedWindow({ windowMs: 1000, ...options }),
    frozenBurst: (limit) => limit,
  },
  {
    name: 'SlidingWindow',
    make: (options) => new SlidingWindow({ windowMs: 1000, ...options }),
    frozenBurst: (limit) => limit,
  },
  {
    name: 'SlidingLog',
    make: (options) => new SlidingLog({ windowMs: 1000, ...options }),
    frozenBurst: (limit) => limit,
  },
  {
    name: 'Concurrency',
    make: (options) => new Concurrency(options),
    frozenBurst: (limit) => limit,
  },
];

const byName = (...names: string[]) => algorithms.filter((a) => names.includes(a.name));

function sum(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

/** Per-key totals of the workers' per-key admission arrays. */
function totalsPerKey(perThread: readonly Int32Array[], keys: number): number[] {
  const totals = new Array<number>(keys).fill(0);
  for (const admitted of perThread) for (let k = 0; k < keys; k++) totals[k]! += admitted[k]!;
  return totals;
}

function admittedOf(limiter: AnyLimiter, key: string | undefined, attempts: number): number {
  let n = 0;
  for (let i = 0; i < attempts; i++) if (limiter.tryAcquire(key)) n++;
  return n;
}

describe('runWorkers (test helper)', () => {
  it('releases no worker from the start barrier until every worker has arrived', async () => {
    const passed = new SharedArrayBuffer(4);
    const results = await runWorkers<{
      index: number;
      passedBefore: number;
      arrivedAfter: number;
    }>('threads:barrier-probe', THREADS, { passed });
    expect(results.map((r) => r.index)).toEqual([0, 1, 2, 3]);
    // Nobody had passed the barrier when the last worker reached it...
    expect(results.map((r) => r.passedBefore)).toEqual([0, 0, 0, 0]);
    // ...and every worker passed it having seen all arrivals.
    expect(results.map((r) => r.arrivedAfter)).toEqual([4, 4, 4, 4]);
    expect(new Int32Array(passed)[0]).toBe(THREADS);
  });

  it.each([
    ['throws', 'throw', /worker 0 failed on purpose/],
    ['exits with a non-zero code', 'exit', /worker 0 exited with code 3/],
    ['exits without posting a result', 'silent', /worker 0 exited without a result/],
  ])('rejects when a worker %s, and ends the workers left waiting', async (_, mode, message) => {
    const group = startWorkers('threads:fail', THREADS, { mode });
    await expect(group.results).rejects.toThrow(message);
    // Workers 1..3 were blocked at the barrier forever; the helper terminated them.
    expect(group.workers.map((w) => w.threadId)).toEqual([-1, -1, -1, -1]);
  });
});

describe.each(algorithms)('$name shared by 4 threads', (algorithm) => {
  const limit = 5;
  const attempts = 2000;
  const burst = algorithm.frozenBurst(limit);

  it.each([
    ['one named key', 'hot'],
    ['the default key', undefined],
  ])(
    'admits exactly its burst on %s out of 8000 concurrent attempts while time stands still',
    async (_, key) => {
      const limiter = algorithm.make({ limit, clock: new ManualClock() });
      const results = await runWorkers<{ admitted: number; rejected: number }>(
        'threads:hot-key',
        THREADS,
        { limiter: limiter.handle, key, attempts },
      );
      const admitted = sum(results.map((r) => r.admitted));
      const rejected = sum(results.map((r) => r.rejected));
      expect(admitted).toBe(burst);
      expect(rejected).toBe(THREADS * attempts - burst);
      expect(limiter.stats(key)).toEqual({ available: 0, queued: 0, admitted, rejected });
      // The main thread shares the same state: nothing left for it either.
      expect(limiter.tryAcquire(key)).toBe(false);
    },
  );
  it('counts every admitted and refused permit exactly while 4 threads take and refund permits on one key', async () => {
    const limiter = algorithm.make({ limit, clock: new ManualClock() });
    const perThread = 50_000;
    const results = await runWorkers<{ admitted: number; rejected: number }>(
      'threads:counters',
      THREADS,
      { limiter: limiter.handle, key: 'k', attempts: perThread },
    );
    const admitted = sum(results.map((r) => r.admitted));
    const rejected = sum(results.map((r) => r.rejected));
    expect(admitted + rejected).toBe(THREADS * perThread);
    const stats = limiter.stats('k');
    expect({ admitted: stats.admitted, rejected: stats.rejected }).toEqual({ admitted, rejected });
    // Every permit was refunded: the key is as available as a key never used.
    expect(stats.available).toBe(limiter.stats('never-used').available);
  });
});

describe.each(byName('TokenBucket', 'FixedWindow', 'SlidingWindow', 'SlidingLog', 'Concurrency'))(
  '$name with thousands of keys across 4 threads',
  (algorithm) => {
    it('admits every one of 3000 keys exactly its limit of 3, whatever order threads visit them in', async () => {
      const keys = 3000;
      const limit = 3;
      const rounds = 5;
      const limiter = algorithm.make({ limit, clock: new ManualClock(), keys });
      const results = await runWorkers<{ admitted: Int32Array; tableFull: number }>(
        'threads:many-keys',
        THREADS,
        { limiter: limiter.handle, keys, rounds },
      );
      expect(results.map((r) => r.tableFull)).toEqual([0, 0, 0, 0]);
      const totals = totalsPerKey(
        results.map((r) => r.admitted),
        keys,
      );
      const wrong = totals.flatMap((n, k) => (n === limit ? [] : [`key:${k} admitted ${n}`]));
      expect(wrong).toEqual([]);
      expect(sum(totals)).toBe(keys * limit);
      // Each key's own counters agree with what the threads saw.
      const attemptsPerKey = THREADS * rounds;
      const badStats: string[] = [];
      for (let k = 0; k < keys; k++) {
        const s = limiter.stats(`key:${k}`);
        if (s.admitted !== limit || s.rejected !== attemptsPerKey - limit || s.available !== 0) {
          badStats.push(`key:${k} ${JSON.stringify(s)}`);
        }
      }
      expect(badStats).toEqual([]);
    });
  },
);

describe('Concurrency across 4 threads', () => {
  it('never lets more than its limit of permits be held at once, and gets them all back', async () => {
    const limiter = new Concurrency({ limit: 3, clock: new ManualClock() });
    const inUse = new SharedArrayBuffer(8);
    const results = await runWorkers<{ granted: number }>('threads:concurrency', THREADS, {
      limiter: limiter.handle,
      key: 'k',
      iterations: 20_000,
      inUse,
    });
    const [now, max] = new Int32Array(inUse);
    expect(max).toBeLessThanOrEqual(3);
    expect(max).toBeGreaterThanOrEqual(1);
    expect(now).toBe(0);
    const granted = sum(results.map((r) => r.granted));
    const stats = limiter.stats('k');
    expect(stats.available).toBe(3);
    expect(stats.admitted).toBe(granted);
    expect(stats.admitted + stats.rejected).toBe(THREADS * 20_000);
    // All permits really are free again: exactly 3 can be taken now.
    expect(admittedOf(limiter, 'k', 5)).toBe(3);
  });
});

describe.each(byName('TokenBucket', 'FixedWindow', 'SlidingLog'))(
  '$name when threads are terminated mid-run',
  (algorithm) => {
    it('stays consistent and usable: once idle, every key gets exactly its limit and new keys still fit', async () => {
      const limit = 5;
      const clock = new ManualClock();
      const limiter = algorithm.make({ limit, clock, keys: 256, maxKeys: 256 });
      // Three generations of workers, each terminated while hammering the limiter
      // (inserting keys, reclaiming idle slots, refunding), at whatever instruction.
      for (let round = 0; round < 3; round++) {
        const running = new Int32Array(new SharedArrayBuffer(4));
        const group = startWorkers('threads:stress', THREADS, {
          limiter: limiter.handle,
          running: running.buffer,
          signalAfter: 5000 + 2000 * round,
        });
        // The stress workers never finish: `results` only settles if one fails.
        const failed = group.results.then(() => {
          throw new Error('stress workers ended on their own');
        });
        await Promise.race([waitForCount(running, 0, THREADS), failed]);
        await group.terminate();
      }
      clock.advance(IDLE_MS);
      expect(admittedOf(limiter, 'hot', 2 * limit)).toBe(limit);
      expect(limiter.stats('hot').available).toBe(0);
      const shared: string[] = [];
      for (let k = 0; k < 64; k++) {
        const n = admittedOf(limiter, `shared:${k}`, 2 * limit);
        if (n !== limit) shared.push(`shared:${k} admitted ${n}`);
      }
      expect(shared).toEqual([]);
      // Keys never seen before find slots (the workers' idle keys are reclaimed) and get
      // exactly their limit, with counters of their own.
      for (let k = 0; k < 32; k++) {
        const key = `after:${k}`;
        const decisions = Array.from({ length: limit + 2 }, () => limiter.consume(key));
        expect(decisions.map((d) => d.allowed)).toEqual([
          ...new Array(limit).fill(true),
          false,
          false,
        ]);
        expect(decisions.at(-1)?.reason).toBe('limited');
        expect(limiter.stats(key)).toEqual({
          available: 0,
          queued: 0,
          admitted: limit,
          rejected: 2,
        });
      }
    });
  },
);

describe.each(byName('TokenBucket', 'FixedWindow', 'SlidingLog'))(
  '$name with a full table across 4 threads',
  (algorithm) => {
    it('refuses new keys as table-full while every slot is active, reclaims idle slots later, and never over-admits a key', async () => {
      const limit = 3;
      const keys = 100;
      const clock = new ManualClock();
      const limiter = algorithm.make({ limit, clock, keys: 16, maxKeys: 16 });
      type Result = { admitted: Int32Array; tableFull: number; limited: number };

      const phase = async (prefix: string) => {
        const results = await runWorkers<Result>('threads:table-full', THREADS, {
          limiter: limiter.handle,
          prefix,
          keys,
          attemptsPerKey: limit + 2,
        });
        const totals = totalsPerKey(
          results.map((r) => r.admitted),
          keys,
        );
        // A key either never found a slot, or found one and then got exactly its limit
        // (each thread tries a key limit + 2 times in a row; an active slot is never
        // taken from its key while time stands still).
        const wrong = totals.flatMap((n, k) =>
          n === 0 || n === limit ? [] : [`${prefix}${k} admitted ${n}`],
        );
        expect(wrong).toEqual([]);
        const served = totals.filter((n) => n === limit).length;
        // The table holds at least the 16 keys it was sized for, and not all 100.
        expect(served).toBeGreaterThanOrEqual(16);
        expect(served).toBeLessThan(keys);
        expect(sum(results.map((r) => r.tableFull))).toBeGreaterThan(0);
        // Every attempt is accounted for: admitted, limited or table-full.
        expect(sum(totals) + sum(results.map((r) => r.tableFull + r.limited))).toBe(
          THREADS * keys * (limit + 2),
        );
        // Every slot is held by an active key now: one more new key is refused.
        expect(limiter.consume(`${prefix}one-more`)).toMatchObject({
          allowed: false,
          reason: 'table-full',
        });
        return served;
      };

      await phase('a:');
      // Every key goes idle; new keys take the idle slots over.
      clock.advance(IDLE_MS);
      await phase('b:');
    });
  },
);
