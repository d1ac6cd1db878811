import type { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { monotonicClock } from '../../src/clock.js';
import { computeLayout, H_HOLDERS_LOST, THREAD_ENTRIES } from '../../src/engine/layout.js';
import { heartbeatStale } from '../../src/engine/queue.js';
import {
  attach,
  Concurrency,
  type LimiterHandle,
  MonotonicClock,
  QueueFullError,
} from '../../src/index.js';
import { scenarioWorker } from '../helpers/threads.js';

// Concurrency's holder records (who holds what, so that a dead thread's permits come back)
// at the edges: many threads, a grown table, permits handed from one thread to another.
// Tests import from src/ and the worker scenarios from dist/: `npm run build` first.

/** A worker's first message (or its error). */
function first(worker: Worker): Promise<unknown> {
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

/** A worker holding `permits` of `key` until told to release them (scenario holders:holder). */
async function holder(limiter: Concurrency, key: string | undefined, permits = 1): Promise<Worker> {
  const worker = scenarioWorker('holders:holder', {
    workerData: { limiter: limiter.handle, key, permits },
  });
  await first(worker);
  return worker;
}

/**
 * Waits until the dead-holder sweep has run since the workers terminated so far: a holder of
 * another key, terminated now, has its permit back only after a sweep over every record.
 */
async function sweptSince(limiter: Concurrency): Promise<void> {
  const marker = await holder(limiter, 'marker', limiter.limit);
  await marker.terminate();
  const lease = await limiter.acquire('marker', 1, { timeoutMs: 30_000 });
  lease.release();
}

describe.concurrent('Concurrency holder records', () => {
  it('serves 300 threads on one limiter: no grant is followed by a throw, every permit comes back', async ({
    expect,
  }) => {
    const threads = 300;
    const limiter = new Concurrency({ limit: 3 * threads, queueLimit: 10 });
    const workers: Worker[] = [];
    const replies: unknown[] = [];
    // Started a batch at a time (a crowd of thread starts at once starves the machine);
    // each stays alive, holding its three permits, so its thread table entry stays live.
    for (let i = 0; i < threads; i += 25) {
      const batch = Array.from({ length: Math.min(25, threads - i) }, () => {
        const worker = scenarioWorker('holders:crowd-holder', {
          workerData: { limiter: limiter.handle, key: 'k' },
          resourceLimits: { maxOldGenerationSizeMb: 16 },
        });
        workers.push(worker);
        return first(worker);
      });
      replies.push(...(await Promise.all(batch)));
    }
    expect(replies.filter((r) => (r as { held?: number }).held !== 3)).toEqual([]);
    expect(limiter.stats('k').available).toBe(0);
    await Promise.all(
      workers.map((worker) => {
        const done = first(worker);
        worker.postMessage('release');
        return done;
      }),
    );
    expect(limiter.stats('k').available).toBe(3 * threads);
    await Promise.all(workers.map((w) => w.terminate()));
  }, 120_000);

  it(`with the thread table full (${THREAD_ENTRIES} live threads), grants stay counted and unrecorded; acquire() refuses to wait before taking anything`, async ({
    expect,
  }) => {
    const keys = 64;
    const maxWaiters = 16;
    const limiter = new Concurrency({ limit: 3, queueLimit: 3, keys, maxWaiters });
    const i32 = new Int32Array(limiter.handle.buffer); // shared: records are kept from now on
    const slots = computeLayout(keys, 0, 1, 0).slots + 1;
    const { threadBase } = computeLayout(keys, 0, maxWaiters, slots * 2);
    // Every entry taken by a live thread: a token and a heartbeat kept fresh, as threads
    // write them (a thousand real threads would take gigabytes).
    const beat = () => {
      const now = Math.floor(monotonicClock.nowUs() / 1000) & 0x7fffffff;
      for (let t = 0; t < THREAD_ENTRIES; t++) {
        Atomics.store(i32, threadBase + 2 * t, 1001 + 2 * t);
        Atomics.store(i32, threadBase + 2 * t + 1, now);
      }
    };
    beat();
    const timer = setInterval(beat, 100);
    try {
      const lostBefore = Atomics.load(i32, H_HOLDERS_LOST);
      expect(limiter.tryAcquire('k')).toBe(true);
      expect(limiter.consume('k').allowed).toBe(true);
      const lease = await limiter.acquire('k');
      expect(Atomics.load(i32, H_HOLDERS_LOST) - lostBefore).toBe(3);
      expect(limiter.stats('k').available).toBe(0);
      // Waiting needs an entry: refused, and nothing was taken for it.
      limiter.release('k');
      await expect(limiter.acquire('k', 2)).rejects.toThrow(QueueFullError);
      expect(limiter.stats('k').available).toBe(1);
      limiter.release('k');
      lease.release();
      expect(limiter.stats('k').available).toBe(3);
    } finally {
      clearInterval(timer);
      limiter.close();
    }
  });

  it('gives back a terminated thread’s permits on keys in every segment the table grew into', async ({
    expect,
  }) => {
    const count = 1000;
    const limiter = new Concurrency({ limit: 1, keys: 16, maxKeys: 2048, queueLimit: 1 });
    const worker = scenarioWorker('holders:many-keys-holder', {
      workerData: { limiter: limiter.handle, prefix: 'g', count },
    });
    await first(worker);
    const keys = Array.from({ length: count }, (_, i) => `g${i}`);
    expect(keys.filter((key) => limiter.stats(key).available === 0)).toHaveLength(count);
    await worker.terminate();
    // The last key's permit back (after HOLDER_DEAD_MS): the sweep has been over them all.
    const lease = await limiter.acquire(`g${count - 1}`, 1, { timeoutMs: 30_000 });
    lease.release();
    expect(keys.filter((key) => limiter.stats(key).available !== 1)).toEqual([]);
    limiter.close();
  }, 60_000);

  it('a permit handed to another thread comes back once: by the sweep when its taker dies, and the release of it then frees nothing', async ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 5, queueLimit: 5 });
    const others = await holder(limiter, 'k', 4); // another thread's four
    const taker = await holder(limiter, 'k'); // takes one and hands its work to this thread
    expect(limiter.stats('k').available).toBe(0);
    await taker.terminate();
    // The sweep (run by the other holder's heartbeat) gives the dead taker's permit back.
    const deadline = Date.now() + 30_000;
    while (limiter.stats('k').available === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(limiter.stats('k').available).toBe(1);
    const next = await holder(limiter, 'k'); // someone takes it
    expect(limiter.stats('k').available).toBe(0);
    // This thread's work is done: it releases the permit it was handed. Already given back:
    // nothing is freed, and the key still holds its limit of five, not four.
    limiter.release('k');
    expect(limiter.stats('k').available).toBe(0);
    expect(limiter.tryAcquire('k')).toBe(false);
    for (const worker of [others, next]) {
      const done = first(worker);
      worker.postMessage('release');
      await done;
    }
    expect(limiter.stats('k').available).toBe(5);
    // Nothing more to release.
    expect(() => limiter.release('k')).toThrow(RangeError);
    await Promise.all([others.terminate(), next.terminate()]);
    limiter.close();
  }, 60_000);

  it('a permit handed to another thread and released there before its taker dies is not given back again', async ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 5, queueLimit: 5 });
    const others = await holder(limiter, 'k', 4);
    const taker = await holder(limiter, 'k');
    limiter.release('k'); // the handed permit, released while its taker lives
    expect(limiter.stats('k').available).toBe(1);
    await taker.terminate();
    await sweptSince(limiter);
    expect(limiter.stats('k').available).toBe(1);
    const done = first(others);
    others.postMessage('release');
    await done;
    expect(limiter.stats('k').available).toBe(5);
    await others.terminate();
    limiter.close();
  }, 60_000);

  it('a handed permit released with handedOver by a thread that holds permits of its own on the key is not given back again when its taker dies', async ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 5, queueLimit: 5 });
    const others = await holder(limiter, 'k', 3);
    expect(limiter.tryAcquire('k')).toBe(true); // this thread's own permit, kept
    const taker = await holder(limiter, 'k'); // takes one and hands its work to this thread
    expect(limiter.stats('k').available).toBe(0);
    limiter.release('k', 1, { handedOver: true }); // the handed permit, not this thread's own
    expect(limiter.stats('k').available).toBe(1);
    await taker.terminate();
    await sweptSince(limiter);
    // Held: the other thread's three and this thread's own one. Exactly one more fits.
    expect(limiter.stats('k').available).toBe(1);
    expect(limiter.tryAcquire('k')).toBe(true);
    expect(limiter.tryAcquire('k')).toBe(false);
    limiter.release('k', 2);
    const done = first(others);
    others.postMessage('release');
    await done;
    expect(limiter.stats('k').available).toBe(5);
    expect(() => limiter.release('k')).toThrow(RangeError);
    await others.terminate();
    limiter.close();
  }, 60_000);

  it('release() refuses options it does not know, or a handedOver that is not a boolean, and releases nothing', ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 2 });
    expect(limiter.tryAcquire('k')).toBe(true);
    const bad: unknown[] = [null, 'yes', { handedOver: 'yes' }, { handed: true }];
    for (const options of bad) {
      expect(() => limiter.release('k', 1, options as { handedOver?: boolean })).toThrow(TypeError);
    }
    expect(() => limiter.release('k', 1, { handedOver: 'yes' } as never)).toThrow(/handedOver/);
    expect(limiter.stats('k').available).toBe(1);
    limiter.release('k', 1, {});
    expect(limiter.stats('k').available).toBe(2);
    limiter.close();
  });
});

// Concurrent: each test waits HOLDER_DEAD_MS of real time (heartbeats are real time).
describe.concurrent('a terminated worker thread gives back its Concurrency permits', () => {
  it('the dead thread’s permits come back within HOLDER_DEAD_MS; a live holder keeps its own', async ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 3, queueLimit: 3 });
    const start = (permits: number) => {
      const worker = scenarioWorker('holders:holder', {
        workerData: { limiter: limiter.handle, key: 'k', permits },
      });
      const held = new Promise((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      return { worker, held };
    };
    const dying = start(2);
    const living = start(1);
    await Promise.all([dying.held, living.held]);
    expect(limiter.stats('k').available).toBe(0);
    await dying.worker.terminate();
    // Nobody releases the dead thread's 2 permits: they come back once its heartbeat has
    // been silent for 10 s, to this waiter (the timeout only bounds a failure).
    const lease = await limiter.acquire('k', 2, { timeoutMs: 30_000 });
    expect(limiter.stats('k').available).toBe(0); // the living thread still holds its one
    const released = new Promise((resolve) => living.worker.once('message', resolve));
    living.worker.postMessage('release');
    expect(await released).toBe('released');
    expect(limiter.stats('k').available).toBe(1);
    lease.release();
    expect(limiter.stats('k').available).toBe(3);
    await living.worker.terminate();
  }, 60_000);

  it.for<[string, number]>([
    ['32-bit', 3],
    ['wide', 2 ** 31 - 1],
  ])(
    'so do permits it took while the limiter was its own, before its handle was read (%s)',
    { timeout: 60_000 },
    async ([, limit], { expect }) => {
      // Until then the thread keeps no holder records (no other thread could reap them);
      // reading the handle writes one per slot holding permits, read from the slots: the
      // default key's, a key partly released, and 40 keys in segments the table grew into.
      const many = Array.from({ length: 40 }, (_, i) => [`g${i}`, 1, 0] as const);
      const takes = [[null, 2, 0], ['k', 3, 1], ['none', 2, 2], ...many];
      const worker = scenarioWorker('holders:maker', {
        workerData: { options: { limit, keys: 8, maxKeys: 1024, queueLimit: limit }, takes },
      });
      const handle = await new Promise<LimiterHandle>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      const limiter = attach(handle) as Concurrency;
      const held = (key?: string) => limit - limiter.stats(key).available;
      expect([held(), held('k'), held('none'), held('g0'), held('g39')]).toEqual([2, 2, 0, 1, 1]);
      await worker.terminate();
      // Everything the dead thread held comes back: a lease of a whole limit, then every key
      // free (the 40 in grown segments too).
      const lease = await limiter.acquire('k', limit, { timeoutMs: 30_000 });
      expect(limiter.stats('k').available).toBe(0);
      lease.release();
      for (const key of [undefined, 'k', 'none', 'g0', 'g17', 'g39']) expect(held(key)).toBe(0);
      expect(many.every(([key]) => held(key) === 0)).toBe(true);
    },
  );
});

describe.concurrent('holder records never give a permit back twice', () => {
  it('reset() voids what a dead holder held: the dead-holder sweep gives none of it back', async ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 1, queueLimit: 1 });
    const dying = [await holder(limiter, 'k'), await holder(limiter, undefined)];
    limiter.reset('k');
    limiter.reset();
    expect(limiter.tryAcquire('k')).toBe(true);
    expect(limiter.tryAcquire()).toBe(true);
    for (const worker of dying) await worker.terminate();
    // A holder started after those died and dead after them: once its permit is back, every
    // record of theirs has been swept too.
    await (await holder(limiter, 'last')).terminate();
    const lease = await limiter.acquire('last', 1, { timeoutMs: 30_000 });
    expect(limiter.stats('k').available).toBe(0);
    expect(limiter.stats().available).toBe(0);
    expect(limiter.tryAcquire('k') || limiter.tryAcquire()).toBe(false);
    lease.release();
  }, 60_000);

  it('a worker terminated at any point of its take/release loop: its permit never comes back twice', async ({
    expect,
  }) => {
    // Limit 2, the main thread holds one permit of each key, a worker takes and releases
    // the other until it is terminated. Its records are swept 10 s later. A permit it
    // released must not be given back again then (the key would show 2 available while the
    // main thread holds one); one it held is (1 available), or, when it died between a
    // grant's CAS and its record, lost (0: the documented edge).
    const limiter = new Concurrency({ limit: 2, keys: 256, queueLimit: 2 });
    const trials = 64;
    const keys = Array.from({ length: trials }, (_, t) => `k${t}`);
    for (const key of keys) expect(limiter.tryAcquire(key)).toBe(true);
    const run = async (t: number) => {
      const worker = scenarioWorker('holders:take-release-loop', {
        workerData: { limiter: limiter.handle, key: keys[t], mode: t % 2 ? 'lease' : 'try' },
      });
      await new Promise((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      await new Promise((resolve) => setTimeout(resolve, 2 + ((t * 7) % 23)));
      await worker.terminate();
    };
    for (let t = 0; t < trials; t += 4) await Promise.all([t, t + 1, t + 2, t + 3].map(run));
    await (await holder(limiter, 'last')).terminate();
    const lease = await limiter.acquire('last', 2, { timeoutMs: 30_000 });
    const available = keys.map((key) => limiter.stats(key).available);
    expect(available.filter((a) => a > 1)).toEqual([]);
    lease.release();
  }, 60_000);
});

describe('heartbeats read across threads', () => {
  // Each thread reads the shared clock through its own calibration, about a microsecond
  // apart: another thread's heartbeat, written just after a millisecond turned, can read
  // one millisecond ahead of this thread's clock. That is a live thread, not a dead one.
  it('a holder whose heartbeat reads a few milliseconds ahead keeps its permits when others reap', () => {
    const limiter = new Concurrency({ limit: 3 });
    const other = attach<Concurrency>(limiter.handle); // a second thread's view, in effect
    for (let i = 0; i < 3; i++) expect(limiter.tryAcquire('k')).toBe(true);
    // This thread's entry in the thread table, its heartbeat set a few milliseconds ahead
    // of the clock (as a skew of a microsecond makes one millisecond at a turn).
    const queues = (limiter as unknown as { queues: Queues }).queues;
    const e = queues.layout.threadBase + queues.threadEntry * 2 + 1; // T_HEARTBEAT
    const nowMs = Math.floor(new MonotonicClock().nowUs() / 1000);
    Atomics.store(queues.i32, e, (nowMs + 5) & 0x7fffffff);
    // A reap by the other view finds every holder alive: nothing comes back.
    const holders = (other as unknown as { holders: { reap(): boolean } }).holders;
    expect(holders.reap()).toBe(false);
    expect(other.tryAcquire('k')).toBe(false);
    expect(limiter.stats('k')).toMatchObject({ available: 0, admitted: 3 });
  });

  it('heartbeatStale: a little ahead is fresh, older than the limit is stale, across the wrap', () => {
    const wrap = 0x80000000;
    expect(heartbeatStale(1001, 1000, 10_000)).toBe(false); // 1 ms ahead
    expect(heartbeatStale(2000, 1000, 10_000)).toBe(false); // 1 s ahead
    expect(heartbeatStale(0, 10_000, 10_000)).toBe(false); // exactly the limit
    expect(heartbeatStale(0, 10_001, 10_000)).toBe(true);
    expect(heartbeatStale(wrap - 5, 10_000, 10_000)).toBe(true); // 10 005 ms old, wrapped
    expect(heartbeatStale(5, wrap - 1, 10_000)).toBe(false); // 6 ms ahead, wrapped
    expect(heartbeatStale(0, wrap - 2000, 10_000)).toBe(true); // 2 s ahead: not a skew
  });
});

interface Queues {
  i32: Int32Array;
  layout: { threadBase: number };
  threadEntry: number;
}
