// Makes a Concurrency limiter in this thread and takes permits while the limiter is this
// thread's alone (its handle not read yet), then sends the handle to the main thread and
// keeps what it holds until it is terminated. `takes`: [key (null: the default key),
// permits taken one at a time, permits released after]; `options` are the limiter's.
import { parentPort, workerData } from 'node:worker_threads';
import { Concurrency } from '../../dist/index.js';

const { options, takes } = workerData;
const limiter = new Concurrency(options);
for (const [key, permits, released] of takes) {
  for (let i = 0; i < permits; i++) {
    if (!limiter.tryAcquire(key ?? undefined)) throw new Error('tryAcquire refused');
  }
  if (released > 0) limiter.release(key ?? undefined, released);
}
parentPort.postMessage(limiter.handle);
parentPort.once('message', () => {}); // stays alive, holding them
