// Hammers a limiter until terminated: tryAcquire/refund on a hot key, on a few shared
// keys and on an endless stream of new keys (so the insert path, its locks and slot
// reclaiming are busy). After `signalAfter` iterations it counts itself in workerData.running
// so the main thread knows it is mid-run before terminating it. Never posts a result.
import { workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';
import { arrive, prng } from './lib.mjs';

const limiter = attach(workerData.limiter);
const running = new Int32Array(workerData.running);
const { index, signalAfter } = workerData;
const random = prng(77 + index);
arrive();
for (let i = 0; ; i++) {
  if (i === signalAfter) {
    Atomics.add(running, 0, 1);
    Atomics.notify(running, 0);
  }
  const r = random();
  const key =
    r < 0.4 ? 'hot' : r < 0.7 ? `shared:${Math.floor(random() * 64)}` : `new:${index}:${i}`;
  if (limiter.tryAcquire(key) && random() < 0.5) limiter.refund(key);
}
