import { expect, it } from 'vitest';
import { H_CONFIG } from '../../src/engine/layout.js';
import {
  Concurrency,
  FixedWindow,
  type Key,
  type Limiter,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import { startWorkers, waitForCount } from '../helpers/threads.js';

// Needs dist/ (npm run build): workers import the built package.
const THREADS = 3;

it('a reconfigure() on one thread applies to the next decision of every attach()ed copy in other threads', async () => {
  // The clock never moves: only reconfigure() changes what may be granted.
  const clock = new ManualClock();
  const cases: {
    limiter: Limiter & { reconfigure(o: object): void };
    key: Key | null;
    up: object;
    down: object;
  }[] = [
    {
      limiter: new FixedWindow({ limit: 2, windowMs: 1e6, clock }),
      key: 'k',
      up: { limit: 5 },
      down: { limit: 1 },
    },
    {
      limiter: new SlidingWindow({ limit: 2, windowMs: 1e6, clock }),
      key: 'k',
      up: { limit: 5 },
      down: { limit: 1 },
    },
    // Its log has room for limits up to 4 (the ring a limit of 3 gets).
    {
      limiter: new SlidingLog({ limit: 3, windowMs: 1e6, clock }),
      key: 'k',
      up: { limit: 4 },
      down: { limit: 1 },
    },
    {
      limiter: new TokenBucket({ capacity: 2, refillPerSecond: 1e-6, clock }),
      key: null,
      up: { capacity: 5 },
      down: { capacity: 1 },
    },
    {
      limiter: new Concurrency({ limit: 2, clock }),
      key: 'c',
      up: { limit: 5 },
      down: { limit: 1 },
    },
    {
      limiter: new Concurrency({ limit: 2, clock }),
      key: null,
      up: { limit: 5 },
      down: { limit: 1 },
    },
  ];
  const steps = 3;
  const ctl = new Int32Array(new SharedArrayBuffer(8));
  const counts = new Int32Array(new SharedArrayBuffer(4 * (steps + 1) * cases.length));
  const group = startWorkers<string>('reconfigure:steps', THREADS, {
    limiters: cases.map(({ limiter, key }) => ({ handle: limiter.handle, key })),
    ctl: ctl.buffer,
    counts: counts.buffer,
    steps,
    tries: 4,
  });
  const step = async (n: number) => {
    Atomics.store(ctl, 0, n);
    Atomics.notify(ctl, 0);
    await waitForCount(ctl, 1, n * THREADS);
    return cases.map((_, i) => counts[n * cases.length + i]);
  };
  try {
    // The limit among all threads; then what a raised limit adds; then nothing.
    expect(await step(1)).toEqual([2, 2, 3, 2, 2, 2]);
    for (const c of cases) c.limiter.reconfigure(c.up);
    expect(await step(2)).toEqual([3, 3, 1, 3, 3, 3]);
    for (const c of cases) c.limiter.reconfigure(c.down);
    expect(await step(3)).toEqual([0, 0, 0, 0, 0, 0]);
    await group.results;
  } finally {
    await group.terminate();
  }
  for (const [i, c] of cases.entries()) {
    expect(c.limiter.stats(c.key ?? undefined).admitted).toBe(i === 2 ? 4 : 5);
  }
});

for (const [name, make, key, options] of [
  [
    'TokenBucket',
    (clock: ManualClock) => new TokenBucket({ capacity: 100, refillPerSecond: 1e-6, clock }),
    'k',
    (n: number) => ({ capacity: n }),
  ],
  [
    'FixedWindow',
    (clock: ManualClock) => new FixedWindow({ limit: 100, windowMs: 1e6, clock }),
    null,
    (n: number) => ({ limit: n }),
  ],
  [
    'Concurrency',
    (clock: ManualClock) => new Concurrency({ limit: 100, clock }),
    'k',
    (n: number) => ({ limit: n }),
  ],
] as const) {
  it(`${name}: threads deciding while two threads change the limit 400 times are granted exactly the last limit`, async () => {
    // The clock never moves: nothing refills, every grant stays counted.
    const clock = new ManualClock();
    const limiter = make(clock) as Limiter & { reconfigure(o: object): void };
    limiter.reconfigure(options(1));
    const ctl = new Int32Array(new SharedArrayBuffer(8));
    // One worker reconfigures as the main thread does, at the same time.
    const changes = Array.from({ length: 200 }, (_, i) => options(i % 2 === 0 ? 30 : 70));
    const group = startWorkers<number>('reconfigure:hammer', THREADS + 1, {
      handle: limiter.handle,
      key,
      ctl: ctl.buffer,
      final: 1000,
      changes,
    });
    try {
      while (Atomics.load(group.arrivals, 0) < THREADS + 1) {
        await new Promise((r) => setTimeout(r, 1));
      }
      for (let i = 0; i < 200; i++) {
        limiter.reconfigure(options(i % 2 === 0 ? 60 : 20 + (i % 7)));
        if (i % 20 === 0) await new Promise((r) => setImmediate(r));
      }
      await waitForCount(ctl, 1, 1);
      limiter.reconfigure(options(100));
      Atomics.store(ctl, 0, 1);
      const granted = await group.results;
      // Never more than the limit, and no grant lost or counted twice on the way.
      expect(granted.reduce((a, b) => a + b, 0)).toBe(100);
      expect(limiter.stats(key ?? undefined)).toMatchObject({ admitted: 100, available: 0 });
    } finally {
      await group.terminate();
    }
  });
}

it('a reconfigure() whose thread died holding the options lock is taken over, never a hang', async () => {
  const clock = new ManualClock();
  const limiter = new FixedWindow({ limit: 2, windowMs: 1e6, clock });
  const { Worker } = await import('node:worker_threads');
  // A worker takes the options lock the way reconfigure() does, and dies before releasing it.
  const dead = new Worker(
    `const { workerData } = require('node:worker_threads');
     const i32 = new Int32Array(workerData.buffer);
     const v = Atomics.load(i32, workerData.word);
     Atomics.compareExchange(i32, workerData.word, v, v + 1);
     process.exit(0);`,
    { eval: true, workerData: { buffer: limiter.handle.buffer, word: H_CONFIG } },
  );
  await new Promise((resolve) => dead.once('exit', resolve));
  expect(Atomics.load(new Int32Array(limiter.handle.buffer), H_CONFIG) & 1).toBe(1);
  // Another thread's reconfigure() waits out the stale lock, then goes ahead.
  limiter.reconfigure({ limit: 3 });
  expect([1, 2, 3, 4].map(() => limiter.tryAcquire('k'))).toEqual([true, true, true, false]);
  expect(Atomics.load(new Int32Array(limiter.handle.buffer), H_CONFIG) & 1).toBe(0);
}, 20_000);
