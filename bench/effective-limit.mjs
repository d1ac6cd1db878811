// The effective limit: N threads, each configured with the same limit L on the same key,
// each trying `attempts` (> L) times within one window. A limiter that keeps its state per
// thread admits N × L in total; ours, one limiter shared through `handle` + `attach`,
// admits exactly L. Our limiters run on a frozen ManualClock, so the count is exact; the
// peers' windows are one hour long, far longer than the run.
import { progress } from './lib.mjs';
import { makePool, startAtBarrier } from './threads.mjs';

export const EFFECTIVE_SUBJECTS = [
  'TokenBucket',
  'FixedWindow',
  'rate-limiter-flexible',
  'limiter',
  'bottleneck',
];

export async function runEffective({ maxThreads, limit = 100, attempts = 300 }) {
  const L = await import('../dist/index.js');
  const ours = {
    TokenBucket: (clock) => new L.TokenBucket({ capacity: limit, refillPerSecond: 1, clock }),
    FixedWindow: (clock) => new L.FixedWindow({ limit, windowMs: 60_000, clock }),
  };
  const pool = makePool(maxThreads);
  const entries = [];
  try {
    for (let threads = 1; threads <= maxThreads; threads++) {
      const admitted = {};
      for (const subject of EFFECTIVE_SUBJECTS) {
        const limiter = ours[subject]?.(new L.ManualClock());
        const { tasks } = await startAtBarrier(pool, threads, (_, ctl) => ({
          kind: 'effective',
          subject: limiter ? 'ours' : subject,
          handle: limiter?.handle,
          limit,
          attempts,
          ctl,
        }));
        const results = await tasks;
        admitted[subject] = results.reduce((s, r) => s + r.admitted, 0);
      }
      entries.push({ threads, limit, attemptsPerThread: attempts, admitted });
      progress(
        `  effective limit, ${threads} thread${threads > 1 ? 's' : ''}: ${EFFECTIVE_SUBJECTS.map((s) => `${s} ${admitted[s]}`).join(', ')}`,
      );
    }
  } finally {
    await pool.destroy();
  }
  return { limit, attemptsPerThread: attempts, entries };
}
