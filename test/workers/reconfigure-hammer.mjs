// Tries one limiter's key as fast as it can until ctl[0] turns 1 (the main thread
// reconfigures it meanwhile), then `final` more times. Posts the permits it was granted.
// The worker of index 0, when `changes` is given, reconfigures instead (each of `changes`
// in turn, as the main thread does at the same time), then adds 1 to ctl[1].
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.handle);
const key = workerData.key ?? undefined;
const ctl = new Int32Array(workerData.ctl);
let granted = 0;
arrive();
if (workerData.changes && workerData.index === 0) {
  for (const options of workerData.changes) limiter.reconfigure(options);
  Atomics.add(ctl, 1, 1);
  Atomics.notify(ctl, 1);
} else {
  while (Atomics.load(ctl, 0) === 0) if (limiter.tryAcquire(key)) granted++;
  for (let i = 0; i < workerData.final; i++) if (limiter.tryAcquire(key)) granted++;
}
parentPort.postMessage(granted);
