// Every worker calls tryAcquire on one key (or the default key when workerData.key is
// undefined) `attempts` times, for `permits` each (default 1), and reports how many calls
// were admitted.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { key, attempts, permits = 1 } = workerData;
arrive();
let admitted = 0;
if (key === undefined) {
  for (let i = 0; i < attempts; i++) if (limiter.tryAcquire(undefined, permits)) admitted++;
} else {
  for (let i = 0; i < attempts; i++) if (limiter.tryAcquire(key, permits)) admitted++;
}
parentPort.postMessage({ admitted, rejected: attempts - admitted });
