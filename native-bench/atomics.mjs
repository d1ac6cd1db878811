// Group a: raw Atomics operations on a SharedArrayBuffer, Int32 against BigInt64, and the
// GCRA transition (load + compute + CAS) with the clock excluded.
import { figure, isMain, measureGeneric, runStandalone, sizes } from './lib.mjs';

const T = 10; // emission interval (time units per permit)
const TAU = 1000; // burst tolerance
const NOWS = 1024; // precomputed "clock" values, cycled; the state is reset at each wrap

export async function run({ quick = false, reporter }) {
  const { batch, reps, warmup } = sizes(quick);
  const opts = { batch, reps, warmup };
  const i32 = new Int32Array(new SharedArrayBuffer(64));
  const b64 = new BigInt64Array(new SharedArrayBuffer(64));
  const plain = new Int32Array(new SharedArrayBuffer(64));
  for (let i = 0; i < 16; i++) plain[i] = i;

  // Each loop comes from a factory called twice (see measureGeneric in lib.mjs).
  const add = (name, make, note) => {
    const s = measureGeneric(make, null, opts);
    reporter.add(name, figure(s.median, { p99Ns: s.p99, note }));
    return s.median;
  };

  add(
    'atomics.empty-loop',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += i & 7;
      return acc;
    },
    'loop overhead, included in every figure',
  );

  add(
    'atomics.plain-read.i32',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += plain[i & 7];
      return acc;
    },
    'non-atomic Int32Array read on a SAB',
  );

  add('atomics.load.i32', () => (n) => {
    let acc = 0;
    for (let i = 0; i < n; i++) acc += Atomics.load(i32, i & 7);
    return acc;
  });

  add(
    'atomics.cas.i32',
    () => (n) => {
      let acc = 0;
      Atomics.store(i32, 0, 0);
      for (let i = 0; i < n; i++) {
        const e = i & 1;
        acc += Atomics.compareExchange(i32, 0, e, e ^ 1);
      }
      return acc;
    },
    'successful CAS, alternating 0/1',
  );

  add('atomics.add.i32', () => (n) => {
    let acc = 0;
    for (let i = 0; i < n; i++) acc += Atomics.add(i32, 1, 1);
    return acc;
  });

  const BIG = [0n, 1n];
  add(
    'atomics.cas.bigint64',
    () => (n) => {
      let acc = 0;
      Atomics.store(b64, 0, 0n);
      for (let i = 0; i < n; i++) {
        const e = i & 1;
        const r = Atomics.compareExchange(b64, 0, BIG[e], BIG[e ^ 1]);
        if (r === BIG[e]) acc++;
      }
      return acc;
    },
    'successful CAS, alternating 0n/1n (preallocated)',
  );

  const bigOut = new Array(16).fill(0n);
  const base = 1_700_000_000; // a time-like value in the int31 range
  add(
    'atomics.convert.to-bigint',
    () => (n) => {
      for (let i = 0; i < n; i++) bigOut[i & 15] = BigInt(base + i);
      return Number(bigOut[0] & 0xffn);
    },
    'BigInt(n): Number -> BigInt, result escapes',
  );

  const bigIn = Array.from({ length: 1024 }, (_, i) => 17n * 10n ** 14n + BigInt(i) * 997n);
  add(
    'atomics.convert.to-number',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) acc += Number(bigIn[i & 1023]);
      return acc % 1e6;
    },
    'Number(b): BigInt (~1.7e15) -> Number',
  );

  // GCRA: tat2 = max(tat, now) + T; allowed iff tat2 - now <= TAU, then CAS(tat -> tat2).
  // `now` advances by T per check, so every check is allowed and every CAS is executed.
  const nows32 = Int32Array.from({ length: NOWS }, (_, i) => 1000 + i * T);
  add(
    'atomics.gcra.i32',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const k = i & (NOWS - 1);
        if (k === 0) Atomics.store(i32, 2, 0);
        const now = nows32[k];
        const tat = Atomics.load(i32, 2);
        // the ternary is faster here (Math.max handles NaN/-0)
        const tat2 = (tat > now ? tat : now) + T;
        if (tat2 - now <= TAU && Atomics.compareExchange(i32, 2, tat, tat2) === tat) acc++;
      }
      return acc;
    },
    'Atomics.load + compute + CAS, clock excluded',
  );

  add(
    'atomics.gcra.i32.plain-read',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const k = i & (NOWS - 1);
        if (k === 0) Atomics.store(i32, 3, 0);
        const now = nows32[k];
        const tat = i32[3];
        // the ternary is faster here (Math.max handles NaN/-0)
        const tat2 = (tat > now ? tat : now) + T;
        if (tat2 - now <= TAU && Atomics.compareExchange(i32, 3, tat, tat2) === tat) acc++;
      }
      return acc;
    },
    'same with a plain read before the CAS',
  );

  const nows64 = Array.from({ length: NOWS }, (_, i) => 17n * 10n ** 14n + BigInt(i * T));
  const T64 = BigInt(T);
  const TAU64 = BigInt(TAU);
  add(
    'atomics.gcra.bigint64',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const k = i & (NOWS - 1);
        if (k === 0) Atomics.store(b64, 1, 0n);
        const now = nows64[k];
        const tat = Atomics.load(b64, 1);
        // Math.max does not take BigInt
        const tat2 = (tat > now ? tat : now) + T64;
        if (tat2 - now <= TAU64 && Atomics.compareExchange(b64, 1, tat, tat2) === tat) acc++;
      }
      return acc;
    },
    'BigInt arithmetic, BigInt clock value',
  );

  // The other way to use a BigInt64 word: Number clock, compute in Number, convert both ways.
  const nowsNum = Float64Array.from({ length: NOWS }, (_, i) => 1_700_000_000_000 + i * T);
  add(
    'atomics.gcra.bigint64.number-math',
    () => (n) => {
      let acc = 0;
      for (let i = 0; i < n; i++) {
        const k = i & (NOWS - 1);
        if (k === 0) Atomics.store(b64, 2, 0n);
        const now = nowsNum[k];
        const raw = Atomics.load(b64, 2);
        const tat = Number(raw);
        // the ternary is faster here (Math.max handles NaN/-0)
        const tat2 = (tat > now ? tat : now) + T;
        if (tat2 - now <= TAU && Atomics.compareExchange(b64, 2, raw, BigInt(tat2)) === raw) acc++;
      }
      return acc;
    },
    'Number(load) + Number math + CAS(raw, BigInt(tat2))',
  );
}

if (isMain(import.meta.url)) await runStandalone('atomics', run);
