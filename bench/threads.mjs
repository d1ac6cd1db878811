// Throughput over 1…N worker threads: aggregate decisions per second on one shared limiter,
// each thread on a key of its own ("own key") or all on one key ("hot key"), beside the
// floor (clock + GCRA CAS on an own / a shared word) measured the same way.
//
// Threads come from a piscina pool (one pool per subject, so V8 sees one limiter class per
// call site). A pool dispatches each task over a MessagePort, which costs microseconds; the
// timed part is inside the tasks, between a shared-buffer barrier (GO) and a STOP word, so
// none of that is measured. Every configuration runs `rounds` times, interleaved (noise from
// other tenants lands on all alike), on a fresh limiter; the figure is the median round
// among those where every thread had a core.
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import { ARRIVED, GO, median, progress, STOP } from './lib.mjs';

export const TASK_FILE = fileURLToPath(new URL('./thread-task.mjs', import.meta.url));
const BARRIER_TIMEOUT_MS = 60_000;
const MIN_SHARE = 0.9;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function makePool(threads) {
  return new Piscina({
    filename: TASK_FILE,
    minThreads: threads,
    maxThreads: threads,
    concurrentTasksPerWorker: 1, // a task blocks its thread: never two on one thread
    idleTimeout: 600_000,
    // Idle workers wait on their MessagePort, not spinning on Atomics.wait between tasks.
    atomics: 'disabled',
  });
}

/**
 * Starts `count` tasks from `makeTask(i, ctl)`, waits until all of them stand at the
 * barrier, then says GO. Returns { tasks: Promise<results[]>, t0 (hrtime ns), cpu0 }.
 */
export async function startAtBarrier(pool, count, makeTask) {
  const ctl = new Int32Array(new SharedArrayBuffer(16));
  const tasks = Promise.all(Array.from({ length: count }, (_, i) => pool.run(makeTask(i, ctl))));
  const failed = tasks.then(() => {
    throw new Error('bench: a task ended before GO');
  });
  const deadline = Date.now() + BARRIER_TIMEOUT_MS;
  for (let v = Atomics.load(ctl, ARRIVED); v < count; v = Atomics.load(ctl, ARRIVED)) {
    if (Date.now() > deadline) throw new Error(`bench: ${v}/${count} threads at the barrier`);
    const w = Atomics.waitAsync(ctl, ARRIVED, v, 100);
    if (w.async) await Promise.race([w.value, failed]);
  }
  failed.catch(() => {}); // from here on, `tasks` reports errors
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  Atomics.store(ctl, GO, 1);
  Atomics.notify(ctl, GO);
  return { ctl, tasks, t0, cpu0 };
}

const SUBJECTS = [
  {
    name: 'TokenBucket',
    // 2^24 burst + 1e6/s: every decision of a run is admitted (checked: `admitted`).
    make: (L) => new L.TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys: 1024 }),
  },
  {
    name: 'FixedWindow',
    // 524 285 per 10 ms window: 52 M/s, above what the threads ask.
    make: (L) => new L.FixedWindow({ limit: 524_285, windowMs: 10, keys: 1024 }),
  },
  { name: 'floor', make: null },
];

export const WORKLOADS = ['own key', 'hot key'];

async function round(pool, L, subject, threads, hot, ms) {
  const limiter = subject.make ? subject.make(L) : null;
  const words = subject.make ? undefined : new SharedArrayBuffer(256 * (threads + 2));
  const { ctl, tasks, t0, cpu0 } = await startAtBarrier(pool, threads, (index, ctl) => ({
    kind: 'throughput',
    subject: subject.name,
    handle: limiter?.handle,
    words,
    hot,
    index,
    ctl,
    warmup: 20_000,
  }));
  await sleep(ms);
  Atomics.store(ctl, STOP, 1);
  const results = await tasks;
  const wallUs = Number(process.hrtime.bigint() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const decisions = results.reduce((s, r) => s + r.decisions, 0);
  const admitted = results.reduce((s, r) => s + r.admitted, 0);
  return {
    // Each thread's own count over its own time, summed.
    opsPerSec: results.reduce((s, r) => s + r.decisions / (r.ns / 1e9), 0),
    admittedFraction: admitted / decisions,
    // CPU time of the process over wall time × threads: well below 1 means the machine took a
    // core away and the threads did not all run at once.
    cpuShare: (cpu.user + cpu.system) / wallUs / threads,
  };
}

/** Resolves to one entry per (subject, workload, threads). */
export async function runThreads({ quick, maxThreads }) {
  const L = await import('../dist/index.js');
  const ms = quick ? 150 : 500;
  const rounds = quick ? 3 : 5;
  const counts = Array.from({ length: maxThreads }, (_, i) => i + 1);
  const cpus = os.availableParallelism();
  const out = [];
  for (const subject of SUBJECTS) {
    const pool = makePool(maxThreads);
    try {
      progress(`  threads: ${subject.name} (${rounds} rounds of ${ms} ms per configuration)`);
      // Warm-up: every worker compiles the loop, on both workloads.
      for (const workload of WORKLOADS) {
        await round(pool, L, subject, maxThreads, workload === 'hot key', quick ? 50 : 150);
      }
      // Interleaved rounds. A round whose CPU share is under MIN_SHARE (the threads did not
      // all have a core: another process took one) is set aside and retried, up to 3 ×
      // rounds per configuration; when none clears, the figure uses every round and says so.
      const configs = [];
      for (const workload of WORKLOADS) {
        for (const threads of counts) configs.push({ workload, threads, ok: [], all: [] });
      }
      for (let a = 0; a < 3 * rounds && configs.some((c) => c.ok.length < rounds); a++) {
        for (const c of configs) {
          if (c.ok.length >= rounds) continue;
          const r = await round(pool, L, subject, c.threads, c.workload === 'hot key', ms);
          c.all.push(r);
          // More threads than CPUs cannot all run at once: expect cpus/threads of a core each.
          if (r.cpuShare >= MIN_SHARE * Math.min(1, cpus / c.threads)) c.ok.push(r);
        }
      }
      for (const c of configs) {
        const rs = c.ok.length > 0 ? c.ok : c.all;
        const entry = {
          subject: subject.name,
          workload: c.workload,
          threads: c.threads,
          opsPerSec: median(rs.map((x) => x.opsPerSec)),
          admittedFraction: Math.min(...rs.map((x) => x.admittedFraction)),
          cpuShare: median(rs.map((x) => x.cpuShare)),
          validRounds: c.ok.length,
          totalRounds: c.all.length,
          busy: c.ok.length === 0,
          rounds: rs.map((x) => Math.round(x.opsPerSec)),
        };
        out.push(entry);
        progress(
          `    ${subject.name} ${c.workload}, ${c.threads} thread${c.threads > 1 ? 's' : ''}: ` +
            `${(entry.opsPerSec / 1e6).toFixed(2)} M/s (cpu share ${entry.cpuShare.toFixed(2)}, ` +
            `${entry.validRounds}/${entry.totalRounds} rounds valid${entry.busy ? ', MACHINE BUSY' : ''})`,
        );
      }
    } finally {
      await pool.destroy();
    }
  }
  // Scaling: aggregate over the same workload's one-thread figure.
  for (const e of out) {
    const one = out.find(
      (x) => x.subject === e.subject && x.workload === e.workload && x.threads === 1,
    );
    e.vsOneThread = e.opsPerSec / one.opsPerSec;
  }
  return { durationMs: ms, rounds, entries: out };
}
