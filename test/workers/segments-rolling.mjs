// Worker 0 moves the shared ManualClock forward by `stepMs`, `steps` times, trying every
// key `perStep` times after each move; the other workers try the keys in their own order
// until worker 0 is done. Each reports its admissions per key.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive, shuffled } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { keys, steps, perStep, stepMs, done, index } = workerData;
const flag = new Int32Array(done);
const names = Array.from({ length: keys }, (_, k) => `k:${k}`);
const order = shuffled(keys, 77 + index);
const admitted = new Int32Array(keys);
let attempts = 0;
arrive();
if (index === 0) {
  for (let s = 0; s < steps; s++) {
    if (s > 0) limiter.clock.advance(stepMs);
    for (let i = 0; i < perStep; i++) {
      for (const k of order) {
        attempts++;
        if (limiter.tryAcquire(names[k])) admitted[k]++;
      }
    }
  }
  Atomics.store(flag, 0, 1);
} else {
  while (Atomics.load(flag, 0) === 0) {
    for (const k of order) {
      attempts++;
      if (limiter.tryAcquire(names[k])) admitted[k]++;
    }
  }
}
parentPort.postMessage({ admitted, attempts });
