// A limiter attached from its handle (its clock a CoarseClock). Roles:
//   'hammer'    after the barrier, tryAcquire `attempts` times; report the admitted count
//   'pingpong'  answer `rounds` pings: when word 0 of `sync` is 2i+1, write this thread's
//               clock reading to slot i of `times` and set word 0 to 2i+2
import { parentPort, workerData } from 'node:worker_threads';
import { attach, CoarseClock } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.limiter);
const clock = limiter.clock;
if (workerData.role === 'hammer') {
  arrive();
  let admitted = 0;
  for (let i = 0; i < workerData.attempts; i++) if (limiter.tryAcquire('k')) admitted++;
  parentPort.postMessage({ admitted, coarse: clock instanceof CoarseClock });
} else {
  const sync = new Int32Array(workerData.sync);
  const times = new Float64Array(workerData.times);
  for (let i = 0; i < workerData.rounds; i++) {
    while (Atomics.load(sync, 0) !== 2 * i + 1) Atomics.wait(sync, 0, 2 * i);
    times[i] = clock.nowUs();
    Atomics.store(sync, 0, 2 * i + 2);
    Atomics.notify(sync, 0);
  }
  parentPort.postMessage({ ticking: clock.ticking, resolutionMs: clock.resolutionMs });
}
