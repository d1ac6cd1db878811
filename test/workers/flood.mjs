// A flood of new keys through a growing table while hot keys are decided. Every flood key
// is new and active (one permit taken, none given back), so none can be reclaimed: the
// table must grow for each of them. Reports refused flood keys and hot admissions.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { index, floodKeys, hotKeys, hotTries } = workerData;
arrive();
let refused = 0;
const hot = new Array(hotKeys).fill(0);
for (let i = 0; i < floodKeys; i++) {
  if (!limiter.tryAcquire(`flood:${index}:${i}`)) refused++;
  const h = i % hotKeys;
  for (let t = 0; t < hotTries; t++) if (limiter.tryAcquire(`hot:${h}`)) hot[h]++;
}
parentPort.postMessage({ refused, hot });
