// `waiters` loops in this thread, each taking one permit of `key` through acquire() after
// another for `runMs`; replies with the clock time (µs) of every grant's decision.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';

const limiter = attach(workerData.limiter);
const { key, runMs, waiters } = workerData;
const times = [];
const until = performance.now() + runMs;
async function loop() {
  while (performance.now() < until) {
    await limiter.acquire(key);
    times.push(limiter.lastDecisionUs);
  }
}
await Promise.all(Array.from({ length: waiters }, loop));
parentPort.postMessage(times);
