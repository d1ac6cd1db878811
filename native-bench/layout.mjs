// Group c: the layout decision. The keyed check floor (Map.get + one clock read + Int32 GCRA
// CAS) over 1 / 10k / 100k keys, the same with 16-byte and 64-byte per-key slots, and two
// threads CAS-incrementing one word / one cache line / separate lines.
import { once } from 'node:events';
import { performance as perf } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import {
  calibrateOffset,
  figure,
  isMain,
  measureCopies,
  quantile,
  rng,
  runStandalone,
  sizes,
} from './lib.mjs';

const WORKER = new URL('./worker.mjs', import.meta.url);
const T = 1; // µs per permit
const TAU = 1 << 30; // tolerance large enough that every check is allowed and CASes
const COPIES = 3; // instances of each keyed loop, each with its own buffers and key draws

function keySet(n) {
  const keys = Array.from({ length: n }, (_, i) => `user:${i}`);
  const map = new Map();
  for (let i = 0; i < n; i++) map.set(keys[i], i);
  return { keys, map };
}

/**
 * `len` key indexes drawn uniformly from [0, n). Every loop gets its own draw (another
 * seed): loops that replayed one sequence would find the previous loop's keys still cached.
 */
function draws(n, len, seed) {
  const rand = rng(seed * 0x9e3779b1 + n);
  const idx = new Int32Array(len);
  for (let i = 0; i < len; i++) idx[i] = Math.floor(rand() * n);
  return idx;
}

const label = (n) => (n >= 1000 ? `${n / 1000}k` : String(n));

// Separate function literals, so each loop gets its own type feedback. Each check: one clock
// read (the planned default clock, as int32 µs), Map.get, a plain read of the state word,
// wrap-safe GCRA compute, one CAS; the slot layouts also bump a counter with Atomics.add.
// `j` lives in a local during a batch: no context store per check.
function floorLoop({ keys, map, idx }, st, off) {
  const mask = idx.length - 1;
  let pos = 0; // position in idx, kept across batches
  return (n) => {
    let acc = 0;
    let j = pos;
    for (let i = 0; i < n; i++) {
      const now = (perf.now() * 1000 + off) | 0;
      const s = map.get(keys[idx[j]]);
      j = (j + 1) & mask;
      const tat = st[s];
      const tat2 = (((tat - now) | 0) > 0 ? tat : now) + T;
      if (((tat2 - now) | 0) <= TAU && Atomics.compareExchange(st, s, tat, tat2 | 0) === tat) acc++;
    }
    pos = j;
    return acc;
  };
}

function floorLoopClock64({ keys, map, idx }, st, off) {
  const mask = idx.length - 1;
  let pos = 0; // position in idx, kept across batches
  return (n) => {
    let acc = 0;
    let j = pos;
    let now = 0;
    for (let i = 0; i < n; i++) {
      if ((i & 63) === 0) now = (perf.now() * 1000 + off) | 0;
      const s = map.get(keys[idx[j]]);
      j = (j + 1) & mask;
      const tat = st[s];
      const tat2 = (((tat - now) | 0) > 0 ? tat : now) + T;
      if (((tat2 - now) | 0) <= TAU && Atomics.compareExchange(st, s, tat, tat2 | 0) === tat) acc++;
    }
    pos = j;
    return acc;
  };
}

function slotLoop({ keys, map, idx }, st, off, shift) {
  const mask = idx.length - 1;
  let pos = 0; // position in idx, kept across batches
  return (n) => {
    let acc = 0;
    let j = pos;
    for (let i = 0; i < n; i++) {
      const now = (perf.now() * 1000 + off) | 0;
      const w = map.get(keys[idx[j]]) << shift;
      j = (j + 1) & mask;
      const tat = st[w];
      const tat2 = (((tat - now) | 0) > 0 ? tat : now) + T;
      if (((tat2 - now) | 0) <= TAU && Atomics.compareExchange(st, w, tat, tat2 | 0) === tat) {
        Atomics.add(st, w + 2, 1);
        acc++;
      }
    }
    pos = j;
    return acc;
  };
}

// The BigInt64 alternative in the same setting: the 16-byte slot holds a BigInt64 state word
// (ns, at byte 0) and the Int32 counter (word 2); the clock is process.hrtime.bigint(), so
// nothing is converted between Number and BigInt.
const TB = 1000n; // ns per permit
const TAUB = 1n << 60n;
function slotLoopBigInt({ keys, map, idx }, sab, byteOffset = 0) {
  const st = new BigInt64Array(sab, byteOffset);
  const i32 = new Int32Array(sab, byteOffset);
  const mask = idx.length - 1;
  let pos = 0; // position in idx, kept across batches
  return (n) => {
    let acc = 0;
    let j = pos;
    for (let i = 0; i < n; i++) {
      const now = process.hrtime.bigint();
      const s = map.get(keys[idx[j]]);
      j = (j + 1) & mask;
      const tat = st[s << 1];
      // Math.max does not take BigInt
      const tat2 = (tat > now ? tat : now) + TB;
      if (tat2 - now <= TAUB && Atomics.compareExchange(st, s << 1, tat, tat2) === tat) {
        Atomics.add(i32, (s << 2) + 2, 1);
        acc++;
      }
    }
    pos = j;
    return acc;
  };
}

async function keyed({ quick, reporter }) {
  const { batch: big, reps, warmup } = sizes(quick);
  const opts = { batch: big / 5, reps, warmup };
  const { offsetUs: off } = calibrateOffset(50);
  const len = 1 << 18;
  const copies = (n, make) => Array.from({ length: n === 1 ? 1 : COPIES }, (_, c) => make(c));
  const sets = [1, 10_000, 100_000].map((n) => {
    const { keys, map } = keySet(n);
    const ks = (seed) => ({ keys, map, idx: draws(n, len, seed) });
    // Copy c's table starts c * 5184 bytes into its buffer (64-byte aligned, another page
    // and another offset within the page), so the copies sit differently in the caches.
    const table = (bytes, c) => {
      const skew = c * 5184;
      return new Int32Array(new SharedArrayBuffer(n * bytes + skew), skew, (n * bytes) / 4);
    };
    return {
      n,
      floor: copies(n, (c) => floorLoop(ks(10 + c), table(4, c), off)),
      clock64: copies(n, (c) => floorLoopClock64(ks(20 + c), table(4, c), off)),
      s16: copies(n, (c) => slotLoop(ks(30 + c), table(16, c), off, 2)),
      s64: copies(n, (c) => slotLoop(ks(40 + c), table(64, c), off, 4)),
      big: copies(n, (c) => slotLoopBigInt(ks(50 + c), table(16, c).buffer, c * 5184)),
    };
  });
  // Every loop literal now has several closures, so V8 compiles all of them generically (no
  // function-context specialization for whichever closure happened to be optimized first),
  // as it would a limiter method shared by many instances.

  for (const { n, floor, clock64, s16, s64, big } of sets) {
    const k = label(n);
    const variants = n === 10_000 ? [floor, s16, s64, clock64] : [floor, s16, s64];
    const [f, a, b, c] = measureCopies(variants, opts);
    // Apart from the others: its BigInt garbage (scavenges) would disturb their caches.
    const [a2, g] = measureCopies([s16, big], opts);
    reporter.add(
      `layout.keyed-floor.${k}`,
      figure(f.median, {
        p99Ns: f.p99,
        note: `clock + Map.get + Int32 GCRA CAS, 4-byte state per key, ${k} key${n === 1 ? '' : 's'}`,
      }),
    );
    if (c) {
      reporter.add(
        `layout.keyed-floor.${k}.clock-per-64`,
        figure(c.median, { p99Ns: c.p99, note: 'same, one clock read per 64 checks' }),
      );
    }
    reporter.add(
      `layout.slot16.${k}`,
      figure(a.median, {
        p99Ns: a.p99,
        note: `16-byte slot (CAS word 0 + Atomics.add word 2): ×${(a.median / f.median).toFixed(2)} floor`,
      }),
    );
    reporter.add(
      `layout.slot64.${k}`,
      figure(b.median, {
        p99Ns: b.p99,
        note: `64-byte slot: ×${(b.median / f.median).toFixed(2)} floor; 16B/64B = ${(a.median / b.median).toFixed(2)}`,
      }),
    );
    reporter.add(
      `layout.slot16-bigint64.${k}`,
      figure(g.median, {
        p99Ns: g.p99,
        note: `16-byte slot, BigInt64 state + hrtime.bigint(): ×${(g.median / f.median).toFixed(2)} floor, ×${(g.median / a2.median).toFixed(2)} Int32 slot16 (${a2.median.toFixed(1)} ns beside it)`,
      }),
    );
  }
}

// Control words shared with the contention workers (see worker.mjs).
const [GEN, READY, STOP, DONE, WORD] = [0, 1, 2, 3, 8];

function waitFor(ctl, index, value, what) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const v = Atomics.load(ctl, index);
    if (v === value) return;
    if (Date.now() > deadline) throw new Error(`contention: timed out waiting for ${what}`);
    Atomics.wait(ctl, index, v, 5);
  }
}

async function contention({ quick, reporter }) {
  const { durationMs, contReps } = sizes(quick);
  const ctl = new Int32Array(new SharedArrayBuffer(64 * 4));
  const counts = new Float64Array(new SharedArrayBuffer(2 * 8));
  const words = new Int32Array(new SharedArrayBuffer(1024));
  const sleep = new Int32Array(new SharedArrayBuffer(4));
  const workers = [0, 1].map(
    (id) =>
      new Worker(WORKER, {
        workerData: {
          role: 'contention',
          id,
          ctl: ctl.buffer,
          counts: counts.buffer,
          words: words.buffer,
        },
      }),
  );
  const exited = workers.map((w) => once(w, 'exit'));
  await Promise.all(workers.map((w) => once(w, 'online')));
  let gen = 0;

  // One round: both workers increment their word (or idle on -1) for `ms`. Returns ops/s and
  // the CPU share: process CPU time / (wall time × active threads). The main thread sleeps
  // in Atomics.wait meanwhile, so a share well below 1 means the machine took a core away
  // and the threads did not really run at the same time.
  const round = (w0, w1, ms) => {
    waitFor(ctl, READY, 2, 'workers ready');
    Atomics.store(ctl, READY, 0);
    Atomics.store(ctl, DONE, 0);
    Atomics.store(ctl, WORD, w0);
    Atomics.store(ctl, WORD + 1, w1);
    words.fill(0);
    gen++;
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    Atomics.store(ctl, GEN, gen);
    Atomics.notify(ctl, GEN);
    Atomics.wait(sleep, 0, 0, ms);
    Atomics.store(ctl, STOP, gen);
    const t1 = process.hrtime.bigint();
    waitFor(ctl, DONE, 2, 'workers done');
    const t2 = process.hrtime.bigint();
    const cpu = process.cpuUsage(cpu0);
    const total = counts[0] + counts[1];
    const inWords = (w0 >= 0 ? words[w0] >>> 0 : 0) + (w1 >= 0 && w1 !== w0 ? words[w1] >>> 0 : 0);
    if (inWords !== total % 2 ** 32) throw new Error(`contention: lost updates (${w0}, ${w1})`);
    const active = (w0 >= 0 ? 1 : 0) + (w1 >= 0 ? 1 : 0);
    const share = (cpu.user + cpu.system) / (Number(t2 - t0) / 1000) / active;
    return { ops: total / (Number(t1 - t0) / 1e9), share };
  };

  // Words are 4 bytes; the buffer is at least 16-byte aligned, so words 0 and 1 share a
  // line and words 0 and 64 (256 bytes apart, beyond adjacent-line prefetch) do not.
  const variants = [
    ['layout.contention.1-thread', 0, -1, 'one thread alone (baseline)'],
    ['layout.contention.same-word', 0, 0, '2 threads, one word'],
    ['layout.contention.same-line', 0, 1, '2 threads, adjacent words of one cache line'],
    ['layout.contention.separate-lines', 0, 64, '2 threads, words 256 bytes apart'],
  ];
  for (const [, w0, w1] of variants) round(w0, w1, 30); // JIT warm-up
  // Interleaved rounds; a round with a CPU share under 0.9 is set aside and retried (at most
  // 3× contReps rounds per variant); if none clears, the figure uses all rounds and says so.
  const ok = variants.map(() => []);
  const all = variants.map(() => []);
  for (let a = 0; a < 3 * contReps && ok.some((xs) => xs.length < contReps); a++) {
    variants.forEach(([, w0, w1], i) => {
      if (ok[i].length >= contReps) return;
      const { ops, share } = round(w0, w1, durationMs);
      all[i].push(ops);
      if (share >= 0.9) ok[i].push(ops);
    });
  }
  const used = ok.map((xs, i) => Float64Array.from(xs.length > 0 ? xs : all[i]).sort());
  const medians = used.map((xs) => quantile(xs, 0.5));
  const sep = medians[3];
  variants.forEach(([name, , , note], i) => {
    const xs = used[i];
    const m = medians[i];
    const valid = ok[i].length === 0 ? ', MACHINE BUSY: no round had both cores' : '';
    reporter.add(
      name,
      figure(1e9 / m, {
        opsPerSec: m,
        note:
          `${note}; range ${(xs[0] / 1e6).toFixed(1)}-${(xs[xs.length - 1] / 1e6).toFixed(1)} M; ` +
          `×${(m / sep).toFixed(2)} of separate lines; ${ok[i].length}/${all[i].length} rounds valid${valid}`,
      }),
    );
  });

  Atomics.store(ctl, GEN, -1);
  Atomics.notify(ctl, GEN);
  await Promise.all(exited);
}

export async function run({ quick = false, reporter }) {
  await keyed({ quick, reporter });
  await contention({ quick, reporter });
}

if (isMain(import.meta.url)) await runStandalone('layout', run);
