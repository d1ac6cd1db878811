// Redis: atomic-limiter/redis beside rate-limiter-flexible's RateLimiterRedis, on one
// redis-server started here (free loopback port, no persistence), one ioredis client each.
//
//   runRedis({ quick })                       from run.mjs (part "redis")
//   node bench/redis.mjs [--quick]            alone, prints the JSON
//
// Measured, for each subject, with every call allowed (limits far above the calls):
//   (i)   one at a time: each call awaited before the next (p50 / p99 per call);
//   (ii)  64 in flight: 64 loops each awaiting its own calls; per-call cost = wall ÷ calls;
//   (iii) Redis's own CPU per call (INFO commandstats: the script commands' usec).
// Figures are medians over rounds; each ratio is the median of the rounds' own ratios.
// The floor: a trivial script (`return 1`) run by EVALSHA through the same kind of client —
// one network round trip and one script call, nothing else. Beside it, the state floor: a
// script that only does what any decision kept in Redis must (`TIME`, `GET` the key, `SET`
// it back; no arithmetic, a constant value) — the least a correct single-call script can
// cost, so the gap above it is ours. Its `SET` keeps the key's TTL (`KEEPTTL`), as a hot
// key's decisions do (single.lua.ts saveState()); the TTL is set once, before the rounds.
// Rounds are many and short, each running the subjects in a fresh random order (in flight:
// the first few rounds only), so that a noisy moment, or the subject run just before (its
// garbage, its cache footprint), hits all of them alike.
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
    ? { warm: 500, rounds: 6, oneAtATime: 300, inFlightRounds: 2, inFlightCalls: IN_FLIGHT * 60 }
    : {
        warm: 2000,
        rounds: 20,
        oneAtATime: 600,
        inFlightRounds: 5,
        inFlightCalls: IN_FLIGHT * 300,
      };
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
    const c = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    clients.push(c);
    return c;
  };
  try {
    const floorClient = client();
    const sha = await floorClient.script('LOAD', 'return 1');
    const stateSha = await floorClient.script(
      'LOAD',
      "redis.call('TIME') redis.call('GET', KEYS[1]) " +
        "redis.call('SET', KEYS[1], '1795435752520400 20457 789', 'KEEPTTL') return 1",
    );
    await floorClient.set('bench-state', '1795435752520400 20457 789', 'PX', 3_600_000);
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
      stateFloor: () => floorClient.evalsha(stateSha, 1, 'bench-state'),
      tryAcquire: () => ours.tryAcquire(KEY),
      consume: () => ours.consume(KEY),
      rlf: () => rlf.consume(KEY),
    };
    const z = sizes(quick);
    for (const call of Object.values(calls)) {
      for (let i = 0; i < z.warm; i++) await call();
      await inFlight(call, IN_FLIGHT * 20);
    }
    // Server CPU per decision: the script commands' own time (INFO commandstats), read
    // before and after each subject's turn.
    const serverUs = async () => {
      const info = await floorClient.info('commandstats');
      let us = 0;
      for (const m of info.matchAll(/cmdstat_eval(?:sha)?:calls=\d+,usec=(\d+)/g))
        us += Number(m[1]);
      return us;
    };
    const samples = Object.fromEntries(
      Object.keys(calls).map((k) => [
        k,
        { p50: [], p99: [], many: [], serverOneUs: 0, serverManyUs: 0 },
      ]),
    );
    const ratioRounds = [];
    const names = Object.keys(calls);
    for (let r = 0; r < z.rounds; r++) {
      const round = {};
      for (let i = names.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [names[i], names[j]] = [names[j], names[i]];
      }
      for (const name of names) {
        const call = calls[name];
        const s = samples[name];
        const t0 = await serverUs();
        const one = [];
        await oneAtATime(call, z.oneAtATime, one);
        one.sort((a, b) => a - b);
        s.serverOneUs += (await serverUs()) - t0;
        s.p50.push(percentile(one, 0.5));
        s.p99.push(percentile(one, 0.99));
        round[name] = { p50: percentile(one, 0.5) };
        if (r < z.inFlightRounds) {
          const t1 = await serverUs();
          const many = await inFlight(call, z.inFlightCalls);
          s.serverManyUs += (await serverUs()) - t1;
          s.many.push(many);
          round[name].many = many;
        }
      }
      const ratios = {
        oneAtATimeOverFloor: round.tryAcquire.p50 / round.floor.p50,
        stateFloorOverFloor: round.stateFloor.p50 / round.floor.p50,
        oneAtATimeOverStateFloor: round.tryAcquire.p50 / round.stateFloor.p50,
        consumeOverFloor: round.consume.p50 / round.floor.p50,
      };
      if (r < z.inFlightRounds) {
        ratios.inFlightOverRlf = round.tryAcquire.many / round.rlf.many;
        ratios.consumeInFlightOverRlf = round.consume.many / round.rlf.many;
        ratios.inFlightOverFloor = round.tryAcquire.many / round.floor.many;
      }
      ratioRounds.push(ratios);
    }
    const out = {};
    for (const [name, s] of Object.entries(samples)) {
      out[name] = {
        p50Us: median(s.p50),
        p99Us: median(s.p99),
        inFlight64PerCallUs: median(s.many),
        serverUsPerCall: s.serverOneUs / (z.oneAtATime * z.rounds),
        serverUsPerCallInFlight: s.serverManyUs / (z.inFlightCalls * z.inFlightRounds),
      };
    }
    // Each ratio is the median over rounds of that round's ratio: a noisy moment moves
    // one round, in which every subject ran within seconds of the others.
    const ratios = {};
    for (const k of Object.keys(ratioRounds[0])) {
      ratios[k] = median(ratioRounds.filter((x) => k in x).map((x) => x[k]));
    }
    return {
      inFlight: IN_FLIGHT,
      rounds: z.rounds,
      inFlightRounds: z.inFlightRounds,
      subjects: out,
      ratios,
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
