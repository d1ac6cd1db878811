// One "machine" of the fleet tests: a Redis TokenBucket in fleet mode, opened in two worker
// threads with attach(). argv: port, prefix, mode ('hammer' | 'hold'), attempts per thread.
import { Worker } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { ManualClock } from '../../dist/index.js';
import { TokenBucket } from '../../dist/redis.js';

const [port, prefix, mode, attempts] = process.argv.slice(2);
const redis = new Redis(Number(port), '127.0.0.1', { autoResendUnfulfilledCommands: false });
// Every process's ManualClock reads the same time: the scripts decide on it, exactly.
const clock = new ManualClock(1_000_000);
const limiter = new TokenBucket({
  redis,
  capacity: 100,
  refillPerSecond: 1e-6,
  block: 8,
  clock,
  prefix,
});
const worker = new URL('./fleet-worker.mjs', import.meta.url);
const threads = Array.from(
  { length: 2 },
  () =>
    new Worker(worker, {
      workerData: { handle: limiter.handle, port: Number(port), mode, attempts: Number(attempts) },
    }),
);
const counts = await Promise.all(
  threads.map(
    (t) => new Promise((resolve, reject) => t.once('message', resolve).once('error', reject)),
  ),
);
if (mode === 'hold') {
  console.log(JSON.stringify({ holding: counts.reduce((a, b) => a + b, 0) }));
  await new Promise(() => {}); // killed by the test
}
await Promise.all(threads.map((t) => t.terminate()));
await limiter.close();
console.log(JSON.stringify({ admitted: counts.reduce((a, b) => a + b, 0) }));
redis.disconnect();
