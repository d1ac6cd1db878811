// Group d: wake-ups. Atomics.waitAsync -> Atomics.notify round trips between the main
// thread and a worker, the same within one thread, and Atomics.notify with no waiter.
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { figure, isMain, measureGeneric, runStandalone, sizes, summarize } from './lib.mjs';

const WORKER = new URL('./worker.mjs', import.meta.url);
const [A, B] = [0, 1];

/** Main side of the ping-pong: bump A, notify, waitAsync until the worker echoes it into B. */
async function pingPong(sync, samples) {
  const sab = new SharedArrayBuffer(64);
  const w = new Int32Array(sab);
  const worker = new Worker(WORKER, { workerData: { role: 'pingpong', sab, sync } });
  const exited = once(worker, 'exit');
  await once(worker, 'online');
  const warm = Math.min(500, samples);
  const rt = new Float64Array(samples);
  let seq = 0;
  for (let i = -warm; i < samples; i++) {
    seq++;
    const t0 = process.hrtime.bigint();
    Atomics.store(w, A, seq);
    Atomics.notify(w, A);
    let b = Atomics.load(w, B);
    while (b !== seq) {
      const r = Atomics.waitAsync(w, B, b);
      if (r.async) await r.value;
      b = Atomics.load(w, B);
    }
    const t1 = process.hrtime.bigint();
    if (i >= 0) rt[i] = Number(t1 - t0);
  }
  Atomics.store(w, A, -1);
  Atomics.notify(w, A);
  await exited;
  return summarize(rt);
}

/** waitAsync in this thread, notify from this thread: time until the then-callback runs. */
async function sameThread(samples) {
  const w = new Int32Array(new SharedArrayBuffer(16));
  const keepAlive = setInterval(() => {}, 1 << 30); // a pending waitAsync holds nothing open
  const rt = new Float64Array(samples);
  const warm = Math.min(500, samples);
  for (let i = -warm; i < samples; i++) {
    const r = Atomics.waitAsync(w, 0, 0);
    let t1 = 0n;
    const done = r.value.then(() => {
      t1 = process.hrtime.bigint();
    });
    const t0 = process.hrtime.bigint();
    Atomics.notify(w, 0, 1);
    await done;
    if (i >= 0) rt[i] = Number(t1 - t0);
  }
  clearInterval(keepAlive);
  return summarize(rt);
}

export async function run({ quick = false, reporter }) {
  const { samples, batch, reps, warmup } = sizes(quick);

  const a = await pingPong(false, samples);
  reporter.add(
    'wake.roundtrip.waitAsync.worker',
    figure(a.median, {
      p99Ns: a.p99,
      note: `main <-> worker, both waitAsync, ${samples} round trips (2 wake-ups each)`,
    }),
  );

  const b = await pingPong(true, samples);
  reporter.add(
    'wake.roundtrip.waitAsync.worker-sync-wait',
    figure(b.median, {
      p99Ns: b.p99,
      note: 'main waitAsync, worker blocking Atomics.wait',
    }),
  );

  const c = await sameThread(samples);
  reporter.add(
    'wake.same-thread.waitAsync',
    figure(c.median, { p99Ns: c.p99, note: 'notify -> then-callback, one thread' }),
  );

  const w = new Int32Array(new SharedArrayBuffer(16));
  const d = measureGeneric(
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += Atomics.notify(w, 1, 1);
      return acc;
    },
    null,
    { batch: batch / 5, reps, warmup },
  );
  reporter.add('wake.notify.no-waiters', figure(d.median, { p99Ns: d.p99, note: 'returns 0' }));

  const e = measureGeneric(
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) if (Atomics.load(w, 2) !== 0) acc += Atomics.notify(w, 1, 1);
      return acc;
    },
    null,
    { batch: batch / 5, reps, warmup },
  );
  reporter.add(
    'wake.notify.check-waiter-count',
    figure(e.median, { p99Ns: e.p99, note: 'Atomics.load of a waiter count that is 0 instead' }),
  );
}

if (isMain(import.meta.url)) await runStandalone('wake', run);
