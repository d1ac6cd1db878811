// The piscina task of threads.mjs and effective-limit.mjs: one task occupies one worker
// thread. It prepares, waits at the shared-buffer barrier, runs, and returns its counts.
//
// Control words: see ARRIVED / GO / STOP in lib.mjs.
import { performance } from 'node:perf_hooks';
import { attach } from '../dist/index.js';
import { ARRIVED, GO, STOP } from './lib.mjs';

const BARRIER_TIMEOUT_MS = 60_000;
const STRIDE = 1024; // decisions between two reads of STOP

function barrier(ctl) {
  Atomics.add(ctl, ARRIVED, 1);
  Atomics.notify(ctl, ARRIVED);
  if (Atomics.wait(ctl, GO, 0, BARRIER_TIMEOUT_MS) === 'timed-out') {
    throw new Error('bench thread: barrier timed out (main thread never said GO)');
  }
}

// Separate loops for the limiter and the floor, so each call site sees one kind of object.
function limiterLoop(limiter, key, ctl) {
  let decisions = 0;
  let admitted = 0;
  const t0 = process.hrtime.bigint();
  while (Atomics.load(ctl, STOP) === 0) {
    for (let i = 0; i < STRIDE; i++) if (limiter.tryAcquire(key)) admitted++;
    decisions += STRIDE;
  }
  return { decisions, admitted, ns: Number(process.hrtime.bigint() - t0) };
}

// The floor of one decision: one clock read (as the limiters read it) and a GCRA transition
// by CAS on one Int32 word, retried when another thread won the race (as the limiters do).
function floorLoop(words, w, offsetUs, ctl) {
  let decisions = 0;
  const t0 = process.hrtime.bigint();
  while (Atomics.load(ctl, STOP) === 0) {
    for (let i = 0; i < STRIDE; i++) {
      const now = (performance.now() * 1000 + offsetUs) | 0;
      for (;;) {
        const tat = words[w];
        const next = ((((tat - now) | 0) > 0 ? tat : now) + 1) | 0;
        if (((next - now) | 0) > 1 << 30) break; // never: the TAT starts at now (above)
        if (Atomics.compareExchange(words, w, tat, next) === tat) break;
      }
    }
    decisions += STRIDE;
  }
  return { decisions, admitted: decisions, ns: Number(process.hrtime.bigint() - t0) };
}

function calibrate() {
  let best = Number.POSITIVE_INFINITY;
  let offset = 0;
  for (let i = 0; i < 64; i++) {
    const a = performance.now();
    const hr = Number(process.hrtime.bigint() / 1000n);
    const b = performance.now();
    if (b - a < best) {
      best = b - a;
      offset = hr - ((a + b) / 2) * 1000;
    }
  }
  return offset;
}
const OFFSET_US = calibrate();

function throughput({ subject, handle, words, hot, index, ctl, warmup }) {
  if (subject === 'floor') {
    const w = new Int32Array(words);
    // Own word per thread: 256 bytes apart (beyond adjacent-line prefetch), as native-bench.
    const word = hot ? 0 : 64 * (index + 1);
    // The TAT starts at now (the first thread to get here sets it): from the buffer's 0, a
    // `now | 0` more than 2^30 µs away (a quarter of the time: the host's µs wrap int32
    // every 71.6 minutes) read as past the tolerance, and the loop never did its CAS.
    Atomics.compareExchange(w, word, 0, (performance.now() * 1000 + OFFSET_US) | 0);
    barrier(ctl);
    return floorLoop(w, word, OFFSET_US, ctl);
  }
  const limiter = attach(handle);
  const key = hot ? 'hot' : `thread:${index}`;
  // Claims the key's slot and fills this thread's key cache before the clock starts.
  for (let i = 0; i < warmup; i++) limiter.tryAcquire(key);
  barrier(ctl);
  return limiterLoop(limiter, key, ctl);
}

// ---- effective limit: how many of `attempts` one thread gets admitted ---------------------
async function effective({ subject, handle, limit, attempts, ctl }) {
  let tryOne;
  if (subject === 'ours') {
    const limiter = attach(handle);
    tryOne = () => limiter.tryAcquire('user:1');
  } else if (subject === 'rate-limiter-flexible') {
    const { RateLimiterMemory } = await import('rate-limiter-flexible');
    const rl = new RateLimiterMemory({ points: limit, duration: 3600 });
    tryOne = () =>
      rl.consume('user:1').then(
        () => true,
        () => false,
      );
  } else if (subject === 'limiter') {
    const { RateLimiter } = await import('limiter');
    const rl = new RateLimiter({ tokensPerInterval: limit, interval: 'hour' });
    tryOne = () => rl.tryRemoveTokens(1);
  } else if (subject === 'bottleneck') {
    const { default: Bottleneck } = await import('bottleneck');
    const b = new Bottleneck({
      reservoir: limit,
      highWater: 0,
      strategy: Bottleneck.strategy.OVERFLOW,
    });
    tryOne = () =>
      b
        .schedule(() => Promise.resolve())
        .then(
          () => true,
          () => false,
        );
  } else {
    throw new RangeError(`effective: unknown subject ${subject}`);
  }
  barrier(ctl);
  let admitted = 0;
  for (let i = 0; i < attempts; i++) if (await tryOne()) admitted++;
  return { admitted, attempts };
}

export default function task(t) {
  if (t.kind === 'throughput') return throughput(t);
  if (t.kind === 'effective') return effective(t);
  throw new RangeError(`bench thread: unknown task kind ${t.kind}`);
}
