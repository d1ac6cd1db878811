// Records, just before arriving at the barrier, how many workers had already passed it,
// and, just after, how many had arrived.
import { parentPort, workerData } from 'node:worker_threads';
import { arrive } from './lib.mjs';

const passed = new Int32Array(workerData.passed);
const arrivals = new Int32Array(workerData.barrier);
const passedBefore = Atomics.load(passed, 0);
arrive();
const arrivedAfter = Atomics.load(arrivals, 0);
Atomics.add(passed, 0, 1);
parentPort.postMessage({ index: workerData.index, passedBefore, arrivedAfter });
