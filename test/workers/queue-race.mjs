// One side of the abort-versus-grant race (test/queue-threads.test.ts). Worker 0 waits
// and tries to leave the queue; worker 1 waits behind it. Worker `index` owns the four
// words control[index × 4 …] and outcomes[index × rounds …]. For each round i (1…rounds)
// the main thread sets START = i; the worker calls acquire() on workerData.key, sets
// ENQUEUED = i (its waiter is queued) and waits for the outcome. Worker 0 leaves by its
// AbortSignal when the main thread sets GO = i on odd rounds, and waits with
// `timeoutMs: 1` on even rounds. A granted lease is released at once; then the outcome
// code (lib.mjs OUTCOME) goes to outcomes[i − 1] and DONE = i.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { OUTCOME, outcomeOf } from './lib.mjs';

const START = 0;
const ENQUEUED = 1;
const GO = 2;
const DONE = 3;

const limiter = attach(workerData.limiter);
const { key, rounds, index } = workerData;
const abortable = index === 0;
const control = new Int32Array(workerData.control, index * 16, 4);
const outcomes = new Int32Array(workerData.outcomes, index * rounds * 4, rounds);

function set(word, value) {
  Atomics.store(control, word, value);
  Atomics.notify(control, word);
}

async function reached(word, value) {
  for (;;) {
    const seen = Atomics.load(control, word);
    if (seen >= value) return;
    await Atomics.waitAsync(control, word, seen).value;
  }
}

for (let round = 1; round <= rounds; round++) {
  // Nothing of ours is pending between rounds: blocking here is fine.
  for (let seen = Atomics.load(control, START); seen < round; seen = Atomics.load(control, START)) {
    Atomics.wait(control, START, seen);
  }
  // A pending Atomics.waitAsync does not keep a thread alive: once the lease is back, the
  // wait for GO would be all that is left, and the thread would exit.
  const keepAlive = setInterval(() => {}, 1000);
  const controller = abortable && round % 2 === 1 ? new AbortController() : undefined;
  const options = controller ? { signal: controller.signal } : abortable ? { timeoutMs: 1 } : {};
  const pending = limiter.acquire(key, 1, options);
  set(ENQUEUED, round);
  const leave = controller ? reached(GO, round).then(() => controller.abort()) : undefined;
  let outcome;
  try {
    const lease = await pending;
    outcome = OUTCOME.granted;
    lease.release();
  } catch (error) {
    outcome = OUTCOME[outcomeOf(error)];
  }
  await leave;
  clearInterval(keepAlive);
  outcomes[round - 1] = outcome;
  set(DONE, round);
}
parentPort.postMessage({ rounds });
