// A waiter on a hot Concurrency key must never queue on a slot that was
// given to another key between its refused attempt and its enqueue. Waiter threads loop
// acquire('hot') → hold → release; inserter threads churn new keys through a tiny table so
// that 'hot', idle for a moment after each release, is a reclaim candidate. A waiter linked
// into a foreign slot is never woken by 'hot''s releases and times out.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { rounds, index } = workerData;
const role = index < workerData.waiters ? 'waiter' : 'churn';
const stop = new Int32Array(workerData.stop);
arrive();
if (role === 'waiter') {
  let granted = 0;
  let timeouts = 0;
  for (let i = 0; i < rounds; i++) {
    try {
      const lease = await limiter.acquire('hot', 1, { timeoutMs: 3000 });
      granted++;
      await new Promise((resolve) => setImmediate(resolve));
      lease.release();
    } catch (error) {
      if (error?.name === 'TimeoutError') timeouts++;
      else throw error;
    }
  }
  Atomics.add(stop, 0, 1);
  parentPort.postMessage({ granted, timeouts });
} else {
  let inserted = 0;
  while (Atomics.load(stop, 0) < workerData.waiters) {
    const key = `churn-${index}-${inserted++}`;
    if (limiter.tryAcquire(key)) limiter.release(key);
    if (inserted % 64 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  parentPort.postMessage({ inserted });
}
