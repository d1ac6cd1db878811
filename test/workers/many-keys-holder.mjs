// Takes one Concurrency permit of each of `count` keys (`${prefix}${i}`), reports, and
// keeps them until it is terminated.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';

const limiter = attach(workerData.limiter);
const { prefix, count } = workerData;
for (let i = 0; i < count; i++) {
  if (!limiter.tryAcquire(`${prefix}${i}`)) throw new Error(`tryAcquire refused ${prefix}${i}`);
}
parentPort.postMessage('held');
parentPort.once('message', () => {}); // stays alive, holding them
