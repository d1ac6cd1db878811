// One of a crowd of threads on one Concurrency: takes one permit of `key` by tryAcquire,
// one by consume and one by acquire(), reports how it went, then releases the three when
// told to (or is terminated holding them).
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';

const limiter = attach(workerData.limiter);
const { key } = workerData;
let lease;
try {
  if (!limiter.tryAcquire(key)) throw new Error('tryAcquire refused');
  if (!limiter.consume(key).allowed) throw new Error('consume refused');
  lease = await limiter.acquire(key);
  parentPort.postMessage({ held: 3 });
} catch (error) {
  parentPort.postMessage({ error: `${error.name}: ${error.message}` });
}
parentPort.once('message', () => {
  if (lease) {
    limiter.release(key, 2);
    lease.release();
  }
  parentPort.postMessage('released');
  parentPort.close();
});
