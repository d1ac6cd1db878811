// Lost-wake-up soak (test/queue-threads.test.ts): `cycles` times, acquire() 1 or 2 permits
// of a Concurrency limiter, hold them for a random little while (a few microtask turns, or
// blocked 0–1 ms), then release. Counts the permits held at once across all threads in
// inUse[0] and the most ever seen in inUse[1]; bumps progress[0] after every cycle.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive, prng } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { key, cycles, index } = workerData;
const inUse = new Int32Array(workerData.inUse);
const progress = new Int32Array(workerData.progress);
const idle = new Int32Array(new SharedArrayBuffer(4));
const random = prng(1000 + index);
arrive();
let grants = 0;
let permitsGranted = 0;
for (let cycle = 0; cycle < cycles; cycle++) {
  const permits = random() < 0.2 ? 2 : 1;
  const lease = await limiter.acquire(key, permits);
  grants++;
  permitsGranted += permits;
  const now = Atomics.add(inUse, 0, permits) + permits;
  for (let max = Atomics.load(inUse, 1); now > max; max = Atomics.load(inUse, 1)) {
    if (Atomics.compareExchange(inUse, 1, max, now) === max) break;
  }
  if (random() < 0.5) {
    const turns = 1 + Math.floor(random() * 4);
    for (let t = 0; t < turns; t++) await null;
  } else {
    Atomics.wait(idle, 0, 0, random());
  }
  Atomics.sub(inUse, 0, permits);
  lease.release();
  Atomics.add(progress, 0, 1);
}
parentPort.postMessage({ grants, permitsGranted });
