// npm run bench [-- --quick] [-- --json path]
// Per-decision latency of every algorithm, allowed and refused, on 1 key and on 100k keys,
// beside the floor measured in the same run (see native-bench/ for the full floor suite).
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Bench } from 'tinybench';
import {
  Concurrency,
  FixedWindow,
  LeakyBucket,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
} from '../dist/index.js';

const quick = process.argv.includes('--quick');
const only = process.argv.find((a) => a.startsWith('--only='))?.slice('--only='.length);
// One tinybench sample is a batch of BATCH calls: a single call (~100 ns) is below what
// a timer read can resolve. Percentiles are therefore over batches.
const BATCH = 1000;
const KEYS = 100_000;
const time = quick ? 150 : 1000;

const keys = Array.from({ length: KEYS }, (_, i) => `user:${i}`);
const order = new Uint32Array(1 << 20);
for (let i = 0; i < order.length; i++) order[i] = Math.floor(Math.random() * KEYS);
let cursor = 0;
let sink = 0;

// ---- floors ---------------------------------------------------------------------------
const floorWords = new Int32Array(new SharedArrayBuffer(64));
const offsetUs = Number(process.hrtime.bigint() / 1000n) - performance.now() * 1000;
function floorOne() {
  const now = Math.floor(performance.now() * 1000 + offsetUs) | 0;
  const tat = floorWords[0];
  const base = tat > now ? tat : now;
  const next = (base + 1) | 0;
  if (next - now <= 1 << 30) sink += Atomics.compareExchange(floorWords, 0, tat, next) === tat;
}
const slotOf = new Map(keys.map((k, i) => [k, i]));
const keyedWords = new Int32Array(new SharedArrayBuffer(KEYS * 16));
function floorKeyed() {
  const now = Math.floor(performance.now() * 1000 + offsetUs) | 0;
  const w = slotOf.get(keys[order[cursor++ & 0xfffff]]) * 4;
  const tat = keyedWords[w];
  const base = tat > now ? tat : now;
  sink += Atomics.compareExchange(keyedWords, w, tat, (base + 1) | 0) === tat;
}

// ---- limiters -------------------------------------------------------------------------
// "allowed": limits so large that every call is granted; "refused": exhausted first.
const algorithms = [
  {
    name: 'TokenBucket',
    allow: (keys) => new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys }),
    refuse: (keys) => new TokenBucket({ capacity: 1, refillPerSecond: 1e-6, keys }),
  },
  {
    name: 'LeakyBucket',
    // A leaky bucket grants at most ratePerSecond (≤ 1e6/s) on one key, below the rate
    // a loop asks at: its allowed path is measured on 100k keys only.
    allow: (keys) => new LeakyBucket({ capacity: 1, ratePerSecond: 1e6, keys }),
    noAllowedOneKey: true,
    refuse: (keys) => new LeakyBucket({ capacity: 1, ratePerSecond: 1e-6, keys }),
  },
  {
    name: 'FixedWindow',
    allow: (keys) => new FixedWindow({ limit: 2 ** 20, windowMs: 1000, keys }),
    resetEachBatch: true,
    refuse: (keys) => new FixedWindow({ limit: 1, windowMs: 2 ** 30, keys }),
  },
  {
    name: 'SlidingWindow',
    allow: (keys) => new SlidingWindow({ limit: 4000, windowMs: 1000, keys }),
    resetEachBatch: true,
    refuse: (keys) => new SlidingWindow({ limit: 1, windowMs: 2 ** 30, keys }),
  },
  {
    name: 'SlidingLog',
    // A 1 µs window: the log turns over about as fast as the loop asks.
    allow: (keys) => new SlidingLog({ limit: keys === 1 ? 64 : 16, windowMs: 0.001, keys }),
    refuse: (keys) => new SlidingLog({ limit: 1, windowMs: 2 ** 30, keys }),
  },
  {
    name: 'Concurrency',
    allow: (keys) => new Concurrency({ limit: 2 ** 27, keys }),
    refuse: (keys) => new Concurrency({ limit: 1, keys }),
  },
];

function batch(fn) {
  return () => {
    for (let i = 0; i < BATCH; i++) fn();
  };
}

const bench = new Bench({ time, warmupTime: quick ? 50 : 200 });
bench.add('floor: clock + Int32 GCRA CAS (1 key)', batch(floorOne));
bench.add('floor: Map.get + clock + CAS (100k keys)', batch(floorKeyed));
for (const a of algorithms) {
  if (only && a.name !== only) continue;
  const one = a.allow(1);
  const oneRefused = a.refuse(1);
  while (oneRefused.tryAcquire());
  const many = a.allow(KEYS);
  // Steady state: every key already has its slot (and this thread's cache entry).
  for (const k of keys) {
    many.tryAcquire(k);
    if (a.name === 'Concurrency') many.release(k);
  }
  const manyRefused = a.refuse(KEYS);
  for (const k of keys) while (manyRefused.tryAcquire(k));
  const release = a.name === 'Concurrency';
  if (!a.noAllowedOneKey) {
    bench.add(release ? `${a.name} acquire+release, 1 key` : `${a.name} allowed, 1 key`, () => {
      // Windows with finite limits start each batch from a fresh window (one reset
      // per 1000 calls).
      if (a.resetEachBatch) one.reset();
      for (let i = 0; i < BATCH; i++) {
        if (!one.tryAcquire()) sink++;
        if (release) one.release();
      }
    });
  }
  bench.add(
    `${a.name} refused, 1 key`,
    batch(() => {
      if (!oneRefused.tryAcquire()) sink++;
    }),
  );
  bench.add(
    release ? `${a.name} acquire+release, 100k keys` : `${a.name} allowed, 100k keys`,
    batch(() => {
      const k = keys[order[cursor++ & 0xfffff]];
      if (!many.tryAcquire(k)) sink++;
      if (release) many.release(k);
    }),
  );
  bench.add(
    `${a.name} refused, 100k keys`,
    batch(() => {
      if (!manyRefused.tryAcquire(keys[order[cursor++ & 0xfffff]])) sink++;
    }),
  );
}

bench.addEventListener('cycle', (e) => {
  const t = e.task;
  process.stderr.write(
    `  measured ${t.name}: ${((t.result.latency.p50 * 1e6) / BATCH).toFixed(1)} ns\n`,
  );
});

const ns = (ms) => (ms * 1e6) / BATCH;

if (only) {
  // Child: one algorithm, with its own floors, in a process of its own (V8's inline
  // caches would otherwise see six limiter classes at one call site).
  await bench.run();
  const rows = bench.tasks.map((t) => ({
    name: t.name,
    meanNs: ns(t.result.latency.mean),
    p50Ns: ns(t.result.latency.p50),
    p99Ns: ns(t.result.latency.p99),
  }));
  process.stdout.write(`${JSON.stringify({ rows, sink })}\n`);
} else {
  console.log(
    `atomic-limiter bench (${quick ? 'quick' : 'full'}), ${os.cpus().length} CPUs, Node ${process.version}`,
  );
  const rows = [];
  for (const a of algorithms) {
    console.log(`${a.name}…`);
    const child = spawnSync(
      process.execPath,
      [fileURLToPath(import.meta.url), `--only=${a.name}`, ...(quick ? ['--quick'] : [])],
      { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' },
    );
    if (child.status !== 0) throw new Error(`bench for ${a.name} failed (exit ${child.status})`);
    const { rows: got } = JSON.parse(child.stdout.trim().split('\n').pop());
    const floorOne = got[0].p50Ns;
    const floorKeyed = got[1].p50Ns;
    for (const r of got.slice(2)) {
      const keyed = r.name.includes('100k');
      rows.push({
        ...r,
        floorP50Ns: keyed ? floorKeyed : floorOne,
        ratioToFloor: r.p50Ns / (keyed ? floorKeyed : floorOne),
      });
    }
    rows.push(
      { name: `  floor (1 key) in ${a.name}'s run`, ...got[0], ratioToFloor: 1 },
      { name: `  floor (100k keys) in ${a.name}'s run`, ...got[1], ratioToFloor: 1 },
    );
  }
  console.log(
    '\nper decision (ns; p50/p99 over batches of 1000 calls; ×floor = p50 / floor p50 of the same process)',
  );
  console.log(
    `${'workload'.padEnd(46)}${'mean'.padStart(8)}${'p50'.padStart(8)}${'p99'.padStart(8)}${'×floor'.padStart(8)}`,
  );
  for (const r of rows) {
    console.log(
      `${r.name.padEnd(46)}${r.meanNs.toFixed(1).padStart(8)}${r.p50Ns.toFixed(1).padStart(8)}${r.p99Ns.toFixed(1).padStart(8)}${r.ratioToFloor.toFixed(2).padStart(8)}`,
    );
  }
  const out = new URL('./results/', import.meta.url);
  mkdirSync(out, { recursive: true });
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    cpus: os.cpus().length,
    cpu: os.cpus()[0]?.model,
    quick,
    batch: BATCH,
    rows,
  };
  writeFileSync(new URL('latest.json', out), `${JSON.stringify(result, null, 2)}\n`);
  console.log('\nJSON: bench/results/latest.json');
}
