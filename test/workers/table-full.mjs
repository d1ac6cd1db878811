// Every worker visits the keys `${prefix}0` … `${prefix}${keys - 1}` in its own shuffled
// order and calls consume() on each `attemptsPerKey` times in a row; reports admissions
// per key and how many refusals said 'table-full'.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive, shuffled } from './lib.mjs';

const limiter = attach(workerData.limiter);
const { prefix, keys, attemptsPerKey, index } = workerData;
const order = shuffled(keys, 500 + index);
const admitted = new Int32Array(keys);
let tableFull = 0;
let limited = 0;
arrive();
for (const k of order) {
  for (let a = 0; a < attemptsPerKey; a++) {
    const d = limiter.consume(`${prefix}${k}`);
    if (d.allowed) admitted[k]++;
    else if (d.reason === 'table-full') tableFull++;
    else if (d.reason === 'limited') limited++;
  }
}
parentPort.postMessage({ admitted, tableFull, limited });
