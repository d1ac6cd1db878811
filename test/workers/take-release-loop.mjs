// Takes and releases one Concurrency permit of `key` in a loop that never yields, until the
// main thread terminates it: `mode` 'try' takes by tryAcquire() and gives back by release(),
// 'lease' by acquire() and lease.release(). Reports once the loop has started.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';

const limiter = attach(workerData.limiter);
const { key, mode } = workerData;
if (!limiter.tryAcquire(key)) throw new Error('tryAcquire refused');
limiter.release(key);
parentPort.postMessage('looping');
if (mode === 'lease') {
  for (;;) (await limiter.acquire(key)).release();
} else {
  for (;;) if (limiter.tryAcquire(key)) limiter.release(key);
}
