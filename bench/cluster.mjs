// The cluster bridge: a worker process asking a limiter that lives in the cluster primary.
//
//   runCluster({ quick })                   from run.mjs (part "cluster")
//   node bench/cluster.mjs --one-run [--quick]      one cluster run, prints one JSON line
//
// Both libraries in one cluster: a primary serving ours and rate-limiter-flexible's, with
// limits so large that every call is allowed, and a worker process measuring plain calls,
// the peer and the floors (then another measuring permit blocks the same way)
//   (i)  one call at a time: each call awaited before the next (p50 / p99 per call), and
//   (ii) 64 calls in flight: 64 loops each awaiting its own calls; per-call cost = wall ÷ calls,
// every subject in turn, round after round, so that a noisy moment of this shared machine
// lands on each of them (this VM's IPC round trip moves 60–250 µs between runs; in separate
// clusters, one subject's run could meet a slow moment the other's did not).
// ours: atomic-limiter/cluster, serveCluster + connectCluster, TokenBucket (tryAcquire, and
// consume which returns a Decision like rate-limiter-flexible's RateLimiterRes).
// rlf: rate-limiter-flexible's RateLimiterClusterMaster + RateLimiterCluster (consume).
// Each library's listeners see the other's messages too (and drop them on their first
// test), as the bench's own floors' listeners always did.
// Floors: raw `process.send` echoes, one at a time and 64 in flight (one message each way
// per call, no batching); and a batching bridge's, calls made in one tick echoed as one
// message of calls shaped like ours (flat: op, key, permits per call), answered positionally
// in one message, no limiter. Permit blocks (block: 128, leaseAhead) are measured for tryAcquire,
// consume and acquire. The full run does two cluster runs and pools their samples.
import { spawn } from 'node:child_process';
import cluster from 'node:cluster';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const IN_FLIGHT = 64;
const KEY = 'bench';
/** How long one subject's cluster run may take before it is killed. */
const RUN_TIMEOUT_MS = 120_000;

const BLOCK = 128; // permits per trip with connectCluster({ block })

function sizes(quick) {
  return quick
    ? {
        warm: 500,
        warmInFlight: IN_FLIGHT * 1000,
        rounds: 3,
        oneAtATime: 600,
        inFlightCalls: IN_FLIGHT * 100,
      }
    : {
        warm: 2000,
        warmInFlight: IN_FLIGHT * 1000,
        rounds: 7,
        oneAtATime: 2000,
        inFlightCalls: IN_FLIGHT * 500,
      };
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}
function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2;
}

// ---- in the worker process --------------------------------------------------------------

/** The raw IPC floor: a message to the primary and its echo back. */
function echoCall() {
  const pending = new Map();
  let seq = 0;
  process.on('message', (m) => {
    if (m?.benchEcho === undefined) return;
    const resolve = pending.get(m.benchEcho);
    pending.delete(m.benchEcho);
    resolve?.(true);
  });
  return () =>
    new Promise((resolve) => {
      const id = ++seq;
      pending.set(id, resolve);
      process.send({ benchEcho: id });
    });
}

/**
 * The floor of a batching bridge: the calls of one tick in one message, shaped like ours
 * (one flat array of op, key, permits per call), answered positionally in one message
 * (one value per call), no limiter.
 */
function batchedEchoCall() {
  const waiting = []; // resolvers of the batches in flight, oldest first
  let resolvers = [];
  let out = [];
  process.on('message', (m) => {
    if (m?.benchBatch === undefined) return;
    const batch = waiting.shift();
    for (let i = 0; i < batch.length; i++) batch[i](m.benchBatch[i] === 1);
  });
  return () =>
    new Promise((resolve) => {
      resolvers.push(resolve);
      if (out.push(1, KEY, 1) === 3) {
        queueMicrotask(() => {
          waiting.push(resolvers);
          process.send({ benchCalls: out });
          out = [];
          resolvers = [];
        });
      }
    });
}

/** A refusal would mean the bench measures the wrong path: every call must be allowed. */
function check(v) {
  if (v === false || v?.allowed === false) throw new Error('refused: the bench limit should allow');
}

async function oneAtATime(call, n, out) {
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const v = await call();
    out.push((performance.now() - t) * 1000); // µs
    check(v);
  }
}

/** The primary's CPU time so far (µs), asked over IPC. */
const primaryCpu = (() => {
  let waiting;
  process.on('message', (m) => m?.benchCpuUs !== undefined && waiting?.(m.benchCpuUs));
  return () =>
    new Promise((resolve) => {
      waiting = resolve;
      process.send({ benchCpu: true });
    });
})();
const cpuUs = (u = process.cpuUsage()) => u.user + u.system;

/**
 * IN_FLIGHT loops, each awaiting its own calls, `total` calls in all. Per call: wall µs,
 * and the CPU µs spent by this worker and by the primary while they ran.
 */
async function inFlight(call, total) {
  const per = total / IN_FLIGHT;
  const loop = async () => {
    for (let i = 0; i < per; i++) check(await call());
  };
  const p0 = await primaryCpu();
  const w0 = cpuUs();
  const t = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop));
  const wall = (performance.now() - t) * 1000;
  const w1 = cpuUs();
  const p1 = await primaryCpu();
  return { wall: wall / total, worker: (w1 - w0) / total, primary: (p1 - p0) / total };
}

async function measureAll(calls, quick) {
  const z = sizes(quick);
  for (const call of Object.values(calls)) {
    for (let i = 0; i < z.warm; i++) await call();
    // Both processes' code paths for many calls in flight warm up (JIT) over tens of
    // thousands of calls: every subject gets the same before any is measured.
    await inFlight(call, z.warmInFlight);
  }
  const samples = Object.fromEntries(Object.keys(calls).map((k) => [k, { one: [], many: [] }]));
  // Rounds interleave the subjects' measurements, so a noisy moment hits all of them.
  // Each round takes the subjects in an order of its own, from a balanced (Williams) design:
  // over its rows every subject comes after every other equally often, in every place. A fixed
  // order charged a subject for the one before it (a subject measured right after the
  // batched echo ran 1.5–2.5× its time elsewhere, once), and for its place.
  //
  // Round −1 is not recorded: it puts every subject through the measured pattern once (calls
  // one at a time, then 64 in flight, subjects taking turns). Without it, the first measured
  // round of `tryAcquire` ran at 1.3–2.6 µs per call with 64 in flight, the worker's
  // CPU as high, and the rounds after at 0.55–0.9, whatever came before it: the long
  // warm-up above was not the pattern measured.
  const entries = Object.entries(calls);
  const rows = williams(entries.length);
  for (let r = -1; r < z.rounds; r++) {
    const order = rows[(r + rows.length) % rows.length].map((i) => entries[i]);
    for (const [name, call] of order) {
      await oneAtATime(call, z.oneAtATime, r < 0 ? [] : samples[name].one);
      const round = await inFlight(call, z.inFlightCalls);
      if (r >= 0) samples[name].many.push(round);
    }
  }
  // Raw samples (0.01 µs), so that runCluster can pool the runs of one subject.
  const out = {};
  for (const [name, s] of Object.entries(samples)) {
    out[name] = {
      oneUs: s.one.map((x) => Math.round(x * 100) / 100),
      inFlight: s.many,
      callsPerRound: z.inFlightCalls,
    };
  }
  return out;
}

/**
 * The rows of a Williams design for `n` subjects: in each, the subjects in an order; over
 * all rows every subject comes right after every other equally often (once in n rows when
 * n is even, twice in 2n when odd) and takes every place.
 */
function williams(n) {
  const first = [0];
  for (let lo = 1, hi = n - 1; first.length < n; ) first.push(first.length % 2 ? lo++ : hi--);
  const rows = Array.from({ length: n }, (_, k) => first.map((x) => (x + k) % n));
  if (n % 2 === 1) for (let k = 0; k < n; k++) rows.push([...rows[k]].reverse());
  return rows;
}

/** p50 / p99 / mean per call one at a time, and the median in-flight round. */
function summarize(runs) {
  const one = runs.flatMap((r) => r.oneUs).sort((a, b) => a - b);
  const many = runs.flatMap((r) => r.inFlight);
  return {
    oneAtATime: {
      p50Us: percentile(one, 0.5),
      p99Us: percentile(one, 0.99),
      meanUs: one.reduce((a, b) => a + b, 0) / one.length,
      samples: one.length,
    },
    inFlight64: {
      perCallUs: median(many.map((x) => x.wall)),
      workerCpuUs: median(many.map((x) => x.worker)),
      primaryCpuUs: median(many.map((x) => x.primary)),
      roundsUs: many.map((x) => Math.round(x.wall * 1000) / 1000),
      callsPerRound: runs[0].callsPerRound,
    },
  };
}

/**
 * The subjects of one worker process. Plain calls, the peer and the floors in one worker;
 * permit blocks in another, as a program uses one mode or the other.
 */
async function workerMain(quick, set) {
  const { connectCluster } = await import('../dist/cluster.js');
  if (set === 'blocks') {
    // Permit blocks: one trip to the primary per block of permits, the rest spent locally.
    const blocked = connectCluster('api', { timeoutMs: 30_000, block: BLOCK, leaseAhead: true });
    const calls = {
      tryAcquireBlocks: () => blocked.tryAcquire(KEY),
      consumeBlocks: () => blocked.consume(KEY),
      acquireBlocks: () => blocked.acquire(KEY),
    };
    process.send({ benchDone: true, results: await measureAll(calls, quick) });
    return;
  }
  const calls = { echo: echoCall(), batchedEcho: batchedEchoCall() };
  const api = connectCluster('api', { timeoutMs: 30_000 });
  calls.tryAcquire = () => api.tryAcquire(KEY);
  calls.consume = () => api.consume(KEY);
  const { RateLimiterCluster } = await import('rate-limiter-flexible');
  const rlf = new RateLimiterCluster({
    keyPrefix: 'bench',
    points: 2 ** 30,
    duration: 3600,
    timeoutMs: 30_000,
  });
  calls.rlf = () => rlf.consume(KEY); // rejects if refused (it never is here)
  const results = await measureAll(calls, quick);
  process.send({ benchDone: true, results });
}

// ---- in the primary -----------------------------------------------------------------------

async function primaryMain(quick) {
  const { serveCluster } = await import('../dist/cluster.js');
  const { TokenBucket } = await import('../dist/index.js');
  serveCluster({ api: new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys: 16 }) });
  const { RateLimiterClusterMaster } = await import('rate-limiter-flexible');
  new RateLimiterClusterMaster();
  cluster.on('message', (w, m) => {
    if (m?.benchEcho !== undefined) w.send(m);
    else if (m?.benchCalls) w.send({ benchBatch: new Array(m.benchCalls.length / 3).fill(1) });
    else if (m?.benchCpu) w.send({ benchCpuUs: cpuUs() });
  });
  const started = performance.now();
  const results = {};
  for (const set of ['plain', 'blocks']) {
    cluster.setupPrimary({
      exec: SELF,
      args: ['--one-run', `--set=${set}`, ...(quick ? ['--quick'] : [])],
    });
    const worker = cluster.fork();
    Object.assign(
      results,
      await new Promise((resolve, reject) => {
        worker.on('message', (m) => m?.benchDone && resolve(m.results));
        worker.once('exit', (code, signal) =>
          reject(new Error(`bench worker exited early (${code ?? signal})`)),
        );
      }),
    );
    await new Promise((resolve) => {
      worker.once('exit', resolve);
      worker.kill();
    });
  }
  console.log(
    JSON.stringify({
      results,
      wallMs: Math.round(performance.now() - started),
    }),
  );
}

// ---- from run.mjs -------------------------------------------------------------------------

/** One cluster run in a process of its own; its JSON line. */
function runOne(quick) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SELF, '--one-run', ...(quick ? ['--quick'] : [])], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    // Killing the primary disconnects its worker, which then exits too (node:cluster).
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) {
        reject(new Error(`cluster bench exited ${code ?? signal}`));
        return;
      }
      resolve(JSON.parse(out.trim().split('\n').pop()));
    });
  });
}

/**
 * The cluster runs (both libraries in each) and the ratios.
 */
export async function runCluster({ quick }) {
  const runs = [];
  for (let i = 0; i < (quick ? 1 : 2); i++) runs.push(await runOne(quick));
  const pooled = (name) => summarize(runs.map((r) => r.results[name]));
  // rlf ÷ `name` with 64 in flight: the median of the rounds' own ratios (the two measured
  // in the same round of the same worker).
  const roundRatio = (name) =>
    median(
      runs.flatMap(({ results }) =>
        results.rlf.inFlight.map((x, k) => x.wall / results[name].inFlight[k].wall),
      ),
    );
  const o = {
    tryAcquire: pooled('tryAcquire'),
    consume: pooled('consume'),
    tryAcquireBlocks: pooled('tryAcquireBlocks'),
    consumeBlocks: pooled('consumeBlocks'),
    acquireBlocks: pooled('acquireBlocks'),
  };
  const r = pooled('rlf');
  const inFlight64 = roundRatio('tryAcquire');
  return {
    inFlight: IN_FLIGHT,
    runs: runs.length,
    rounds: sizes(quick).rounds,
    ours: o,
    rlf: { consume: r },
    floors: { echo: pooled('echo'), batchedEcho: pooled('batchedEcho') },
    wallMs: runs.map((x) => x.wallMs),
    // rlf ÷ ours (above 1: ours is cheaper per call).
    ratios: {
      oneAtATimeP50: r.oneAtATime.p50Us / o.tryAcquire.oneAtATime.p50Us,
      inFlight64,
      consumeOneAtATimeP50: r.oneAtATime.p50Us / o.consume.oneAtATime.p50Us,
      consumeInFlight64: roundRatio('consume'),
      // The blocks run in a worker of their own, after rlf's: no shared rounds, so the
      // ratio of the medians.
      blocksInFlight64: {
        tryAcquire: r.inFlight64.perCallUs / o.tryAcquireBlocks.inFlight64.perCallUs,
        consume: r.inFlight64.perCallUs / o.consumeBlocks.inFlight64.perCallUs,
        acquire: r.inFlight64.perCallUs / o.acquireBlocks.inFlight64.perCallUs,
      },
      blocksOneAtATimeMean: {
        tryAcquire: r.oneAtATime.meanUs / o.tryAcquireBlocks.oneAtATime.meanUs,
        consume: r.oneAtATime.meanUs / o.consumeBlocks.oneAtATime.meanUs,
        acquire: r.oneAtATime.meanUs / o.acquireBlocks.oneAtATime.meanUs,
      },
    },
    // ours ÷ the floors of our own runs (1 is the bare IPC).
    overFloor: {
      oneAtATimeP50: o.tryAcquire.oneAtATime.p50Us / pooled('echo').oneAtATime.p50Us,
      inFlight64: o.tryAcquire.inFlight64.perCallUs / pooled('batchedEcho').inFlight64.perCallUs,
    },
    // One at a time, the mean is the per-decision cost of blocks: local calls and one
    // round trip per block (asked for in the background when a quarter of one is left).
    permitBlocks: { block: BLOCK },
  };
}

// ---- entry --------------------------------------------------------------------------------
// `node bench/cluster.mjs [--quick]` runs the cluster runs and prints the summary as JSON.
const isEntry = process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1];
if (isEntry || cluster.isWorker) {
  const quick = process.argv.includes('--quick');
  if (!process.argv.includes('--one-run') && cluster.isPrimary) {
    console.log(JSON.stringify(await runCluster({ quick }), null, 2));
  } else if (cluster.isPrimary) await primaryMain(quick);
  else await workerMain(quick, process.argv.find((a) => a.startsWith('--set='))?.slice(6));
}
