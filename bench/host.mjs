// Host mode (atomic-limiter/host) beside worker threads, in the same run:
//   (i)   a 1-key TokenBucket decision on host memory ÷ the same decision on a limiter shared
//         between threads (attached from its handle), interleaved rounds in one process;
//   (ii)  N processes on one hot key ÷ N worker threads on one hot key (decisions per second);
//   (iii) acquire() wake-up: a release in one process or thread, the waiter's wake in the
//         other, one-way (both stamp CLOCK_MONOTONIC, which every process shares), p50 / p99.
//
//   runHost({ quick })                from run.mjs (part "host")
//   node bench/host.mjs [--quick]     alone, prints the table and one JSON line
import { spawn } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';

const SELF = fileURLToPath(import.meta.url);
const DIST = new URL('../dist/index.js', import.meta.url).href;
const HOST = new URL('../dist/host.js', import.meta.url).href;
const OPTIONS = { capacity: 1_000_000, refillPerSecond: 1_000_000, keys: 64 };
const WAIT = { limit: 1, keys: 16, queueLimit: 4 };
const now = () => process.hrtime.bigint();

function sizes(quick) {
  return quick
    ? { decisions: 200_000, rounds: 3, hot: 300_000, wakes: 200 }
    : { decisions: 2_000_000, rounds: 7, hot: 3_000_000, wakes: 2000 };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2;
};
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)];

/** ns per decision of `n` tryAcquire calls on one key. */
function loop(limiter, n) {
  let granted = 0;
  const t0 = now();
  for (let i = 0; i < n; i++) if (limiter.tryAcquire('k')) granted++;
  return { ns: Number(now() - t0) / n, granted };
}

/** One shared word for the wake-up's turns, through the host memory provider itself. */
function turnBuffer(memory) {
  const region = memory.open({
    owner: 'bench-turn',
    layoutVersion: 0,
    options: {},
    parts: [{ bytes: 4096, maxBytes: 4096 }],
    init: () => {},
  });
  region.publish();
  return region.buffers[0];
}

// ---- children: a process or a worker thread ------------------------------------------------

async function child(spec, send, onGo) {
  const core = await import(DIST);
  const { hostMemory } = await import(HOST);
  if (spec.mode === 'hot') {
    const limiter = spec.handle
      ? core.attach(spec.handle)
      : new core.TokenBucket({ ...OPTIONS, memory: hostMemory(spec.region) });
    loop(limiter, 10_000); // warm up
    onGo(() => send({ ...loop(limiter, spec.n) }));
    send('ready');
  } else {
    // wake: in turn T = 2i (the other side holds the permit), wait for it, stamp the wake,
    // give it back and say so (T = 2i + 1).
    const limiter = spec.handle
      ? core.attach(spec.handle)
      : new core.Concurrency({ ...WAIT, memory: hostMemory(spec.region) });
    const turn = new Int32Array(spec.turn ?? turnBuffer(hostMemory(spec.turnRegion)));
    onGo(async () => {
      const woke = [];
      for (let i = 0; i < spec.n; i++) {
        while (Atomics.load(turn, 0) !== 2 * i) await new Promise((r) => setImmediate(r));
        const lease = await limiter.acquire('k');
        woke.push(Number(now()));
        lease.release();
        Atomics.store(turn, 0, 2 * i + 1);
      }
      send({ woke });
    });
    send('ready');
  }
}

if (process.argv[2] === '--child') {
  const lines = [];
  process.stdin.on('data', (d) => lines.push(d));
  await child(
    JSON.parse(process.argv[3]),
    (m) => process.stdout.write(`${JSON.stringify(m)}\n`),
    (f) => process.stdin.once('data', () => f()),
  );
} else if (!isMainThread && workerData?.benchHost) {
  await child(
    workerData.spec,
    (m) => parentPort.postMessage(m),
    (f) => parentPort.once('message', () => f()),
  );
}

// ---- the parent ------------------------------------------------------------------------------

/** A child process or thread: resolves once ready; go() starts it, result() its answer. */
function start(spec, asThread) {
  return new Promise((resolve, reject) => {
    let messages;
    let go;
    let stop;
    if (asThread) {
      const w = new Worker(SELF, { workerData: { benchHost: true, spec } });
      const q = [];
      w.on('message', (m) => q.push(m));
      w.once('error', reject);
      messages = q;
      go = () => w.postMessage('go');
      stop = () => w.terminate();
    } else {
      const c = spawn(process.execPath, [SELF, '--child', JSON.stringify(spec)], {
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      const q = [];
      let buf = '';
      c.stdout.on('data', (d) => {
        buf += d;
        for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
          q.push(JSON.parse(buf.slice(0, i)));
          buf = buf.slice(i + 1);
        }
      });
      c.once('error', reject);
      messages = q;
      go = () => c.stdin.write('go\n');
      stop = () => c.kill();
    }
    const next = async () => {
      while (messages.length === 0) await new Promise((r) => setTimeout(r, 1));
      return messages.shift();
    };
    next().then(() => resolve({ go, next, stop }), reject);
  });
}

export async function runHost({ quick = false } = {}) {
  const core = await import(DIST);
  const { hostMemory, removeHostMemory } = await import(HOST);
  const z = sizes(quick);
  const tag = `bench-${process.pid}`;
  const regions = [];
  const region = (what) => {
    const name = `${tag}-${what}-${regions.length}`;
    regions.push(name);
    return name;
  };
  try {
    // (i) one decision, host memory ÷ a limiter shared between threads, interleaved.
    const host = new core.TokenBucket({ ...OPTIONS, memory: hostMemory(region('decide')) });
    const shared = new core.TokenBucket(OPTIONS);
    const threadView = core.attach(shared.handle);
    loop(host, z.decisions);
    loop(threadView, z.decisions);
    const hostNs = [];
    const threadNs = [];
    for (let r = 0; r < z.rounds; r++) {
      hostNs.push(loop(host, z.decisions).ns);
      threadNs.push(loop(threadView, z.decisions).ns);
    }
    const decision = {
      hostNs: median(hostNs),
      threadsNs: median(threadNs),
      ratio: median(hostNs) / median(threadNs),
    };

    // (ii) N processes ÷ N threads on one hot key: decisions per second in total.
    const maxN = Math.min(4, os.availableParallelism());
    const hot = [];
    for (let n = 1; n <= maxN; n++) {
      const rate = async (asThread) => {
        const rates = [];
        for (let r = 0; r < Math.min(z.rounds, 3); r++) {
          const spec = asThread
            ? { mode: 'hot', n: z.hot, handle: new core.TokenBucket(OPTIONS).handle }
            : { mode: 'hot', n: z.hot, region: region('hot') };
          const kids = await Promise.all(Array.from({ length: n }, () => start(spec, asThread)));
          for (const k of kids) k.go();
          const results = await Promise.all(kids.map((k) => k.next()));
          for (const k of kids) k.stop();
          const slowest = Math.max(...results.map((x) => x.ns)) * z.hot;
          rates.push((n * z.hot) / (slowest / 1e9));
        }
        return median(rates);
      };
      const processes = await rate(false);
      const threads = await rate(true);
      hot.push({
        n,
        processesPerSec: processes,
        threadsPerSec: threads,
        ratio: processes / threads,
      });
    }

    // (iii) wake-up, one way: this side stamps and releases, the other stamps its wake.
    const wake = async (asThread) => {
      const limiter = asThread
        ? new core.Concurrency(WAIT)
        : new core.Concurrency({ ...WAIT, memory: hostMemory(region('wake')) });
      const turnName = region('turn');
      const turnSab = asThread ? new SharedArrayBuffer(4) : turnBuffer(hostMemory(turnName));
      const spec = asThread
        ? { mode: 'wake', n: z.wakes, handle: limiter.handle, turn: turnSab }
        : { mode: 'wake', n: z.wakes, region: regions.at(-2), turnRegion: turnName };
      const turn = new Int32Array(turnSab);
      limiter.tryAcquire('k');
      const other = await start(spec, asThread);
      other.go();
      const released = [];
      for (let i = 0; i < z.wakes; i++) {
        Atomics.store(turn, 0, 2 * i);
        while (limiter.stats('k').queued === 0) await new Promise((r) => setImmediate(r));
        released.push(Number(now()));
        limiter.release('k');
        while (Atomics.load(turn, 0) !== 2 * i + 1) await new Promise((r) => setImmediate(r));
        if (!limiter.tryAcquire('k')) throw new Error('bench/host: the permit did not come back');
      }
      const { woke } = await other.next();
      other.stop();
      const us = woke.map((t, i) => (t - released[i]) / 1000);
      return { p50Us: pct(us, 0.5), p99Us: pct(us, 0.99) };
    };
    const wakeProcesses = await wake(false);
    const wakeThreads = await wake(true);
    return { decision, hot, wake: { processes: wakeProcesses, threads: wakeThreads } };
  } finally {
    for (const name of regions) removeHostMemory(name);
  }
}

export function formatHost(r) {
  const f = (x, d = 2) => x.toFixed(d);
  const lines = [
    'host mode (atomic-limiter/host) beside worker threads, same run',
    `  1-key decision: host ${f(r.decision.hostNs, 1)} ns, threads ${f(r.decision.threadsNs, 1)} ns, host ÷ threads ${f(r.decision.ratio)}×`,
    ...r.hot.map(
      (h) =>
        `  ${h.n} on one hot key: processes ${f(h.processesPerSec / 1e6)} M/s, threads ${f(h.threadsPerSec / 1e6)} M/s, processes ÷ threads ${f(h.ratio)}×`,
    ),
    `  acquire() wake-up, one way: processes p50 ${f(r.wake.processes.p50Us, 1)} µs / p99 ${f(r.wake.processes.p99Us, 1)} µs; threads p50 ${f(r.wake.threads.p50Us, 1)} µs / p99 ${f(r.wake.threads.p99Us, 1)} µs`,
  ];
  return lines.join('\n');
}

if (isMainThread && process.argv[1] === SELF && process.argv[2] !== '--child') {
  const r = await runHost({ quick: process.argv.includes('--quick') });
  console.log(formatHost(r));
  console.log(JSON.stringify(r));
}
