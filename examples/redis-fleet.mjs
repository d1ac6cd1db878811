// Fleet mode: two "machines" (processes) × two worker threads each share one limit in
// Redis, a SlidingLog of 100 requests per hour for one customer. With `block: 16`, each
// machine leases up to 16 permits per Redis round trip into its shared memory; both of its
// threads spend them (attach(handle, { redis }) opens the limiter in a thread with the
// thread's own client), and only an empty block goes back to Redis. On close() the unspent
// permits are given back, so nothing is lost.
//
//   REDIS_URL=redis://127.0.0.1:6379 node examples/redis-fleet.mjs
//
// Needs a running Redis (REDIS_URL, default redis://127.0.0.1:6379) and ioredis. Prints
// what each machine admitted and what Redis still holds; the last line is JSON.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { attach, SlidingLog } from 'atomic-limiter/redis';
import { Redis } from 'ioredis';

const URL_ = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const OPTIONS = { limit: 100, windowMs: 3_600_000, block: 16 };
const REQUESTS = 150; // per thread: 600 in all, for 100 permits
const CUSTOMER = 'customer:7';
const PREFIX = `example-fleet-${process.env.EXAMPLE_RUN ?? process.pid}`;

/** A worker thread: the machine's limiter over the same blocks, with its own client. */
async function thread() {
  const redis = new Redis(URL_, { autoResendUnfulfilledCommands: false });
  const limiter = attach(workerData.handle, { redis });
  let admitted = 0;
  for (let i = 0; i < REQUESTS; i += 10) {
    const batch = await Promise.all(Array.from({ length: 10 }, () => limiter.consume(CUSTOMER)));
    admitted += batch.filter((d) => d.allowed).length;
  }
  await limiter.close();
  redis.disconnect();
  parentPort.postMessage(admitted);
}

/** A machine: the limiter, two threads; close() gives its unspent permits back. */
async function machine(name) {
  const redis = new Redis(URL_, { autoResendUnfulfilledCommands: false });
  const limiter = new SlidingLog({ redis, prefix: PREFIX, ...OPTIONS });
  const file = fileURLToPath(import.meta.url);
  const counts = await Promise.all(
    [0, 1].map(
      () =>
        new Promise((resolve, reject) =>
          new Worker(file, { workerData: { handle: limiter.handle } })
            .once('message', resolve)
            .once('error', reject),
        ),
    ),
  );
  await limiter.close();
  redis.disconnect();
  process.send({ name, admitted: counts[0] + counts[1] });
}

async function main() {
  const file = fileURLToPath(import.meta.url);
  const results = await Promise.all(
    ['A', 'B'].map(
      (name) =>
        new Promise((resolve, reject) => {
          const kid = fork(file, [name], {
            env: { ...process.env, EXAMPLE_RUN: String(process.pid) },
          });
          kid.once('message', resolve);
          kid.once('error', reject);
          kid.once(
            'exit',
            (code) => code !== 0 && reject(new Error(`machine ${name} exited ${code}`)),
          );
        }),
    ),
  );
  const redis = new Redis(URL_, { autoResendUnfulfilledCommands: false });
  const check = new SlidingLog({ redis, prefix: PREFIX, ...OPTIONS, block: undefined });
  const { available } = await check.stats(CUSTOMER);
  await check.reset(CUSTOMER);
  redis.disconnect();
  const admitted = Object.fromEntries(results.map((r) => [r.name, r.admitted]));
  const total = results.reduce((a, r) => a + r.admitted, 0);
  for (const r of results) console.log(`machine ${r.name}: ${r.admitted} admitted`);
  console.log(`together: ${total} of ${OPTIONS.limit}; Redis still holds ${available}`);
  console.log(JSON.stringify({ admitted, total, available }));
}

if (!isMainThread) await thread();
else if (process.argv[2]) await machine(process.argv[2]);
else await main();
