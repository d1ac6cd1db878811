// Lock-step tries on several limiters while the main thread reconfigures them between
// steps: at each step the main thread publishes the step number in ctl[0] and waits for
// every worker's count in ctl[1]; each worker then makes `tries` tryAcquire() calls per
// limiter (on its key, undefined for the default key) and adds what it was granted to
// counts[step × limiters + i].
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiters = workerData.limiters.map(({ handle, key }) => ({ limiter: attach(handle), key }));
const ctl = new Int32Array(workerData.ctl);
const counts = new Int32Array(workerData.counts);
const { steps, tries } = workerData;
arrive();
for (let step = 1; step <= steps; step++) {
  while (Atomics.load(ctl, 0) < step) Atomics.wait(ctl, 0, step - 1);
  limiters.forEach(({ limiter, key }, i) => {
    let granted = 0;
    for (let t = 0; t < tries; t++) if (limiter.tryAcquire(key ?? undefined)) granted++;
    Atomics.add(counts, step * limiters.length + i, granted);
  });
  Atomics.add(ctl, 1, 1);
  Atomics.notify(ctl, 1);
}
parentPort.postMessage('done');
