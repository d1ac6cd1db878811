// Tries one limiter's key as fast as it can until ctl[0] turns 1 (the main thread
// reconfigures it meanwhile), then `final` more times. Posts the permits it was granted.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.handle);
const key = workerData.key ?? undefined;
const ctl = new Int32Array(workerData.ctl);
let granted = 0;
arrive();
while (Atomics.load(ctl, 0) === 0) if (limiter.tryAcquire(key)) granted++;
for (let i = 0; i < workerData.final; i++) if (limiter.tryAcquire(key)) granted++;
parentPort.postMessage(granted);
