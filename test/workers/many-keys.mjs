// Every worker tries each of `keys` keys `rounds` times, visiting the keys in its own
// shuffled order, and reports its admissions per key.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive, shuffled } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { keys, rounds, index } = workerData;
const names = Array.from({ length: keys }, (_, k) => `key:${k}`);
const order = shuffled(keys, 1000 + index);
const admitted = new Int32Array(keys);
let tableFull = 0;
arrive();
for (let r = 0; r < rounds; r++) {
  for (const k of order) {
    const d = limiter.consume(names[k]);
    if (d.allowed) admitted[k]++;
    else if (d.reason === 'table-full') tableFull++;
  }
}
parentPort.postMessage({ admitted, tableFull });
