// Makes a Concurrency limiter in this thread and takes `permits` of `key` while the limiter
// is this thread's alone (its handle not read yet), then sends the handle to the main thread
// and keeps the permits until it is terminated.
import { parentPort, workerData } from 'node:worker_threads';
import { Concurrency } from '../../dist/index.js';

const { key, limit, permits } = workerData;
const limiter = new Concurrency({ limit, queueLimit: limit });
for (let i = 0; i < permits; i++) {
  if (!limiter.tryAcquire(key)) throw new Error('tryAcquire refused');
}
parentPort.postMessage(limiter.handle);
parentPort.once('message', () => {}); // stays alive, holding them
