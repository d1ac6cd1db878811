// Redis: atomic-limiter/redis beside rate-limiter-flexible's RateLimiterRedis, on one
// redis-server started here (free loopback port, no persistence), one ioredis client each.
//
//   runRedis({ quick })                       from run.mjs (part "redis")
//   node bench/redis.mjs [--quick]            alone, prints the JSON
//
// Measured, for each subject, with every call allowed (limits far above the calls):
//   (i)  one at a time: each call awaited before the next (p50 / p99 per call);
//   (ii) 64 in flight: 64 loops each awaiting its own calls; per-call cost = wall ÷ calls.
// The floor: a trivial script (`return 1`) run by EVALSHA through the same kind of client —
// one network round trip and one script call, nothing else. Rounds interleave the subjects
// so that a noisy moment hits all of them.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const IN_FLIGHT = 64;
const KEY = 'bench';

export function haveRedisServer() {
  return spawnSync('redis-server', ['--version']).status === 0;
}

function sizes(quick) {
  return quick
    ? { warm: 500, rounds: 2, oneAtATime: 1000, inFlightCalls: IN_FLIGHT * 60 }
    : { warm: 2000, rounds: 5, oneAtATime: 3000, inFlightCalls: IN_FLIGHT * 300 };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export async function startServer() {
  const dir = mkdtempSync(join(tmpdir(), 'al-bench-redis-'));
  const port = await freePort();
  const child = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      dir,
    ],
    { stdio: 'ignore' },
  );
  const { Redis } = await import('ioredis');
  // A fresh client per attempt, with no reconnecting of its own: a client that reconnects
  // by itself makes every later connect() reject with "already connecting".
  for (let i = 0; ; i++) {
    const probe = new Redis(port, '127.0.0.1', { lazyConnect: true, retryStrategy: () => null });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      break;
    } catch (error) {
      probe.disconnect();
      if (i > 200) throw error;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  return {
    port,
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        });
        child.kill('SIGKILL');
      }),
  };
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}
function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2;
}

function check(v) {
  if (v === false || v?.allowed === false) throw new Error('refused: the bench limit should allow');
}

async function oneAtATime(call, n, out) {
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const v = await call();
    out.push((performance.now() - t) * 1000);
    check(v);
  }
}

async function inFlight(call, total) {
  const per = total / IN_FLIGHT;
  const loop = async () => {
    for (let i = 0; i < per; i++) check(await call());
  };
  const t = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop));
  return ((performance.now() - t) * 1000) / total;
}

export async function runRedis({ quick = false } = {}) {
  const server = await startServer();
  const { Redis } = await import('ioredis');
  const { TokenBucket } = await import('../dist/redis.js');
  const { RateLimiterRedis } = await import('rate-limiter-flexible');
  const clients = [];
  const client = () => {
    const c = new Redis(server.port, '127.0.0.1');
    clients.push(c);
    return c;
  };
  try {
    const floorClient = client();
    const sha = await floorClient.script('LOAD', 'return 1');
    const ours = new TokenBucket({
      redis: client(),
      capacity: 2 ** 24,
      refillPerSecond: 1e6,
      prefix: 'bench',
    });
    const rlf = new RateLimiterRedis({
      storeClient: client(),
      keyPrefix: 'bench-rlf',
      points: 2 ** 30,
      duration: 3600,
    });
    const calls = {
      floor: () => floorClient.evalsha(sha, 0),
      tryAcquire: () => ours.tryAcquire(KEY),
      consume: () => ours.consume(KEY),
      rlf: () => rlf.consume(KEY),
    };
    const z = sizes(quick);
    for (const call of Object.values(calls)) {
      for (let i = 0; i < z.warm; i++) await call();
      await inFlight(call, IN_FLIGHT * 20);
    }
    const samples = Object.fromEntries(Object.keys(calls).map((k) => [k, { one: [], many: [] }]));
    for (let r = 0; r < z.rounds; r++) {
      for (const [name, call] of Object.entries(calls)) {
        await oneAtATime(call, z.oneAtATime, samples[name].one);
        samples[name].many.push(await inFlight(call, z.inFlightCalls));
      }
    }
    const out = {};
    for (const [name, s] of Object.entries(samples)) {
      const one = s.one.sort((a, b) => a - b);
      out[name] = {
        p50Us: percentile(one, 0.5),
        p99Us: percentile(one, 0.99),
        inFlight64PerCallUs: median(s.many),
      };
    }
    const ratios = {
      oneAtATimeOverFloor: out.tryAcquire.p50Us / out.floor.p50Us,
      consumeOverFloor: out.consume.p50Us / out.floor.p50Us,
      inFlightOverRlf: out.tryAcquire.inFlight64PerCallUs / out.rlf.inFlight64PerCallUs,
      consumeInFlightOverRlf: out.consume.inFlight64PerCallUs / out.rlf.inFlight64PerCallUs,
      inFlightOverFloor: out.tryAcquire.inFlight64PerCallUs / out.floor.inFlight64PerCallUs,
    };
    return {
      inFlight: IN_FLIGHT,
      rounds: z.rounds,
      subjects: out,
      ratios,
      goals: {
        oneAtATime: {
          text: 'one at a time ≤ 1.1× the floor',
          met: ratios.oneAtATimeOverFloor <= 1.1,
        },
        inFlight: {
          text: `${IN_FLIGHT} in flight ≤ 0.7× rate-limiter-flexible's per-call cost`,
          met: ratios.inFlightOverRlf <= 0.7,
        },
      },
    };
  } finally {
    for (const c of clients) c.disconnect();
    await server.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (!haveRedisServer()) {
    console.log('redis: skipped — no redis-server on the PATH');
  } else {
    console.log(
      JSON.stringify(await runRedis({ quick: process.argv.includes('--quick') }), null, 2),
    );
  }
}
