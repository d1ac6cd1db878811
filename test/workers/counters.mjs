// Every worker calls tryAcquire on one key `attempts` times and refunds each permit it
// gets at once, so admissions keep happening while time stands still; reports its counts.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { key, attempts } = workerData;
arrive();
let admitted = 0;
for (let i = 0; i < attempts; i++) {
  if (limiter.tryAcquire(key)) {
    admitted++;
    limiter.refund(key);
  }
}
parentPort.postMessage({ admitted, rejected: attempts - admitted });
