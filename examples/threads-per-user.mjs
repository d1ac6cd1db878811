// Per-user limits shared by threads: the main thread and 3 worker threads all charge the
// same SlidingWindow (10 per second per user, 5 users). The workers attach to it by its
// handle, so each user gets exactly 10 across all four threads — not 10 per thread.
//
//   node examples/threads-per-user.mjs
//
// All threads start together (a shared-memory gate) and try ATTEMPTS times per user, users
// interleaved, within a few tens of ms. While all tries fit in windowMs / limit = 100 ms,
// even a window boundary in the middle cannot add a permit (the previous window's count
// still weighs more than limit − 1), so the totals are exact. Prints a table of admitted requests per user and thread; the last line is JSON.
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { attach, SlidingWindow } from 'atomic-limiter';

const LIMIT = 10; // per user …
const WINDOW_MS = 1000; // … per second
const USERS = ['alice', 'bob', 'carol', 'dave', 'erin'];
const WORKERS = 3;
const ATTEMPTS = 25; // per user and thread: 4 threads × 25 = 100 tries for 10 permits
const PACE_MS = 0.1; // between rounds, like requests arriving over time
const READY = 0; // gate words
const GO = 1;
const nowMs = () => Number(process.hrtime.bigint()) / 1e6; // one monotonic clock for all threads

/** Each thread's part: ATTEMPTS rounds over the users (starting at a different user). */
function charge(limiter, offset) {
  const admitted = Object.fromEntries(USERS.map((u) => [u, 0]));
  const first = nowMs();
  for (let round = 0; round < ATTEMPTS; round++) {
    for (let k = 0; k < USERS.length; k++) {
      const user = USERS[(k + offset) % USERS.length];
      if (limiter.tryAcquire(user)) admitted[user]++;
    }
    for (const until = nowMs() + PACE_MS; nowMs() < until; ); // busy: a thread doing work
  }
  return { admitted, first, last: nowMs() };
}

if (isMainThread) {
  const limiter = new SlidingWindow({ limit: LIMIT, windowMs: WINDOW_MS, keys: 1000 });
  const gate = new Int32Array(new SharedArrayBuffer(8));
  const workers = Array.from(
    { length: WORKERS },
    (_, i) =>
      new Worker(new URL(import.meta.url), {
        workerData: { handle: limiter.handle, gate, offset: i + 1 },
      }),
  );
  const results = workers.map(
    (w) =>
      new Promise((resolve, reject) => {
        w.once('message', resolve);
        w.once('error', reject);
      }),
  );
  // Wait until every worker has attached and parked at the gate, then open it for all.
  while (Atomics.load(gate, READY) < WORKERS) {
    await Atomics.waitAsync(gate, READY, Atomics.load(gate, READY), 1000).value;
  }
  Atomics.store(gate, GO, 1);
  Atomics.notify(gate, GO);
  const mine = charge(limiter, 0); // the main thread charges too, at the same time
  const parts = [mine, ...(await Promise.all(results))];

  const names = ['main', ...workers.map((_, i) => `worker ${i + 1}`)];
  const perUser = {};
  for (const user of USERS) {
    const byThread = parts.map((p) => p.admitted[user]);
    const s = limiter.stats(user);
    perUser[user] = {
      byThread,
      total: byThread.reduce((a, b) => a + b, 0),
      attempts: parts.length * ATTEMPTS,
      stats: { admitted: s.admitted, rejected: s.rejected },
    };
  }
  const spanMs = Math.max(...parts.map((p) => p.last)) - Math.min(...parts.map((p) => p.first));

  console.log(
    `threads-per-user: main + ${WORKERS} worker threads, SlidingWindow ${LIMIT} per ${WINDOW_MS} ms per user, ${ATTEMPTS} tries per user and thread`,
  );
  console.log(`  ${['user'.padEnd(6), ...names.map((n) => n.padStart(8)), '   total'].join(' ')}`);
  for (const [user, r] of Object.entries(perUser)) {
    console.log(
      `  ${[user.padEnd(6), ...r.byThread.map((n) => String(n).padStart(8)), String(r.total).padStart(8)].join(' ')}  (limit ${LIMIT}; stats: ${r.stats.admitted} admitted, ${r.stats.rejected} rejected)`,
    );
  }
  const exact = Object.values(perUser).every((r) => r.total === LIMIT);
  console.log(
    `  every user got exactly ${LIMIT} across all threads: ${exact ? 'yes' : 'NO'} (all tries within ${spanMs.toFixed(1)} ms; exact while that is under windowMs / limit = ${WINDOW_MS / LIMIT} ms)`,
  );
  console.log(
    JSON.stringify({
      example: 'threads-per-user',
      limit: LIMIT,
      windowMs: WINDOW_MS,
      threads: names,
      perUser,
      exact,
      spanMs: Math.round(spanMs * 100) / 100,
    }),
  );
} else {
  const { handle, gate, offset } = workerData;
  const limiter = attach(handle); // same class, same state: the same limits
  Atomics.add(gate, READY, 1);
  Atomics.notify(gate, READY);
  Atomics.wait(gate, GO, 0); // parked until the main thread opens the gate
  parentPort.postMessage(charge(limiter, offset));
}
