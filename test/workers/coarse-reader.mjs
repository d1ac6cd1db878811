// Reads a CoarseClock (from its handle, as attach() opens it) interleaved with this thread's
// precise monotonic clock, `reads` times, and reports what it saw: reads ahead of the
// precise clock, reads that went back, and how many distinct times it saw.
import { parentPort, workerData } from 'node:worker_threads';
import { CoarseClock, MonotonicClock } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const clock = new CoarseClock(workerData.clock);
const precise = new MonotonicClock();
arrive();
let ahead = 0;
let back = 0;
let distinct = 0;
let last = Number.NEGATIVE_INFINITY;
for (let i = 0; i < workerData.reads; i++) {
  const t = clock.nowUs();
  if (t > precise.nowUs()) ahead++;
  if (t < last) back++;
  if (t !== last) distinct++;
  last = t;
}
parentPort.postMessage({ ahead, back, distinct, resolutionMs: clock.resolutionMs });
