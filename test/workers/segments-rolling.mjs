// Lockstep steps on a shared ManualClock: before each step worker 0 moves the clock forward
// by `stepMs` (while the others wait at a barrier); then every worker tries each of `keys`
// keys `perStep` times, in its own order. Within a step time stands still, so the permits
// granted per step are determined; segment rolls race between all the workers.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive, shuffled } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { keys, steps, perStep, stepMs, phases, index, count } = workerData;
const words = new Int32Array(phases);
const names = Array.from({ length: keys }, (_, k) => `k:${k}`);
const order = shuffled(keys, 77 + index);
const admitted = new Int32Array(keys);
let attempts = 0;

/** Waits until every worker has passed `n` phase barriers. */
function phase(n) {
  Atomics.add(words, 0, 1);
  Atomics.notify(words, 0);
  for (;;) {
    const seen = Atomics.load(words, 0);
    if (seen >= n * count) return;
    Atomics.wait(words, 0, seen);
  }
}

arrive();
for (let s = 0; s < steps; s++) {
  phase(2 * s + 1); // everyone is done with the step before
  if (index === 0 && s > 0) limiter.clock.advance(stepMs);
  phase(2 * s + 2); // the clock has moved
  for (let i = 0; i < perStep; i++) {
    for (const k of order) {
      attempts++;
      if (limiter.tryAcquire(names[k])) admitted[k]++;
    }
  }
}
parentPort.postMessage({ admitted, attempts });
