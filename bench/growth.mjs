// The growing key table: a TokenBucket created with room for N keys beside one
// created at 1024 keys that grew to N (appending segments as new keys arrived), deciding on
// the same N keys in the same process, in interleaved rounds. Also the cost of inserting a
// new key in each. N is 2^17 with --quick, 2^20 otherwise.
import { performance } from 'node:perf_hooks';
import { rng } from '../native-bench/lib.mjs';
import { progress } from './lib.mjs';

const DECISIONS = 1 << 20;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

export async function runGrowth({ quick }) {
  const L = await import('../dist/index.js');
  const n = quick ? 1 << 17 : 1 << 20;
  const rounds = quick ? 5 : 11;
  const keys = Array.from({ length: n }, (_, i) => `user:${i}`);
  const order = new Uint32Array(DECISIONS);
  const rand = rng(0x9e0);
  for (let i = 0; i < order.length; i++) order[i] = Math.floor(rand() * n);
  // A frozen ManualClock keeps every bucket where the inserts left it; one refill per second
  // and a huge capacity keep every decision an admission.
  const clock = new L.ManualClock();
  const make = (initial) =>
    new L.TokenBucket({
      capacity: 2 ** 24,
      refillPerSecond: 1,
      keys: initial,
      maxKeys: n,
      clock,
    });
  const subjects = { created: make(n), grown: make(1024) };
  const insertUs = {};
  for (const [name, limiter] of Object.entries(subjects)) {
    progress(
      `  growth: inserting ${n} keys into the table ${name === 'grown' ? 'grown from 1024' : `created at ${n}`}`,
    );
    const t = performance.now();
    for (const key of keys) if (!limiter.tryAcquire(key)) throw new Error(`${key} refused`);
    insertUs[name] = ((performance.now() - t) * 1000) / n;
  }
  const samples = { created: [], grown: [] };
  for (let r = 0; r < rounds; r++) {
    for (const [name, limiter] of Object.entries(subjects)) {
      const t = performance.now();
      for (let i = 0; i < DECISIONS; i++) limiter.tryAcquire(keys[order[i]]);
      samples[name].push(((performance.now() - t) * 1e6) / DECISIONS);
    }
  }
  const created = median(samples.created);
  const grown = median(samples.grown);
  return {
    keys: n,
    rounds,
    segments: subjects.grown.tableStats().segments,
    decisionNs: { created, grown },
    ratio: grown / created,
    insertUs,
    bytes: { created: subjects.created.byteLength, grown: subjects.grown.byteLength },
  };
}

export function formatGrowth(g) {
  const mib = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;
  return [
    `Growing key table: ${g.keys} keys, decisions on random keys (median of ${g.rounds} interleaved rounds)`,
    `  created at ${g.keys} keys:        ${g.decisionNs.created.toFixed(0)} ns/decision, ${g.insertUs.created.toFixed(1)} µs per new key, ${mib(g.bytes.created)}`,
    `  grown from 1024 (${g.segments} segments): ${g.decisionNs.grown.toFixed(0)} ns/decision, ${g.insertUs.grown.toFixed(1)} µs per new key, ${mib(g.bytes.grown)}`,
    `  grown ÷ created: ${g.ratio.toFixed(2)}×`,
  ].join('\n');
}
