// For test/queue-liveness.test.ts: takes the only token of the TokenBucket in workerData,
// then waits for the next one with acquire() — its only pending work — and reports it.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';

const limiter = attach(workerData.limiter);
const start = performance.now();
const took = limiter.tryAcquire();
limiter.acquire().then(
  () => parentPort.postMessage({ took, outcome: 'resolved', waitedMs: performance.now() - start }),
  (error) => parentPort.postMessage({ took, outcome: String(error) }),
);
