// Batch throttling across a piscina pool: 4 worker threads call a (simulated) third-party
// service that allows QUOTA requests per second in total. Each task first awaits
// `limiter.acquire()` on one TokenBucket shared by every thread (its handle travels in
// piscina's workerData; each thread attaches once), so the pool as a whole stays under the
// quota, in FIFO order, with no coordinator thread.
//
//   node examples/piscina-batch.mjs
//
// This file is both the main script and the pool's task module. Prints the requests done,
// the elapsed time, the achieved rate against the configured one, and whether grants came
// in FIFO order (from shared counters); the last line is JSON.
import { isMainThread, threadId } from 'node:worker_threads';
import { attach, SlidingLog, TokenBucket } from 'atomic-limiter';
import { Piscina, workerData } from 'piscina';

const THREADS = 4;
const REQUESTS = 80;
const QUOTA = 50; // what the service allows per second
const RATE = 40; // what we send per second in total…
const BURST = 5; // …with bursts of at most 5: RATE + BURST ≤ QUOTA in any second
const nowMs = () => Number(process.hrtime.bigint()) / 1e6; // one monotonic clock for all threads

if (isMainThread) {
  const limiter = new TokenBucket({
    capacity: BURST,
    refillPerSecond: RATE,
    queueLimit: REQUESTS, // permits that may wait (at most one per thread here)
    keys: 16,
  });
  // The far side: the service's own limit, which answers 429 past QUOTA in any second.
  const service = new SlidingLog({ limit: QUOTA, windowMs: 1000, keys: 16 });
  // [calls: one sequence for "about to call acquire()" and "acquire() has returned",
  //  grants: the order in which acquire() resolved]
  const order = new Int32Array(new SharedArrayBuffer(8));

  const pool = new Piscina({
    filename: import.meta.url,
    minThreads: THREADS,
    maxThreads: THREADS,
    workerData: { limiter: limiter.handle, service: service.handle, order },
  });
  const started = nowMs();
  const results = await Promise.all(Array.from({ length: REQUESTS }, (_, i) => pool.run(i)));
  const elapsedMs = nowMs() - started;
  await pool.destroy();

  const grants = results.map((r) => r.grantedAt).sort((a, b) => a - b);
  const spanMs = grants[grants.length - 1] - grants[0];
  // After the first BURST (immediate) grants, the rest come at RATE.
  const achieved = (REQUESTS - BURST) / (spanMs / 1000);
  let maxInAnySecond = 0;
  for (let i = 0, j = 0; i < grants.length; i++) {
    while (grants[i] - grants[j] >= 1000) j++;
    maxInAnySecond = Math.max(maxInAnySecond, i - j + 1);
  }
  // FIFO: when task a's acquire() had returned (a was queued, or had its permit) before task
  // b's acquire() was called, a must be granted before b. Pairs whose calls overlapped (two
  // threads at once) have no order to check.
  let overtakes = 0;
  let ordered = 0;
  for (const a of results) {
    for (const b of results) {
      if (a.returned >= b.calling) continue;
      ordered++;
      if (a.grant > b.grant) overtakes++;
    }
  }
  const ok = results.filter((r) => r.status === 200).length;
  const summary = {
    example: 'piscina-batch',
    threads: THREADS,
    threadsUsed: new Set(results.map((r) => r.thread)).size,
    requests: REQUESTS,
    done: ok,
    serviceRejected: REQUESTS - ok,
    quotaPerSecond: QUOTA,
    ratePerSecond: RATE,
    burst: BURST,
    elapsedMs: Math.round(elapsedMs),
    grantSpanMs: Math.round(spanMs),
    achievedPerSecond: Math.round(achieved * 10) / 10,
    maxInAnySecond,
    fifo: overtakes === 0,
    orderedPairs: ordered,
    overtakes,
  };
  console.log(
    `piscina-batch: ${ok}/${REQUESTS} requests done by ${summary.threadsUsed} threads in ${(elapsedMs / 1000).toFixed(2)} s; the service refused ${summary.serviceRejected}`,
  );
  console.log(
    `  achieved ${summary.achievedPerSecond}/s after the burst of ${BURST} (configured ${RATE}/s, service quota ${QUOTA}/s); at most ${maxInAnySecond} in any 1 s (the bucket allows ≤ burst + rate = ${BURST + RATE})`,
  );
  console.log(
    `  grants in FIFO order: ${summary.fifo ? 'yes' : 'NO'} (${overtakes} overtakes among ${ordered} pairs of tasks, one queued before the other asked)`,
  );
  console.log(JSON.stringify(summary));
}

// ---- the task, run in the pool's threads ---------------------------------------------------
let shared; // attached once per thread

/** One request: wait for a permit (FIFO across all threads), then call the service. */
export default async function request(i) {
  shared ??= {
    limiter: attach(workerData.limiter),
    service: attach(workerData.service),
    order: workerData.order,
  };
  const { limiter, service, order } = shared;
  const calling = Atomics.add(order, 0, 1);
  const granted = limiter.acquire(); // takes a permit or joins the queue before returning
  const returned = Atomics.add(order, 0, 1);
  await granted;
  const grant = Atomics.add(order, 1, 1);
  const grantedAt = nowMs();
  const status = await callService(service);
  return { i, thread: threadId, calling, returned, grant, grantedAt, status };
}

/** The simulated third-party API: 429 past its quota, 2–6 ms per call. */
async function callService(service) {
  const status = service.tryAcquire() ? 200 : 429;
  await new Promise((resolve) => setTimeout(resolve, 2 + Math.random() * 4));
  return status;
}
