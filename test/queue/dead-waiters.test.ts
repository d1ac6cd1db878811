import { Worker } from 'node:worker_threads';
import { expect, it } from 'vitest';
import { Concurrency, TokenBucket } from '../../src/index.js';

it('frees a key whose only waiters belonged to a terminated thread (tryAcquire is not blocked forever)', async () => {
  const c = new Concurrency({ limit: 1, queueLimit: 5 });
  const held = c.tryAcquire('k');
  expect(held).toBe(true);
  const worker = new Worker(
    `const { workerData, parentPort } = require('node:worker_threads');
     import(workerData.dist).then(({ attach }) => {
       const l = attach(workerData.handle);
       l.acquire('k').catch(() => {});
       parentPort.postMessage('queued');
     });`,
    {
      eval: true,
      workerData: { handle: c.handle, dist: new URL('../../dist/index.js', import.meta.url).href },
    },
  );
  await new Promise((resolve) => worker.once('message', resolve));
  expect(c.stats('k').queued).toBe(1);
  await worker.terminate();
  c.release('k');
  // The dead waiter still heads the queue: oldest-first refuses everyone else until its
  // thread has been silent for the documented 2 s, then the first refused call removes it.
  expect(c.tryAcquire('k')).toBe(false);
  const started = Date.now();
  let granted = false;
  while (!granted && Date.now() - started < 10_000) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    granted = c.tryAcquire('k');
  }
  expect(granted).toBe(true);
  expect(Date.now() - started).toBeLessThan(5_000);
  expect(c.stats('k')).toMatchObject({ queued: 0, available: 0 });
});

it('a terminated thread’s waiter evicted by a newer one (newest-first) does not keep its record for ever', async () => {
  // Review 2: its owner, dead, never frees the evicted record; maxWaiters such evictions
  // used to leave no thread room to wait. Two records: one evicted, then two waiters at once.
  const tb = new TokenBucket({
    capacity: 1,
    refillPerSecond: 1e-6,
    queueLimit: 1,
    queueOrder: 'newest-first',
    maxWaiters: 2,
  });
  for (const key of ['k', 'a', 'b']) expect(tb.tryAcquire(key)).toBe(true); // empty buckets
  const worker = new Worker(
    `const { workerData, parentPort } = require('node:worker_threads');
     import(workerData.dist).then(({ attach }) => {
       attach(workerData.handle).acquire('k').catch(() => {});
       parentPort.postMessage('queued');
     });`,
    {
      eval: true,
      workerData: { handle: tb.handle, dist: new URL('../../dist/index.js', import.meta.url).href },
    },
  );
  await new Promise((resolve) => worker.once('message', resolve));
  await worker.terminate();
  const outcome = (key: string) =>
    tb.acquire(key, 1, { timeoutMs: 20 }).then(
      () => 'granted',
      (error: Error) => error.name,
    );
  expect(await outcome('k')).toBe('TimeoutError'); // it evicted the dead thread's waiter
  expect(tb.stats('k').queued).toBe(0);
  // Once the dead thread has been silent for 2 s, its record is free again.
  const started = Date.now();
  let both: string[] = [];
  while (Date.now() - started < 8_000) {
    both = await Promise.all([outcome('a'), outcome('b')]);
    if (both[1] === 'TimeoutError') break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  expect(both).toEqual(['TimeoutError', 'TimeoutError']);
  expect(Date.now() - started).toBeLessThan(5_000);
});
