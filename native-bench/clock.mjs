// Group b: clock reads, the calibrated performance.now() clock and how well two threads /
// two processes agree on it, and a coarse clock (a ms word in a SAB refreshed by a ticker).
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { performance as perf } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import {
  calibrateOffset,
  consume,
  figure,
  isMain,
  measureGeneric,
  runStandalone,
  sizes,
  summarize,
} from './lib.mjs';

const WORKER = new URL('./worker.mjs', import.meta.url);
const CHILD = new URL('./ipc-child.mjs', import.meta.url);
const ROUNDS = 11; // calibrations per thread / process
const SAMPLES = 50; // samples per calibration (min bracketing error wins)

// Two figures from the same calibrations: `offset` compares the offsets themselves (what the
// brief asks for threads, which share perf.now()'s origin); `residual` compares the two
// calibrated clocks through hrtime (valid across processes, whose origins differ).
function offsetDiffFigure(mine, theirs, what, by) {
  const offs = theirs.map((t, i) => t.offsetUs - mine[i].offsetUs);
  const res = theirs.map((t, i) => t.residualUs - mine[i].residualUs);
  const absOff = summarize(offs.map(Math.abs));
  const absRes = summarize(res.map(Math.abs));
  const errs = summarize([...mine, ...theirs].map((c) => c.errUs));
  const main = by === 'offset' ? absOff : absRes;
  const rawOff = summarize(offs).median;
  return figure(main.median * 1000, {
    p99Ns: main.max * 1000,
    note:
      `${what} vs main, |offset diff| median ${absOff.median.toFixed(3)} µs` +
      `${Math.abs(rawOff) > 1000 ? ` (raw ${(rawOff / 1000).toFixed(1)} ms: other origin)` : ''}, ` +
      `|calibrated clock diff| median ${absRes.median.toFixed(3)} max ${absRes.max.toFixed(3)} µs, ` +
      `bracket ${errs.median.toFixed(3)} µs`,
  });
}

export async function run({ quick = false, reporter }) {
  const { batch: bigBatch, reps, warmup } = sizes(quick);
  const opts = { batch: Math.max(50_000, bigBatch / 5), reps, warmup };
  // Each loop comes from a factory called twice (see measureGeneric in lib.mjs).
  const add = (name, make, note) => {
    const s = measureGeneric(make, null, opts);
    reporter.add(name, figure(s.median, { p99Ns: s.p99, note }));
    return s.median;
  };

  add(
    'clock.hrtime.bigint',
    () => (n) => {
      let last = 0n;
      for (let i = 0; i < n; i++) last = process.hrtime.bigint();
      return Number(last % 1000n);
    },
    'process.hrtime.bigint()',
  );

  add(
    'clock.hrtime',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += process.hrtime()[1];
      return acc % 1e6;
    },
    'process.hrtime() -> [s, ns]',
  );

  add(
    'clock.performance.now.global',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += performance.now();
      return acc % 1e6;
    },
    'globalThis.performance.now()',
  );

  add(
    'clock.performance.now.perf_hooks',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += perf.now();
      return acc % 1e6;
    },
    "performance.now() imported from 'node:perf_hooks'",
  );

  add('clock.Date.now', () => (n) => {
    let acc = 0;
    for (let i = 0; i < n; i++) acc += Date.now();
    return acc % 1e6;
  });

  const { offsetUs } = calibrateOffset(SAMPLES);
  add(
    'clock.calibrated',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += perf.now() * 1000 + offsetUs;
      return acc % 1e6;
    },
    'perf_hooks performance.now()*1000 + offset (µs on the hrtime scale)',
  );

  add(
    'clock.calibrated.floor',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += Math.floor(perf.now() * 1000 + offsetUs);
      return acc % 1e6;
    },
    'same, as integer µs (Math.floor)',
  );

  add(
    'clock.calibrated.int32',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += (perf.now() * 1000 + offsetUs) | 0;
      return acc % 1e6;
    },
    'same, wrapped to int32 µs with |0 (wrap-safe compares)',
  );

  // Cross-thread agreement of the calibrated clock.
  {
    const mine = [];
    const worker = new Worker(WORKER, {
      workerData: { role: 'calibrate', rounds: ROUNDS, samples: SAMPLES },
    });
    const exited = once(worker, 'exit');
    const [theirs] = await once(worker, 'message');
    for (let r = 0; r < ROUNDS; r++) mine.push(calibrateOffset(SAMPLES));
    await exited;
    reporter.add(
      'clock.calibrated.offset-diff.worker',
      offsetDiffFigure(mine, theirs, 'worker', 'offset'),
    );
  }

  // Same across processes (perf.now() has another origin in every process).
  {
    const child = fork(CHILD, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const exited = once(child, 'exit');
    await once(child, 'message'); // 'ready'
    child.send({ cmd: 'offset', rounds: ROUNDS, samples: SAMPLES });
    const [theirs] = await once(child, 'message');
    const mine = [];
    for (let r = 0; r < ROUNDS; r++) mine.push(calibrateOffset(SAMPLES));
    child.disconnect();
    await exited;
    reporter.add(
      'clock.calibrated.clock-diff.process',
      offsetDiffFigure(mine, theirs, 'child process', 'residual'),
    );
  }

  // Coarse clock: a ticker worker stores ms since baseNs into word 0 every 1 ms.
  {
    const sab = new SharedArrayBuffer(64);
    const w = new Int32Array(sab);
    const baseNs = process.hrtime.bigint() - 1_000_000_000n; // word starts near 1000 ms
    const worker = new Worker(WORKER, { workerData: { role: 'ticker', sab, baseNs } });
    const exited = once(worker, 'exit');
    while (Atomics.load(w, 2) < 20) await new Promise((r) => setTimeout(r, 5)); // ticking

    add(
      'clock.coarse.read',
      () => (n) => {
        let acc = 0;
        for (let i = 0; i < n; i++) acc += Atomics.load(w, 0);
        return acc % 1e6;
      },
      'Atomics.load of the ms word (ticker running)',
    );

    // Staleness: sample (real µs - word * 1000) every 5 µs, busy-polling.
    const count = quick ? 60_000 : 200_000;
    const st = new Float64Array(count);
    const ticks0 = Atomics.load(w, 2);
    const t0 = process.hrtime.bigint();
    let next = t0;
    for (let i = 0; i < count; i++) {
      next += 5000n;
      let now = process.hrtime.bigint();
      while (now < next) now = process.hrtime.bigint();
      const word = Atomics.load(w, 0);
      st[i] = Number((now - baseNs) / 1000n) - word * 1000;
    }
    const spanMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const ticks = Atomics.load(w, 2) - ticks0;
    const s = summarize(st);
    reporter.add(
      'clock.coarse.staleness',
      figure(s.median * 1000, {
        p99Ns: s.p99 * 1000,
        note:
          `real - coarse: median ${(s.median / 1000).toFixed(2)} ms, p99 ` +
          `${(s.p99 / 1000).toFixed(2)} ms, max ${(s.max / 1000).toFixed(2)} ms, min ` +
          `${(s.min / 1000).toFixed(2)} ms; ${ticks} ticks in ${spanMs.toFixed(0)} ms ` +
          `(${(spanMs / ticks).toFixed(3)} ms/tick)`,
      }),
    );
    consume(s.median);
    Atomics.store(w, 1, 1);
    await exited;
  }
}

if (isMain(import.meta.url)) await runStandalone('clock', run);
