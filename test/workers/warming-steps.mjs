// Lock-step tries on one WarmingBucket key: at each step the main thread moves the shared
// ManualClock, publishes the step number in ctl[0], and waits for every worker's count in
// ctl[1]; each worker then makes `calls` tries. Posts the permits this thread was granted.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.limiter);
const ctl = new Int32Array(workerData.ctl);
const { steps, calls } = workerData;
let granted = 0;
arrive();
for (let step = 1; step <= steps; step++) {
  while (Atomics.load(ctl, 0) < step) Atomics.wait(ctl, 0, step - 1);
  for (let i = 0; i < calls; i++) if (limiter.tryAcquire('k')) granted++;
  Atomics.add(ctl, 1, 1);
  Atomics.notify(ctl, 1);
}
parentPort.postMessage(granted);
