// What latency.mjs measures: our six limiters and the three peers. Each subject's `tasks()`
// builds its limiters (in steady state: every key already has its slot / record) and returns
// the loops to time. A loop runs `batch` decisions; latency.mjs divides by it.
//
// Only one subject is loaded per process (see latency.mjs), so each import below is used by
// exactly one child and V8 sees one limiter class at each call site.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { BATCH, KEYS } from './lib.mjs';

let sink = 0;
export const getSink = () => sink;
// Calls refused in loops measured as allowed: latency.mjs fails a subject that has more than
// a batch of them (a row would then time refusals under the name of grants).
let refusedAllowed = 0;
export const getRefusedAllowed = () => refusedAllowed;

// ---- floors, measured in every child beside its subject ---------------------------------
export function floorTasks({ keys, order }) {
  let cursor = 0;
  const words = new Int32Array(new SharedArrayBuffer(64));
  // The clock read as a limiter reads it (performance.now() × 1000 + an offset), counted
  // from this setup (plus 1 ms) rather than from the host's boot: so `now | 0` stays far
  // from the int32 wrap for the 35 minutes after it, and the GCRA below does its CAS on every
  // call. From the boot, the low 32 bits of the µs wrap every 71.6 minutes, and for a
  // quarter of those (`now | 0` below −2^30) the word's initial 0 looked more than 2^30 µs
  // ahead of now: the loop skipped its CAS on every call and timed the clock read alone
  // (the floor's "33 ns runs", against 41–44 ns).
  const offsetUs = 1000 - performance.now() * 1000;
  const slotOf = new Map(keys.map((k, i) => [k, i]));
  const keyed = new Int32Array(new SharedArrayBuffer(KEYS * 16));
  return [
    {
      name: 'floor: clock + Int32 GCRA CAS (1 key)',
      floor: 1,
      fn: () => {
        for (let i = 0; i < BATCH; i++) {
          const now = Math.floor(performance.now() * 1000 + offsetUs) | 0;
          const tat = words[0];
          // the ternary is faster (Math.max handles NaN/-0)
          const base = tat > now ? tat : now;
          const next = (base + 1) | 0;
          if (next - now <= 1 << 30) sink += Atomics.compareExchange(words, 0, tat, next) === tat;
        }
      },
    },
    {
      name: 'floor: Map.get + clock + CAS (100k keys)',
      floor: KEYS,
      fn: () => {
        for (let i = 0; i < BATCH; i++) {
          const now = Math.floor(performance.now() * 1000 + offsetUs) | 0;
          const w = slotOf.get(keys[order[cursor++ & 0xfffff]]) * 4;
          const tat = keyed[w];
          // the ternary is faster (Math.max handles NaN/-0)
          const base = tat > now ? tat : now;
          sink += Atomics.compareExchange(keyed, w, tat, (base + 1) | 0) === tat;
        }
      },
    },
  ];
}

// ---- our limiters -------------------------------------------------------------------------
// "allowed": limits so large that every call is granted; "refused": exhausted first.
const ALGORITHMS = [
  {
    name: 'TokenBucket',
    allow: (L, keys) => new L.TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys }),
    refuse: (L, keys) => new L.TokenBucket({ capacity: 1, refillPerSecond: 1e-6, keys }),
    // consume() too: what the HTTP middleware and chain() call (a Decision per call).
    consume: true,
    // A loop asks 10-25 M/s, the bucket refills 1 M/s (past that it would be a wide one):
    // over a full run one key would run dry. Full again each batch, as the windows.
    resetEachBatch: true,
  },
  {
    name: 'LeakyBucket',
    // A leaky bucket grants at most ratePerSecond (≤ 1e6/s) on one key, below the rate a
    // loop asks at: its allowed path is measured on 100k keys only.
    allow: (L, keys) => new L.LeakyBucket({ capacity: 1, ratePerSecond: 1e6, keys }),
    noAllowedOneKey: true,
    refuse: (L, keys) => new L.LeakyBucket({ capacity: 1, ratePerSecond: 1e-6, keys }),
  },
  {
    name: 'FixedWindow',
    allow: (L, keys) => new L.FixedWindow({ limit: 2 ** 20, windowMs: 1000, keys }),
    resetEachBatch: true,
    refuse: (L, keys) => new L.FixedWindow({ limit: 1, windowMs: 2 ** 30, keys }),
  },
  {
    name: 'SlidingWindow',
    allow: (L, keys) => new L.SlidingWindow({ limit: 4000, windowMs: 1000, keys }),
    resetEachBatch: true,
    refuse: (L, keys) => new L.SlidingWindow({ limit: 1, windowMs: 2 ** 30, keys }),
  },
  {
    // The segmented window (exact to a segment): 10 segments, read on every decision.
    name: 'SlidingWindow segments: 10',
    allow: (L, keys) => new L.SlidingWindow({ limit: 4000, windowMs: 1000, segments: 10, keys }),
    resetEachBatch: true,
    refuse: (L, keys) => new L.SlidingWindow({ limit: 1, windowMs: 2 ** 30, segments: 10, keys }),
  },
  {
    name: 'SlidingLog',
    // A 1 µs window: the log turns over about as fast as the loop asks.
    allow: (L, keys) => new L.SlidingLog({ limit: keys === 1 ? 64 : 16, windowMs: 0.001, keys }),
    refuse: (L, keys) => new L.SlidingLog({ limit: 1, windowMs: 2 ** 30, keys }),
  },
  {
    name: 'Concurrency',
    allow: (L, keys) => new L.Concurrency({ limit: 2 ** 27, keys }),
    refuse: (L, keys) => new L.Concurrency({ limit: 1, keys }),
  },
  // Wide tables (a 64-bit state, one 64-bit CAS): options past the 32-bit word's ranges.
  {
    name: 'TokenBucket wide',
    allow: (L, keys) => new L.TokenBucket({ capacity: 2 ** 31 - 1, refillPerSecond: 1e9, keys }),
    refuse: (L, keys) => new L.TokenBucket({ capacity: 2 ** 31 - 1, refillPerSecond: 1e-6, keys }),
    exhaust: 2 ** 31 - 1,
  },
  {
    name: 'FixedWindow wide',
    allow: (L, keys) => new L.FixedWindow({ limit: 2 ** 31 - 1, windowMs: 1000, keys }),
    resetEachBatch: true,
    refuse: (L, keys) => new L.FixedWindow({ limit: 2 ** 31 - 1, windowMs: 2 ** 31, keys }),
    exhaust: 2 ** 31 - 1,
  },
  {
    name: 'SlidingWindow wide',
    allow: (L, keys) => new L.SlidingWindow({ limit: 2 ** 31 - 1, windowMs: 1000, keys }),
    resetEachBatch: true,
    refuse: (L, keys) => new L.SlidingWindow({ limit: 2 ** 31 - 1, windowMs: 2 ** 31, keys }),
    exhaust: 2 ** 31 - 1,
  },
  {
    name: 'Concurrency wide',
    allow: (L, keys) => new L.Concurrency({ limit: 2 ** 31 - 1, keys }),
    refuse: (L, keys) => new L.Concurrency({ limit: 2 ** 31 - 1, keys }),
    exhaust: 2 ** 31 - 1,
  },
];

/**
 * Every one of the six classes does work in this process, through every method, allowed
 * and refused, on the default key and on keys, until V8 has optimised what it runs: what
 * an application combining several algorithms does. latency.mjs measures our limiters
 * again after this (condition 'six classes').
 */
export async function warmAllClasses({ keys }) {
  const L = await import('../dist/index.js');
  const small = { keys: 1000, queueLimit: 4 };
  const limiters = [
    new L.TokenBucket({ capacity: 4, refillPerSecond: 1000, ...small }),
    new L.LeakyBucket({ capacity: 4, ratePerSecond: 1000, ...small }),
    new L.FixedWindow({ limit: 4, windowMs: 10, ...small }),
    new L.SlidingWindow({ limit: 4, windowMs: 10, ...small }),
    new L.SlidingLog({ limit: 4, windowMs: 10, ...small }),
    new L.Concurrency({ limit: 4, ...small }),
  ];
  for (let round = 0; round < 2000; round++) {
    for (const l of limiters) {
      for (const key of [undefined, keys[round % 500], round % 7]) {
        const took = l.tryAcquire(key) + l.consume(key, 2).allowed * 2;
        if (l.stats(key).available < 0) sink++;
        if (took > 0) {
          if (l.algorithm === 'Concurrency') l.release(key, took);
          else l.refund(key, took);
        }
        while (l.tryAcquire(key));
      }
      if (round % 100 === 0) {
        l.reset();
        (await l.acquire(undefined, 1)).release();
      }
    }
  }
  for (const l of limiters) l.close();
}

async function oursTasks(a, { keys, order }) {
  const L = await import('../dist/index.js');
  let cursor = 0;
  const one = a.allow(L, 1);
  // Wide limits are exhausted in one call of `exhaust` permits, then one at a time.
  const exhaust = (l, key) => {
    if (a.exhaust) l.tryAcquire(key, a.exhaust);
    while (l.tryAcquire(key));
  };
  const oneRefused = a.refuse(L, 1);
  exhaust(oneRefused);
  const many = a.allow(L, KEYS);
  const release = a.name.startsWith('Concurrency');
  // Steady state: every key already has its slot (and this thread's cache entry).
  for (const k of keys) {
    many.tryAcquire(k);
    if (release) many.release(k);
  }
  const manyRefused = a.refuse(L, KEYS);
  for (const k of keys) exhaust(manyRefused, k);
  const allowed = release ? 'acquire+release' : 'allowed';
  const call = release ? 'tryAcquire + release' : 'tryAcquire';
  const tasks = [];
  if (!a.noAllowedOneKey) {
    tasks.push({
      outcome: allowed,
      keys: 1,
      call,
      fn: () => {
        // Windows with finite limits start each batch from a fresh window (one reset per
        // 1000 calls).
        if (a.resetEachBatch) one.reset();
        for (let i = 0; i < BATCH; i++) {
          if (!one.tryAcquire()) refusedAllowed++;
          if (release) one.release();
        }
      },
    });
  }
  if (a.consume) {
    const byConsume = a.allow(L, 1); // its own key: the tryAcquire loop spends none of it
    tasks.push({
      outcome: 'allowed by consume()',
      keys: 1,
      call: 'consume',
      fn: () => {
        if (a.resetEachBatch) byConsume.reset();
        for (let i = 0; i < BATCH; i++) if (!byConsume.consume().allowed) refusedAllowed++;
      },
    });
  }
  tasks.push(
    {
      outcome: 'refused',
      keys: 1,
      call: 'tryAcquire',
      fn: () => {
        for (let i = 0; i < BATCH; i++) if (!oneRefused.tryAcquire()) sink++;
      },
    },
    {
      outcome: allowed,
      keys: KEYS,
      call,
      fn: () => {
        for (let i = 0; i < BATCH; i++) {
          const k = keys[order[cursor++ & 0xfffff]];
          if (!many.tryAcquire(k)) refusedAllowed++;
          if (release) many.release(k);
        }
      },
    },
    {
      outcome: 'refused',
      keys: KEYS,
      call: 'tryAcquire',
      fn: () => {
        for (let i = 0; i < BATCH; i++) {
          if (!manyRefused.tryAcquire(keys[order[cursor++ & 0xfffff]])) sink++;
        }
      },
    },
  );
  return tasks.map((t) => ({ ...t, batch: BATCH, primary: true }));
}

// ---- our TokenBucket on a CoarseClock, beside `limiter`'s TokenBucket ---------------------
// In one process, in interleaved passes: the figure is a ratio (limiter ÷ ours), so both
// sides share the moment. `limiter` has no keys: 100k keys is Map.get + tryRemoveTokens, as
// in limiterTasks. The clock reads and the clock's staleness are measured here too.
const COARSE_RESOLUTION_MS = 1;

async function coarseTasks(ctx) {
  const L = await import('../dist/index.js');
  const { keys, order } = ctx;
  let cursor = 0;
  const clock = new L.CoarseClock({ resolutionMs: COARSE_RESOLUTION_MS });
  const precise = new L.MonotonicClock();
  const opts = { capacity: 2 ** 24, refillPerSecond: 1e6, clock };
  const one = new L.TokenBucket(opts);
  const many = new L.TokenBucket({ ...opts, keys: KEYS });
  for (const k of keys) many.tryAcquire(k);
  const peer = await limiterTasks(ctx);
  const t = (name, keysCount, fn, extra) => ({
    name,
    outcome: 'allowed',
    keys: keysCount,
    batch: BATCH,
    fn,
    ...extra,
  });
  return [
    t('TokenBucket on CoarseClock allowed, 1 key', 1, () => {
      one.reset(); // full each batch: a full run asks one key for more than it refills
      for (let i = 0; i < BATCH; i++) if (!one.tryAcquire()) refusedAllowed++;
    }),
    t('TokenBucket on CoarseClock allowed, 100k keys', KEYS, () => {
      for (let i = 0; i < BATCH; i++) {
        if (!many.tryAcquire(keys[order[cursor++ & 0xfffff]])) refusedAllowed++;
      }
    }),
    // Beside: rows of this process that are not ours (kind 'beside', never primary).
    ...peer
      .filter((p) => p.outcome === 'allowed')
      .map((p) => ({
        ...p,
        name: `limiter beside it allowed, ${p.keys === 1 ? '1 key' : '100k keys'}`,
        kind: 'beside',
        subject: 'limiter',
        primary: false,
      })),
    t(
      'CoarseClock.nowUs()',
      1,
      () => {
        // A local sum stays an unboxed double; the shared sink would allocate per read.
        let sum = 0;
        for (let i = 0; i < BATCH; i++) sum += clock.nowUs();
        sink += sum > 0;
      },
      { kind: 'beside', subject: 'clock read', outcome: 'read' },
    ),
    t(
      'MonotonicClock.nowUs()',
      1,
      () => {
        // A local sum stays an unboxed double; the shared sink would allocate per read.
        let sum = 0;
        for (let i = 0; i < BATCH; i++) sum += precise.nowUs();
        sink += sum > 0;
      },
      { kind: 'beside', subject: 'clock read', outcome: 'read' },
    ),
  ].map((task) => ({ ...task, clock }));
}

/** Lag of the coarse clock behind this thread's precise clock, in µs: p50, p99, max. */
function staleness(clock, precise, ms) {
  const lags = [];
  const end = precise.nowUs() + ms * 1000;
  for (let i = 0; ; i++) {
    const c = clock.nowUs();
    const now = precise.nowUs();
    if (now > end) break;
    // Every 16th read: samples a few µs apart, not dominated by one stretch.
    if ((i & 15) === 0) lags.push(now - c);
  }
  lags.sort((a, b) => a - b);
  const at = (q) => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))];
  return { p50Us: at(0.5), p99Us: at(0.99), maxUs: lags[lags.length - 1], samples: lags.length };
}

/** The clock's staleness idle, then with every core kept busy by spinning threads. */
async function coarseNotes(tasks, { quick }) {
  const L = await import('../dist/index.js');
  const clock = tasks[0].clock;
  const precise = new L.MonotonicClock();
  while (!clock.ticking) await new Promise((r) => setTimeout(r, 5));
  const ms = quick ? 300 : 1000;
  const idle = staleness(clock, precise, ms);
  const busyThreads = os.availableParallelism();
  const stop = new Int32Array(new SharedArrayBuffer(4));
  const spinners = Array.from(
    { length: busyThreads },
    () =>
      new Worker(
        'const s = new Int32Array(require("node:worker_threads").workerData); while (Atomics.load(s, 0) === 0);',
        { eval: true, workerData: stop.buffer },
      ),
  );
  await Promise.all(spinners.map((w) => new Promise((r) => w.once('online', r))));
  const loaded = staleness(clock, precise, ms);
  Atomics.store(stop, 0, 1);
  await Promise.all(spinners.map((w) => new Promise((r) => w.once('exit', r))));
  return {
    resolutionMs: clock.resolutionMs,
    // Other processes of a shared machine count too: "idle" means only this sampler here.
    loadAverage1m: os.loadavg()[0],
    idle,
    loaded: { ...loaded, busyThreads },
  };
}

// ---- peers --------------------------------------------------------------------------------

// `limiter` (v4): TokenBucket.tryRemoveTokens(1), synchronous. It has no keys: one bucket per
// key in a Map is how it is used per user, so "100k keys" is Map.get + tryRemoveTokens.
async function limiterTasks({ keys, order }) {
  const { TokenBucket } = await import('limiter');
  let cursor = 0;
  const full = () => {
    const b = new TokenBucket({ bucketSize: 2 ** 40, tokensPerInterval: 2 ** 40, interval: 1 });
    b.content = b.bucketSize; // a new bucket starts empty
    return b;
  };
  // 1 token a day, spent: refused for the rest of the day.
  const empty = () => new TokenBucket({ bucketSize: 1, tokensPerInterval: 1, interval: 'day' });
  const one = full();
  const oneRefused = empty();
  const many = new Map(keys.map((k) => [k, full()]));
  const manyRefused = new Map(keys.map((k) => [k, empty()]));
  const t = (outcome, nkeys, fn) => ({
    outcome,
    keys: nkeys,
    call: 'TokenBucket.tryRemoveTokens',
    batch: BATCH,
    primary: true,
    fn,
  });
  return [
    t('allowed', 1, () => {
      for (let i = 0; i < BATCH; i++) if (!one.tryRemoveTokens(1)) sink++;
    }),
    t('refused', 1, () => {
      for (let i = 0; i < BATCH; i++) if (!oneRefused.tryRemoveTokens(1)) sink++;
    }),
    t('allowed', KEYS, () => {
      for (let i = 0; i < BATCH; i++) {
        if (!many.get(keys[order[cursor++ & 0xfffff]]).tryRemoveTokens(1)) sink++;
      }
    }),
    t('refused', KEYS, () => {
      for (let i = 0; i < BATCH; i++) {
        if (!manyRefused.get(keys[order[cursor++ & 0xfffff]]).tryRemoveTokens(1)) sink++;
      }
    }),
  ];
}

// rate-limiter-flexible: RateLimiterMemory.consume(key) returns a promise, awaited per call.
// A refusal rejects with a RateLimiterRes (not an Error): the refused path is a caught
// rejection.
async function rlfTasks({ keys, order }) {
  const { RateLimiterMemory } = await import('rate-limiter-flexible');
  let cursor = 0;
  const open = new RateLimiterMemory({ points: 2 ** 52, duration: 3600 });
  const shut = new RateLimiterMemory({ points: 1, duration: 3600 });
  await shut.consume('one');
  for (const k of keys) {
    await open.consume(k);
    await shut.consume(k); // spends the only point of each key
  }
  const t = (outcome, nkeys, fn) => ({
    outcome,
    keys: nkeys,
    call: 'RateLimiterMemory.consume (awaited)',
    batch: BATCH,
    primary: true,
    fn,
  });
  return [
    t('allowed', 1, async () => {
      for (let i = 0; i < BATCH; i++) await open.consume('one');
    }),
    t('refused', 1, async () => {
      for (let i = 0; i < BATCH; i++) {
        try {
          await shut.consume('one');
        } catch {
          sink++;
        }
      }
    }),
    t('allowed', KEYS, async () => {
      for (let i = 0; i < BATCH; i++) await open.consume(keys[order[cursor++ & 0xfffff]]);
    }),
    t('refused', KEYS, async () => {
      for (let i = 0; i < BATCH; i++) {
        try {
          await shut.consume(keys[order[cursor++ & 0xfffff]]);
        } catch {
          sink++;
        }
      }
    }),
  ];
}

// bottleneck: a job scheduler, not a yes/no limiter. The decision that takes a permit is
// schedule(job) on a limiter with a `reservoir` (permits), `highWater: 0` and the OVERFLOW
// strategy: the job runs when a permit is left, otherwise it is dropped at once (the promise
// rejects with a BottleneckError). check() only asks whether a job would run now, taking
// nothing; it is measured too. Every datastore call of bottleneck waits for a
// setTimeout(0) (≥ 1 ms in Node), so one call is timed per sample. "100k keys" is
// Bottleneck.Group: one limiter per key, all created beforehand (~6 KB each).
async function bottleneckTasks({ keys, order }) {
  const { default: Bottleneck } = await import('bottleneck');
  let cursor = 0;
  const opts = (reservoir) => ({
    reservoir,
    highWater: 0,
    strategy: Bottleneck.strategy.OVERFLOW,
  });
  const job = () => Promise.resolve(1);
  const open = new Bottleneck(opts(2 ** 52));
  const shut = new Bottleneck(opts(0));
  const openGroup = new Bottleneck.Group(opts(2 ** 52));
  const shutGroup = new Bottleneck.Group(opts(0));
  for (const k of keys) {
    openGroup.key(k);
    shutGroup.key(k);
  }
  const key = () => keys[order[cursor++ & 0xfffff]];
  const refused = async (limiter) => {
    try {
      await limiter.schedule(job);
    } catch {
      sink++;
    }
  };
  const t = (outcome, nkeys, call, primary, fn, batch = 1) => ({
    outcome,
    keys: nkeys,
    call,
    primary,
    batch,
    fn,
  });
  return [
    t('allowed', 1, 'schedule (awaited)', true, () => open.schedule(job)),
    t('refused', 1, 'schedule (awaited)', true, () => refused(shut)),
    t('allowed', KEYS, 'Group.key(k).schedule (awaited)', true, () =>
      openGroup.key(key()).schedule(job),
    ),
    t('refused', KEYS, 'Group.key(k).schedule (awaited)', true, () =>
      refused(shutGroup.key(key())),
    ),
    t('allowed', 1, 'check (awaited, takes nothing)', false, async () => {
      if (!(await open.check())) sink++;
    }),
    t('refused', 1, 'check (awaited, takes nothing)', false, async () => {
      if (!(await shut.check())) sink++;
    }),
    // Not one call at a time: what the timer costs when 1000 calls share it.
    t(
      'allowed',
      1,
      'check, 1000 in flight (amortized)',
      false,
      async () => {
        const all = [];
        for (let i = 0; i < BATCH; i++) all.push(open.check());
        for (const ok of await Promise.all(all)) if (!ok) sink++;
      },
      BATCH,
    ),
  ];
}

/** Every subject, by name: `kind` is 'ours' or 'peer'. */
export const SUBJECTS = [
  ...ALGORITHMS.map((a) => ({ name: a.name, kind: 'ours', tasks: (ctx) => oursTasks(a, ctx) })),
  { name: 'TokenBucket on CoarseClock', kind: 'ours', tasks: coarseTasks, notes: coarseNotes },
  { name: 'limiter', kind: 'peer', tasks: limiterTasks, package: 'limiter' },
  {
    name: 'rate-limiter-flexible',
    kind: 'peer',
    tasks: rlfTasks,
    package: 'rate-limiter-flexible',
  },
  { name: 'bottleneck', kind: 'peer', tasks: bottleneckTasks, package: 'bottleneck', slow: true },
];
