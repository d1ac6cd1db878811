import { Worker } from 'node:worker_threads';
import { expect, it } from 'vitest';
import { Concurrency } from '../src/index.js';

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
      workerData: { handle: c.handle, dist: new URL('../dist/index.js', import.meta.url).href },
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
