// Two "machines" sharing one limit in Redis: two processes (stand-ins for two servers
// behind a load balancer), each with its own Redis connection and its own SlidingLog
// object, charge one customer's limit of 20 requests per minute. Together they get
// exactly 20, however the 20 fall between them.
//
//   REDIS_URL=redis://127.0.0.1:6379 node examples/redis-two-machines.mjs
//
// Needs a running Redis (REDIS_URL, default redis://127.0.0.1:6379) and ioredis. Both
// processes wait at a gate in Redis (BLPOP) and then send their 30 requests each at once.
// Prints what each machine admitted and a refusal's Decision; the last line is JSON.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { SlidingLog } from 'atomic-limiter/redis';
import { Redis } from 'ioredis';

const URL_ = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const LIMIT = 20; // per customer …
const WINDOW_MS = 60_000; // … per minute
const REQUESTS = 30; // per machine
const CUSTOMER = 'customer:7';
const PREFIX = `example-${process.env.EXAMPLE_RUN ?? process.pid}`;

async function machine(name) {
  const redis = new Redis(URL_, { autoResendUnfulfilledCommands: false });
  const gate = new Redis(URL_, { autoResendUnfulfilledCommands: false });
  const perCustomer = new SlidingLog({ redis, limit: LIMIT, windowMs: WINDOW_MS, prefix: PREFIX });
  process.send({ ready: name });
  await gate.blpop(`${PREFIX}:go:${name}`, 0);
  const decisions = await Promise.all(
    Array.from({ length: REQUESTS }, () => perCustomer.consume(CUSTOMER)),
  );
  const refused = decisions.find((d) => !d.allowed);
  process.send({
    name,
    admitted: decisions.filter((d) => d.allowed).length,
    refused: refused && { retryAfterMs: refused.retryAfterMs, remaining: refused.remaining },
  });
  await perCustomer.close();
  redis.disconnect();
  gate.disconnect();
}

async function main() {
  const run = String(process.pid);
  const names = ['A', 'B'];
  const kids = names.map((name) =>
    fork(fileURLToPath(import.meta.url), [name], { env: { ...process.env, EXAMPLE_RUN: run } }),
  );
  const results = await new Promise((resolve, reject) => {
    const ready = new Set();
    const out = [];
    for (const kid of kids) {
      kid.on('error', reject);
      kid.on('exit', (code) => code !== 0 && reject(new Error(`a machine exited ${code}`)));
      kid.on('message', async (m) => {
        if (m.ready) {
          ready.add(m.ready);
          if (ready.size === names.length) {
            // Open the gate for both at once.
            const redis = new Redis(URL_, { autoResendUnfulfilledCommands: false });
            for (const n of names) await redis.rpush(`example-${run}:go:${n}`, '1');
            redis.disconnect();
          }
          return;
        }
        out.push(m);
        if (out.length === names.length) resolve(out);
      });
    }
  });
  results.sort((a, b) => a.name.localeCompare(b.name));
  const total = results.reduce((n, r) => n + r.admitted, 0);
  console.log(
    `redis-two-machines: 2 processes, SlidingLog ${LIMIT} per ${WINDOW_MS / 1000} s for ${CUSTOMER}, ${REQUESTS} requests each`,
  );
  for (const r of results) console.log(`  machine ${r.name}: ${r.admitted} admitted`);
  const refused = results.find((r) => r.refused)?.refused;
  console.log(
    `  together: ${total} (limit ${LIMIT}); a refusal says retry after ${Math.ceil(refused.retryAfterMs / 1000)} s`,
  );
  // Clean up this run's keys.
  const redis = new Redis(URL_, { autoResendUnfulfilledCommands: false });
  await new SlidingLog({
    redis,
    limit: LIMIT,
    windowMs: WINDOW_MS,
    prefix: `example-${run}`,
  }).reset(CUSTOMER);
  redis.disconnect();
  console.log(
    JSON.stringify({
      example: 'redis-two-machines',
      limit: LIMIT,
      admitted: Object.fromEntries(results.map((r) => [r.name, r.admitted])),
      total,
      retryAfterMs: refused.retryAfterMs,
    }),
  );
}

if (process.argv[2]) await machine(process.argv[2]);
else await main();
