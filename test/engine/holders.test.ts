import type { Worker } from 'node:worker_threads';
import { describe, it } from 'vitest';
import { monotonicClock } from '../../src/clock.js';
import { Concurrency, QueueFullError } from '../../src/index.js';
import { computeLayout, H_HOLDERS_LOST, THREAD_ENTRIES } from '../../src/layout.js';
import { scenarioWorker } from '../helpers/threads.js';

// Concurrency's holder records (who holds what, so that a dead thread's permits come back)
// at the edges: many threads, a grown table, permits handed from one thread to another.
// Tests import from ../src and the workers from ../dist: `npm run build` first.

/** A worker's first message (or its error). */
function first(worker: Worker): Promise<unknown> {
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

/** A worker holding `permits` of `key` until told to release them (test/workers/holder.mjs). */
async function holder(limiter: Concurrency, key: string, permits = 1): Promise<Worker> {
  const worker = scenarioWorker('holders:holder', {
    workerData: { limiter: limiter.handle, key, permits },
  });
  await first(worker);
  return worker;
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
    // A holder of another key dying after the taker: once its permit is back, the sweep
    // has been over the taker's records too.
    const marker = await holder(limiter, 'marker', 5);
    await marker.terminate();
    const lease = await limiter.acquire('marker', 1, { timeoutMs: 30_000 });
    lease.release();
    expect(limiter.stats('k').available).toBe(1);
    const done = first(others);
    others.postMessage('release');
    await done;
    expect(limiter.stats('k').available).toBe(5);
    await others.terminate();
    limiter.close();
  }, 60_000);
});
