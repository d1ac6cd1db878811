// acquire(): the cost when a permit is free (against tryAcquire plus one resolved
// promise), and how long a queued waiter takes to resume after a release, within one
// thread and across threads (against the waitAsync → notify floor from native-bench).
import { Worker } from 'node:worker_threads';
import { Concurrency, TokenBucket } from '../dist/index.js';

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}
function percentile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * p))];
}
const nowUs = () => Number(process.hrtime.bigint()) / 1e3;

async function perCallAsync(fn, calls, rounds) {
  for (let i = 0; i < calls; i++) await fn();
  const per = [];
  for (let r = 0; r < rounds; r++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) await fn();
    per.push(Number(process.hrtime.bigint() - t) / calls);
  }
  return median(per);
}

function perCallSync(fn, calls, rounds) {
  for (let i = 0; i < calls; i++) fn();
  const per = [];
  for (let r = 0; r < rounds; r++) {
    const t = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) fn();
    per.push(Number(process.hrtime.bigint() - t) / calls);
  }
  return median(per);
}

/** One thread: a holder releases, the queued waiter's promise resumes. */
async function sameThreadWake(samples) {
  const c = new Concurrency({ limit: 1, queueLimit: 1 });
  const lat = [];
  for (let i = 0; i < samples; i++) {
    const held = await c.acquire('k');
    let releasedAt = 0;
    const resumed = c.acquire('k').then((lease) => {
      lat.push(nowUs() - releasedAt);
      lease.release();
    });
    await new Promise((resolve) => setImmediate(resolve)); // the waiter is parked
    releasedAt = nowUs();
    held.release();
    await resumed;
  }
  return lat;
}

const WAITER = `
const { workerData, parentPort } = require('node:worker_threads');
import(workerData.dist).then(async ({ attach }) => {
  const limiter = attach(workerData.handle);
  const sig = workerData.sig;
  const times = workerData.times;
  for (let i = 0; i < workerData.samples; i++) {
    Atomics.wait(sig, 0, 2 * i); // until the main thread holds the permit
    const pending = limiter.acquire('k');
    const lease = await pending;
    times[1] = Number(process.hrtime.bigint()) / 1e3;
    lease.release();
    Atomics.store(sig, 0, 2 * i + 2);
    Atomics.notify(sig, 0);
  }
});`;

/** Across threads: a worker waits, the main thread releases, the worker resumes. */
async function crossThreadWake(samples) {
  const c = new Concurrency({ limit: 1, queueLimit: 1 });
  const sig = new Int32Array(new SharedArrayBuffer(8));
  const times = new Float64Array(new SharedArrayBuffer(16));
  const worker = new Worker(WAITER, {
    eval: true,
    workerData: {
      dist: new URL('../dist/index.js', import.meta.url).href,
      handle: c.handle,
      sig,
      times,
      samples,
    },
  });
  const lat = [];
  const tick = () => new Promise((resolve) => setImmediate(resolve));
  for (let i = 0; i < samples; i++) {
    if (!c.tryAcquire('k')) throw new Error('the permit should be free');
    Atomics.store(sig, 0, 2 * i + 1);
    Atomics.notify(sig, 0);
    while (c.stats('k').queued === 0) await tick();
    times[0] = nowUs();
    c.release('k');
    while (Atomics.load(sig, 0) !== 2 * i + 2) await tick();
    lat.push(times[1] - times[0]);
  }
  await worker.terminate();
  return lat;
}

export async function runAcquire({ quick }) {
  const bucket = new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, queueLimit: 1 });
  const calls = quick ? 50_000 : 200_000;
  const rounds = quick ? 3 : 7;
  const tryNs = perCallSync(() => bucket.tryAcquire(), calls * 5, rounds);
  const resolvedNs = await perCallAsync(() => Promise.resolve(), calls, rounds);
  const acquireNs = await perCallAsync(() => bucket.acquire(), calls, rounds);
  const samples = quick ? 300 : 2000;
  const same = await sameThreadWake(samples);
  const cross = await crossThreadWake(samples);
  return {
    free: { acquireNs, tryNs, resolvedNs, ratio: acquireNs / (tryNs + resolvedNs) },
    wake: {
      sameThread: { p50Us: percentile(same, 0.5), p99Us: percentile(same, 0.99) },
      crossThread: { p50Us: percentile(cross, 0.5), p99Us: percentile(cross, 0.99) },
      samples,
    },
  };
}
