import { describe, expect, it } from 'vitest';
import { Concurrency, FixedWindow, ManualClock, SlidingLog, TokenBucket } from '../../src/index.js';
import { startWorkers } from '../helpers/threads.js';

// The per-key counters of stats() are written with plain adds while the limiter's buffer is
// reachable from its own thread only, and with Atomics.add from the moment its handle is
// read. These tests cross that moment with real worker threads deciding on the same key at
// the same time as the thread that built the limiter, and count every decision.
const THREADS = 3;

const algorithms = [
  {
    name: 'TokenBucket',
    make: (clock: ManualClock) => new TokenBucket({ capacity: 4, refillPerSecond: 1, clock }),
  },
  {
    name: 'FixedWindow',
    make: (clock: ManualClock) => new FixedWindow({ limit: 4, windowMs: 1000, clock }),
  },
  {
    name: 'SlidingLog',
    make: (clock: ManualClock) => new SlidingLog({ limit: 4, windowMs: 1000, clock }),
  },
];

describe.each(algorithms)('$name counters', ({ make }) => {
  it('count every decision exactly, before and after the handle goes to other threads', async () => {
    const limiter = make(new ManualClock());
    // Alone: plain adds. Refunding each grant keeps admissions happening.
    let admitted = 0;
    let rejected = 0;
    const decide = () => {
      if (limiter.tryAcquire('k')) {
        admitted++;
        limiter.refund('k');
      } else {
        rejected++;
      }
    };
    for (let i = 0; i < 1000; i++) decide();
    // Take 5 and keep them, so that the threads below see refusals too.
    for (let i = 0; i < 5; i++) decide();
    expect(limiter.stats('k')).toMatchObject({ admitted, rejected });

    const group = startWorkers<{ admitted: number; rejected: number }>(
      'threads:counters',
      THREADS,
      { limiter: limiter.handle, key: 'k', attempts: 20_000 },
    );
    // This thread decides while the workers do: wait for them at their barrier, then
    // decide on.
    while (Atomics.load(group.arrivals, 0) < THREADS) decide();
    for (let i = 0; i < 20_000; i++) decide();
    const results = await group.results;
    const workersAdmitted = results.reduce((n, r) => n + r.admitted, 0);
    const workersRejected = results.reduce((n, r) => n + r.rejected, 0);
    expect(workersAdmitted + workersRejected).toBe(THREADS * 20_000);
    const stats = limiter.stats('k');
    expect(stats.admitted).toBe(admitted + workersAdmitted);
    expect(stats.rejected).toBe(rejected + workersRejected);
  });
});

describe('Concurrency counters', () => {
  it('count every acquire and refusal exactly across threads', async () => {
    const limiter = new Concurrency({ limit: 1 });
    expect(limiter.tryAcquire('k')).toBe(true);
    expect(limiter.tryAcquire('k')).toBe(false);
    limiter.release('k');
    expect(limiter.stats('k')).toMatchObject({ admitted: 1, rejected: 1 });
    const group = startWorkers<{ granted: number }>('threads:concurrency', THREADS, {
      limiter: limiter.handle,
      key: 'k',
      iterations: 20_000,
      inUse: new SharedArrayBuffer(8),
    });
    const granted = (await group.results).reduce((n, r) => n + r.granted, 0);
    const stats = limiter.stats('k');
    expect(stats.admitted).toBe(1 + granted);
    expect(stats.admitted + stats.rejected).toBe(2 + THREADS * 20_000);
    expect(stats.available).toBe(1);
  });

  // Until its handle is read a limiter is this thread's alone, and release() writes with
  // plain stores; what it holds then must stay held once other threads share it.
  it.each([
    ['narrow', 3],
    ['wide', 2 ** 31 - 1],
  ] as const)(
    '%s: permits taken before the handle was read stay held while threads contend, and come back on release',
    async (_, limit) => {
      const limiter = new Concurrency({ limit });
      expect(limiter.tryAcquire('k', limit - 1)).toBe(true);
      limiter.release('k', 1);
      expect(limiter.tryAcquire('k', 1)).toBe(true);
      const inUse = new SharedArrayBuffer(8);
      const group = startWorkers<{ granted: number }>('threads:concurrency', THREADS, {
        limiter: limiter.handle,
        key: 'k',
        iterations: 20_000,
        inUse,
      });
      const granted = (await group.results).reduce((n, r) => n + r.granted, 0);
      expect(granted).toBeGreaterThan(0);
      // The threads had the one permit left among them, never more.
      expect(new Int32Array(inUse)[1]).toBe(1);
      expect(limiter.stats('k').available).toBe(1);
      limiter.release('k', limit - 1);
      expect(limiter.stats('k').available).toBe(limit);
      expect(() => limiter.release('k')).toThrow(RangeError);
    },
  );
});
