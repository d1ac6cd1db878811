// Shared helpers for the native-bench groups: batch timing, percentiles, table output,
// main-module detection and the hrtime/performance.now calibration.
import { realpathSync } from 'node:fs';
import { performance as perf } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { isMainThread } from 'node:worker_threads';

/** Everything a benchmark loop returns is folded in here so V8 cannot drop the loop. */
/** Deterministic PRNG (mulberry32): every run, and every subject, draws the same keys. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const sink = { value: 0 };

export function consume(x) {
  sink.value = (sink.value + (Number(x) % 1e9)) % 1e12;
}

/** True when `metaUrl` is the script that `node <file>` started (never inside a worker). */
export function isMain(metaUrl) {
  if (!isMainThread || !process.argv[1]) return false;
  try {
    return realpathSync(fileURLToPath(metaUrl)) === realpathSync(process.argv[1]);
  } catch {
    return false;
  }
}

/** Nearest-rank quantile of an ascending-sorted array. */
export function quantile(sorted, q) {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

export function summarize(values) {
  const s = Float64Array.from(values).sort();
  return {
    median: quantile(s, 0.5),
    p99: quantile(s, 0.99),
    min: s[0],
    max: s[s.length - 1],
  };
}

/**
 * Times `fn(batch)` `reps` times with process.hrtime.bigint() after `warmup` untimed
 * batches. `fn` runs a tight loop of `batch` operations and returns a number derived from
 * the results. Returns per-op ns over batches: median, p99, min, max.
 */
export function measure(fn, { batch, reps, warmup = 3 }) {
  let acc = 0;
  for (let i = 0; i < warmup; i++) acc += fn(batch);
  const perOp = new Float64Array(reps);
  for (let r = 0; r < reps; r++) {
    const t0 = process.hrtime.bigint();
    acc += fn(batch);
    const t1 = process.hrtime.bigint();
    perOp[r] = Number(t1 - t0) / batch;
  }
  consume(acc);
  return summarize(perOp);
}

/**
 * measure() of the loop `make(ctx)` returns, after creating and dropping one closure from
 * the same literal: V8 then compiles the measured closure generically, as it would a method
 * shared by many limiters, instead of specializing it to the constants it closes over
 * (which can flatter a loop by 2-20 ns; see README).
 */
export function measureGeneric(make, ctx, opts) {
  make(ctx);
  return measure(make(ctx), opts);
}

/**
 * Like measure() for several loops compared with each other: after warming each up, the
 * batches are interleaved (fn0, fn1, … fn0, fn1, …) so that noise from other tenants of a
 * shared machine lands on every variant alike. Returns one summary per function.
 */
export function measureInterleaved(fns, { batch, reps, warmup = 3 }) {
  let acc = 0;
  for (const fn of fns) for (let i = 0; i < warmup; i++) acc += fn(batch);
  const perOp = fns.map(() => new Float64Array(reps));
  for (let r = 0; r < reps; r++) {
    for (let k = 0; k < fns.length; k++) {
      const t0 = process.hrtime.bigint();
      acc += fns[k](batch);
      const t1 = process.hrtime.bigint();
      perOp[k][r] = Number(t1 - t0) / batch;
    }
  }
  consume(acc);
  return perOp.map((samples) => ({ ...summarize(samples), samples }));
}

/**
 * measureInterleaved() over `copies` instances of each variant (`variants[v][c]`: the loop
 * of variant v, copy c, each with its own buffers), so that no figure hangs on where one
 * buffer happened to land in memory. `reps` batches per variant are split over the copies.
 * Returns one summary per variant over all its batches.
 */
export function measureCopies(variants, { batch, reps, warmup = 3 }) {
  const copies = variants[0].length;
  const fns = [];
  for (let c = 0; c < copies; c++) for (const v of variants) fns.push(v[c]);
  const per = measureInterleaved(fns, { batch, reps: Math.ceil(reps / copies), warmup });
  return variants.map((_, v) => {
    const all = [];
    for (let c = 0; c < copies; c++) all.push(...per[c * variants.length + v].samples);
    return summarize(all);
  });
}

/** Batch sizes and repetitions for a full run and for --quick. */
export function sizes(quick) {
  return quick
    ? { batch: 200_000, reps: 10, warmup: 2, samples: 1000, durationMs: 100, contReps: 3 }
    : { batch: 1_000_000, reps: 25, warmup: 3, samples: 3000, durationMs: 250, contReps: 7 };
}

const round2 = (x) => Math.round(x * 100) / 100;

/** Builds a figure object of the JSON shape { medianNs, p99Ns?, opsPerSec?, note? }. */
export function figure(medianNs, extra = {}) {
  const f = { medianNs: round2(medianNs) };
  if (extra.p99Ns !== undefined) f.p99Ns = round2(extra.p99Ns);
  if (extra.opsPerSec !== undefined) f.opsPerSec = Math.round(extra.opsPerSec);
  if (extra.note) f.note = extra.note;
  return f;
}

export function fmtNs(ns) {
  if (!Number.isFinite(ns)) return '-';
  const a = Math.abs(ns);
  if (a < 10) return `${ns.toFixed(2)} ns`;
  if (a < 1000) return `${ns.toFixed(1)} ns`;
  if (a < 1e6) return `${(ns / 1e3).toFixed(a < 1e4 ? 2 : 1)} µs`;
  return `${(ns / 1e6).toFixed(2)} ms`;
}

export function fmtOps(ops) {
  return `${(ops / 1e6).toFixed(ops < 1e7 ? 2 : 1)} M ops/s`;
}

export function formatLine(name, f) {
  const p99 = f.p99Ns !== undefined ? `p99 ${fmtNs(f.p99Ns)}` : '';
  const ops = f.opsPerSec !== undefined ? fmtOps(f.opsPerSec) : '';
  const note = f.note ? `  ${f.note}` : '';
  return `${name.padEnd(44)} ${fmtNs(f.medianNs).padStart(10)}  ${p99.padEnd(15)} ${ops.padStart(15)}${note}`;
}

export function header(title) {
  return `\n== ${title} ${'='.repeat(Math.max(0, 70 - title.length))}\n${'figure'.padEnd(44)} ${'median'.padStart(10)}  ${'p99'.padEnd(15)} ${'throughput'.padStart(15)}  note`;
}

/** Collects figures and prints one line per figure as it arrives when `print` is set. */
export function createReporter({ print = false } = {}) {
  const figures = {};
  return {
    figures,
    print,
    add(name, f) {
      figures[name] = f;
      if (print) console.log(formatLine(name, f));
    },
    log(...args) {
      if (print) console.log(...args);
    },
  };
}

/** Runs one group module on its own: `node native-bench/<group>.mjs [--quick]`. */
export async function runStandalone(title, run) {
  const quick = process.argv.includes('--quick');
  const reporter = createReporter({ print: true });
  const t0 = performance.now();
  reporter.log(header(`${title}${quick ? ' (quick)' : ''}`));
  await run({ quick, reporter });
  reporter.log(
    `\n${title} done in ${((performance.now() - t0) / 1000).toFixed(1)} s (checksum ${sink.value})`,
  );
}

/**
 * Offset (µs) such that `perf.now() * 1000 + offset` is the host's monotonic clock
 * (process.hrtime) in µs. Takes the sample with the smallest bracketing interval
 * perf.now() / hrtime.bigint() / perf.now() out of `samples`. Then checks the result the
 * other way round (hrtime / perf.now / hrtime, best of `samples`): `residualUs` is
 * calibrated clock minus hrtime. hrtime is one clock for every thread and process of the
 * host, so the difference of two residuals is how far apart two calibrated clocks are.
 */
export function calibrateOffset(samples = 50) {
  const us = (h) => Number(h / 1000n) + Number(h % 1000n) / 1000;
  let best = Number.POSITIVE_INFINITY;
  let offset = 0;
  for (let i = 0; i < samples; i++) {
    const p0 = perf.now();
    const h = process.hrtime.bigint();
    const p1 = perf.now();
    const err = (p1 - p0) * 1000;
    if (err < best) {
      best = err;
      offset = us(h) - ((p0 + p1) / 2) * 1000;
    }
  }
  let bestR = Number.POSITIVE_INFINITY;
  let residual = 0;
  for (let i = 0; i < samples; i++) {
    const h0 = process.hrtime.bigint();
    const p = perf.now();
    const h1 = process.hrtime.bigint();
    const err = Number(h1 - h0) / 1000;
    if (err < bestR) {
      bestR = err;
      residual = p * 1000 + offset - (us(h0) + us(h1)) / 2;
    }
  }
  return {
    offsetUs: offset,
    errUs: best,
    residualUs: residual,
    residualErrUs: bestR,
    timeOrigin: perf.timeOrigin,
  };
}
