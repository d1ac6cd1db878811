// Holds Concurrency permits for the main thread: takes `permits` of `key` (one by
// tryAcquire, the rest through acquire()), reports, then waits for a message to release
// them — or is terminated while holding them.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';

const limiter = attach(workerData.limiter);
const { key, permits } = workerData;
if (!limiter.tryAcquire(key)) throw new Error('tryAcquire refused');
const lease = permits > 1 ? await limiter.acquire(key, permits - 1) : undefined;
parentPort.postMessage('held');
parentPort.once('message', () => {
  limiter.release(key);
  lease?.release();
  parentPort.postMessage('released');
  parentPort.close();
});
