// Helpers shared by the bench modules: command-line options, the key set, formatting.
import os from 'node:os';
import { rng } from '../native-bench/lib.mjs';

/** One tinybench sample is a batch of BATCH synchronous calls (see latency.mjs). */
export const BATCH = 1000;
/** Keys of the "100k keys" workloads. */
export const KEYS = 100_000;

// Control words of a multi-thread run (Int32Array over a SharedArrayBuffer, one per run):
// ARRIVED counts threads at the barrier, GO is set by the main thread to start them all at
// once, STOP ends a timed run.
export const ARRIVED = 0;
export const GO = 1;
export const STOP = 2;

/**
 * Command-line options of `node bench/run.mjs`:
 *   --quick            fewer iterations (CI)
 *   --threads=N        throughput over 1…N threads (default os.availableParallelism())
 *   --parts=a,b        run only these parts: native, latency, peers, acquire, threads, effective,
 *                      growth, cluster, http, redis, fleet, host
 *   --native=FILE      take the floor from a saved native-bench JSON instead of running it
 *   --json=FILE        where to write the JSON (default bench/results/latest.json)
 */
export function parseOptions(argv = process.argv.slice(2)) {
  const value = (name) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const known = [
    'native',
    'latency',
    'peers',
    'acquire',
    'threads',
    'effective',
    'growth',
    'cluster',
    'http',
    'redis',
    'fleet',
    'host',
  ];
  const parts = value('parts')?.split(',').filter(Boolean) ?? known;
  for (const p of parts) {
    if (!known.includes(p)) throw new RangeError(`--parts: unknown part "${p}" (${known})`);
  }
  const threadsArg = value('threads');
  const threads = threadsArg === undefined ? os.availableParallelism() : Number(threadsArg);
  if (!Number.isInteger(threads) || threads < 1 || threads > 256) {
    throw new RangeError(`--threads must be an integer from 1 to 256, got ${threadsArg}`);
  }
  return {
    quick: argv.includes('--quick'),
    threads,
    parts: new Set(parts),
    nativeFile: value('native'),
    jsonFile: value('json'),
  };
}

/** The 100k keys and a fixed random order of 2^20 draws among them. */
export function keySet() {
  const keys = Array.from({ length: KEYS }, (_, i) => `user:${i}`);
  const order = new Uint32Array(1 << 20);
  const rand = rng(0x5eed);
  for (let i = 0; i < order.length; i++) order[i] = Math.floor(rand() * KEYS);
  return { keys, order };
}

export function fmtNs(ns) {
  if (ns === undefined || ns === null || !Number.isFinite(ns)) return '-';
  if (ns < 1000) return `${ns.toFixed(ns < 10 ? 2 : 1)} ns`;
  if (ns < 1e6) return `${(ns / 1e3).toFixed(ns < 1e4 ? 2 : 1)} µs`;
  return `${(ns / 1e6).toFixed(2)} ms`;
}

export function fmtRatio(x) {
  if (x === undefined || x === null || !Number.isFinite(x)) return '-';
  if (x >= 100) return x.toFixed(0);
  if (x >= 10) return x.toFixed(1);
  if (x >= 0.1) return x.toFixed(2);
  return x.toPrecision(2);
}

/**
 * A row of the Redis part for one subject's figures `x`, formatted by `us` (µs in): p50, p99,
 * per call in flight, Redis CPU per decision one at a time and in flight.
 */
export function redisRow(name, x, us) {
  return [
    name,
    us(x.p50Us),
    us(x.p99Us),
    us(x.inFlightPerCallUs),
    us(x.cpuUsPerDecision),
    us(x.cpuUsPerDecisionInFlight),
  ];
}

/**
 * A row of the Redis part's ratios `k` (ours ÷ a reference): tryAcquire and consume on the hot
 * key, then on many keys.
 */
export function redisRatioRow(r, name, k) {
  const h = r.workloads.hotKey.ratios;
  const m = r.workloads.manyKeys.ratios;
  return [
    name,
    fmtRatio(h[`tryAcquire${k}`]),
    fmtRatio(h[`consume${k}`]),
    fmtRatio(m[`tryAcquire${k}`]),
    fmtRatio(m[`consume${k}`]),
  ];
}

export function fmtOps(ops) {
  if (ops === undefined || !Number.isFinite(ops)) return '-';
  return `${(ops / 1e6).toFixed(ops < 1e7 ? 2 : 1)} M/s`;
}

/**
 * A plain-text table. `columns`: [{ title, align: 'left' | 'right' }], `rows`: arrays of
 * strings (a row that is a string is printed as is, e.g. a section title).
 */
export function table(columns, rows) {
  const width = columns.map((c, i) =>
    Math.max(c.title.length, ...rows.filter(Array.isArray).map((r) => String(r[i]).length)),
  );
  const line = (cells) =>
    cells
      .map((cell, i) =>
        columns[i].align === 'left'
          ? String(cell).padEnd(width[i])
          : String(cell).padStart(width[i]),
      )
      .join('  ')
      .trimEnd();
  const out = [line(columns.map((c) => c.title)), line(width.map((w) => '-'.repeat(w)))];
  for (const r of rows) out.push(Array.isArray(r) ? line(r) : r);
  return out.join('\n');
}

/** Progress goes to stderr, so stdout stays the report. */
export function progress(msg) {
  process.stderr.write(`${msg}\n`);
}

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? Number.NaN : (s[(n - 1) >> 1] + s[n >> 1]) / 2;
};
