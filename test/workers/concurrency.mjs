// Every worker loops: tryAcquire(key); if granted, count itself in a shared in-use word,
// record the largest in-use count seen, count itself out, release(key).
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { key, iterations } = workerData;
// [0]: permits in use now, [1]: the largest number ever seen in use.
const shared = new Int32Array(workerData.inUse);
arrive();
let granted = 0;
for (let i = 0; i < iterations; i++) {
  if (!limiter.tryAcquire(key)) continue;
  granted++;
  const now = Atomics.add(shared, 0, 1) + 1;
  for (let max = Atomics.load(shared, 1); now > max; max = Atomics.load(shared, 1)) {
    if (Atomics.compareExchange(shared, 1, max, now) === max) break;
  }
  Atomics.sub(shared, 0, 1);
  limiter.release(key);
}
parentPort.postMessage({ granted });
