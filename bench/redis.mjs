// Redis: atomic-limiter/redis beside rate-limiter-flexible's RateLimiterRedis, on one
// redis-server started here (free loopback port, no persistence), one ioredis client each.
//
//   runRedis({ quick })                       from run.mjs (part "redis")
//   node bench/redis.mjs [--quick]            alone, prints the JSON
//
// Two workloads: one hot key, and 1 024 keys (an API keyed by user: each call takes the next
// key of a fixed pseudo-random sequence, the same sequence for every subject). For each
// subject and workload, with every call allowed (limits far above the calls):
//   (i)   one at a time: each call awaited before the next (p50 / p99 per call);
//   (ii)  64 in flight: 64 loops each awaiting its own calls; per-call cost = wall ÷ calls;
//   (iii) Redis's own CPU per decision: CONFIG RESETSTAT before the subject's turn, INFO
//         commandstats after it, the usec of the commands the subject sends ÷ decisions.
//         Redis counts a script's or a transaction's inner commands twice (in EVALSHA's or
//         EXEC's usec, and again under their own names), so only the commands the client
//         sends count; which those are is read once per subject with MONITOR.
// Figures are medians over rounds; each ratio is the median of the rounds' own ratios (CPU
// ratios: of the totals over all rounds).
// The floor: a trivial script (`return 1`) run by EVALSHA through the same kind of client —
// one network round trip and one script call, nothing else. Beside it, the state floor: a
// script that only does what any decision kept in Redis must (`TIME`, `GET` the key, `SET`
// it back; no arithmetic, a constant value) — the least a correct single-call script can
// cost, so the gap above it is ours. Its `SET` keeps the key's TTL (`KEEPTTL`), as a hot
// key's decisions do (single.lua.ts saveState()); the TTL is set once, before the rounds.
// Rounds are many and short, each running every subject on both workloads in a fresh random
// order (in flight: the first few rounds only), so that a noisy moment, or the subject run
// just before (its garbage, its cache footprint), hits all of them alike.
//
// Redis down, on a redis-server of its own: a TokenBucket with whenUnavailable 'allow' and
// timeoutMs 500 on an ioredis client with its default options (offline queue, reconnecting
// with its default back-off) but autoResendUnfulfilledCommands: false, as the library asks.
// The server is killed (SIGKILL); decisions go on one at a time (1 ms apart): the first
// one's time, and the median of the later ones while it is down.
// Then the server restarts on the same port: the time from its first PONG to the first
// decision that reached Redis. A decision answered without Redis says `reason: 'unavailable'`
// and always reports `remaining: limit - 1`; one answered by Redis counts the key down, so the
// first decision reporting less than `limit - 1` proves Redis answered it (the one before it
// too, when it was one more and not 'unavailable': the restarted Redis started the key afresh).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { rng } from '../native-bench/lib.mjs';

const IN_FLIGHT = 64;
const HOT = 'bench';
const KEY_COUNT = 1024;
const ORDER = 1 << 16;
const DOWN_TIMEOUT_MS = 500;

export function haveRedisServer() {
  return spawnSync('redis-server', ['--version']).status === 0;
}

function sizes(quick) {
  return quick
    ? {
        warm: 500,
        rounds: 10,
        oneAtATime: 500,
        inFlightRounds: 5,
        inFlightCalls: IN_FLIGHT * 100,
        downMs: 2000,
      }
    : {
        warm: 2000,
        rounds: 30,
        oneAtATime: 1000,
        inFlightRounds: 12,
        inFlightCalls: IN_FLIGHT * 300,
        downMs: 3000,
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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One raw PING on a fresh connection: true when the server answers PONG. */
function pingOnce(port) {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(200, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (b) => done(b.toString().startsWith('+PONG')));
  });
}

/** Resolves with performance.now() at the first PONG; polls every `everyMs`. */
async function waitReady(port, everyMs) {
  for (let i = 0; ; i++) {
    if (await pingOnce(port)) return performance.now();
    if (i > 20_000 / everyMs) throw new Error(`redis-server on port ${port} did not start`);
    await sleep(everyMs);
  }
}

/**
 * A redis-server on a free loopback port, no persistence. `kill()` SIGKILLs it and
 * `restart()` starts it again on the same port (resolving with the time of its first PONG).
 */
export async function startServer() {
  const dir = mkdtempSync(join(tmpdir(), 'al-bench-redis-'));
  const port = await freePort();
  let child;
  const launch = () => {
    child = spawn(
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
    child.exitedP = new Promise((r) => child.once('exit', r));
  };
  const kill = async () => {
    child.kill('SIGKILL');
    await child.exitedP;
  };
  launch();
  await waitReady(port, 25);
  return {
    port,
    kill,
    restart: () => {
      launch();
      return waitReady(port, 2);
    },
    stop: async () => {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}
function median(xs) {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2;
}
function shuffle(xs) {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [xs[i], xs[j]] = [xs[j], xs[i]];
  }
  return xs;
}

function check(v) {
  if (v === false || v?.allowed === false) throw new Error('refused: the bench limit should allow');
}

async function oneAtATime(call, next, n, out) {
  for (let i = 0; i < n; i++) {
    const key = next();
    const t = performance.now();
    const v = await call(key);
    out.push((performance.now() - t) * 1000);
    check(v);
  }
}

async function inFlight(call, next, total) {
  const per = total / IN_FLIGHT;
  const loop = async () => {
    for (let i = 0; i < per; i++) check(await call(next()));
  };
  const t = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop));
  return ((performance.now() - t) * 1000) / total;
}

/** `INFO commandstats` as a Map of command name (`config|resetstat`) → usec. */
async function commandStats(client) {
  const info = await client.info('commandstats');
  const out = new Map();
  for (const m of info.matchAll(/cmdstat_([^:]+):calls=\d+,usec=(\d+)/g)) {
    out.set(m[1], Number(m[2]));
  }
  return out;
}
function usecOf(stats, commands) {
  let us = 0;
  for (const [name, usec] of stats) {
    if (commands.includes(name.split('|')[0])) us += usec;
  }
  return us;
}

/**
 * The commands `run` makes the client send, by MONITOR: those a connection sends itself, not
 * those a script calls (source "lua") nor those a transaction queues (between MULTI and EXEC,
 * counted again under their own names when EXEC runs them).
 */
async function sentCommands(redisPort, Redis, marker, run) {
  const client = new Redis(redisPort, '127.0.0.1');
  const monitor = await client.monitor();
  const sent = new Set();
  const inMulti = new Set();
  let ended;
  const end = new Promise((r) => {
    ended = r;
  });
  let done = false;
  monitor.on('monitor', (_time, args, source) => {
    if (done) return;
    const name = String(args[0]).toLowerCase();
    if (name === 'echo' && args[1] === marker) {
      done = true;
      ended();
      return;
    }
    if (source === 'lua') return;
    if (inMulti.has(source)) {
      if (name === 'exec' || name === 'discard') {
        inMulti.delete(source);
        sent.add(name);
      }
      return;
    }
    if (name === 'multi') inMulti.add(source);
    sent.add(name);
  });
  await run();
  let timer;
  await Promise.race([
    end,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error('MONITOR did not see the end marker')), 10_000);
    }),
  ]);
  clearTimeout(timer);
  monitor.disconnect();
  client.disconnect();
  return [...sent].sort();
}

const WORKLOADS = ['hotKey', 'manyKeys'];
const SUBJECTS = ['floor', 'stateFloor', 'tryAcquire', 'consume', 'rlf'];

export async function runRedis({ quick = false, progress = () => {} } = {}) {
  const z = sizes(quick);
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
  let ours;
  try {
    const stats = client();
    const floorClient = client();
    const sha = await floorClient.script('LOAD', 'return 1');
    const stateSha = await floorClient.script(
      'LOAD',
      "redis.call('TIME') redis.call('GET', KEYS[1]) " +
        "redis.call('SET', KEYS[1], '1795435752520400 20457 789', 'KEEPTTL') return 1",
    );
    const keys = Array.from({ length: KEY_COUNT }, (_, i) => `user:${i}`);
    for (const k of [HOT, ...keys]) {
      await floorClient.set(`bench-state:${k}`, '1795435752520400 20457 789', 'PX', 3_600_000);
    }
    ours = new TokenBucket({
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
      stateFloor: (k) => floorClient.evalsha(stateSha, 1, `bench-state:${k}`),
      tryAcquire: (k) => ours.tryAcquire(k),
      consume: (k) => ours.consume(k),
      rlf: (k) => rlf.consume(k),
    };
    // The 1 024-key sequence: fixed, and each subject walks it from the start on its own.
    const rand = rng(0x5eed);
    const order = Uint16Array.from({ length: ORDER }, () => Math.floor(rand() * KEY_COUNT));
    const cursors = {};
    const nextKey = (workload, name) => {
      if (workload === 'hotKey') return () => HOT;
      const id = `${workload}:${name}`;
      cursors[id] ??= 0;
      return () => keys[order[cursors[id]++ & (ORDER - 1)]];
    };

    progress('redis: warming up');
    for (const name of SUBJECTS) {
      const call = calls[name];
      for (let i = 0; i < z.warm; i++) await call(HOT);
      await inFlight(call, () => HOT, IN_FLIGHT * 20);
      // Every key once, so no measured call is a key's first.
      let i = 0;
      await inFlight(call, () => keys[i++ % KEY_COUNT], KEY_COUNT);
      await inFlight(call, nextKey('manyKeys', `warm-${name}`), IN_FLIGHT * 20);
    }
    const commands = {};
    for (const name of SUBJECTS) {
      const marker = `bench-monitor-${name}`;
      commands[name] = await sentCommands(server.port, Redis, marker, async () => {
        for (let i = 0; i < 20; i++) await calls[name](keys[i]);
        await inFlight(calls[name], () => HOT, IN_FLIGHT * 4);
        let i = 0;
        await inFlight(calls[name], () => keys[i++ % KEY_COUNT], IN_FLIGHT * 4);
        await stats.echo(marker);
      });
    }

    const blank = () => ({ p50: [], p99: [], many: [], cpuOne: 0, cpuMany: 0 });
    const samples = Object.fromEntries(
      WORKLOADS.map((w) => [w, Object.fromEntries(SUBJECTS.map((s) => [s, blank()]))]),
    );
    const ratioRounds = Object.fromEntries(WORKLOADS.map((w) => [w, []]));
    const cells = WORKLOADS.flatMap((w) => SUBJECTS.map((s) => [w, s]));
    for (let r = 0; r < z.rounds; r++) {
      progress(`redis: round ${r + 1} of ${z.rounds}`);
      const round = Object.fromEntries(WORKLOADS.map((w) => [w, {}]));
      for (const [w, name] of shuffle(cells)) {
        const call = calls[name];
        const s = samples[w][name];
        const next = nextKey(w, name);
        await stats.config('RESETSTAT');
        const one = [];
        await oneAtATime(call, next, z.oneAtATime, one);
        s.cpuOne += usecOf(await commandStats(stats), commands[name]);
        one.sort((a, b) => a - b);
        s.p50.push(percentile(one, 0.5));
        s.p99.push(percentile(one, 0.99));
        round[w][name] = { p50: percentile(one, 0.5) };
        if (r < z.inFlightRounds) {
          await stats.config('RESETSTAT');
          const many = await inFlight(call, next, z.inFlightCalls);
          s.cpuMany += usecOf(await commandStats(stats), commands[name]);
          s.many.push(many);
          round[w][name].many = many;
        }
      }
      for (const w of WORKLOADS) {
        const x = round[w];
        const ratios = { stateFloorOverFloor: x.stateFloor.p50 / x.floor.p50 };
        for (const ourName of ['tryAcquire', 'consume']) {
          ratios[`${ourName}OverFloor`] = x[ourName].p50 / x.floor.p50;
          ratios[`${ourName}OverStateFloor`] = x[ourName].p50 / x.stateFloor.p50;
          ratios[`${ourName}OverRlf`] = x[ourName].p50 / x.rlf.p50;
          if (r < z.inFlightRounds) {
            ratios[`${ourName}InFlightOverRlf`] = x[ourName].many / x.rlf.many;
            ratios[`${ourName}InFlightOverFloor`] = x[ourName].many / x.floor.many;
          }
        }
        ratioRounds[w].push(ratios);
      }
    }

    const workloads = {};
    for (const w of WORKLOADS) {
      const subjects = {};
      for (const [name, s] of Object.entries(samples[w])) {
        subjects[name] = {
          p50Us: median(s.p50),
          p99Us: median(s.p99),
          inFlightPerCallUs: median(s.many),
          cpuUsPerDecision: s.cpuOne / (z.oneAtATime * z.rounds),
          cpuUsPerDecisionInFlight: s.cpuMany / (z.inFlightCalls * z.inFlightRounds),
        };
      }
      // Each ratio is the median over rounds of that round's ratio: a noisy moment moves
      // one round, in which every subject ran within seconds of the others.
      const ratios = {};
      for (const k of Object.keys(ratioRounds[w][0])) {
        ratios[k] = median(ratioRounds[w].filter((x) => k in x).map((x) => x[k]));
      }
      for (const ourName of ['tryAcquire', 'consume']) {
        ratios[`${ourName}CpuOverRlf`] = samples[w][ourName].cpuOne / samples[w].rlf.cpuOne;
        ratios[`${ourName}CpuInFlightOverRlf`] =
          samples[w][ourName].cpuMany / samples[w].rlf.cpuMany;
      }
      workloads[w] = { subjects, ratios };
    }
    await ours.close();
    ours = undefined;
    progress('redis: Redis down and back (a redis-server of its own)');
    const down = await runDown(z);
    return {
      inFlight: IN_FLIGHT,
      keys: KEY_COUNT,
      rounds: z.rounds,
      inFlightRounds: z.inFlightRounds,
      commands,
      workloads,
      down,
    };
  } finally {
    await ours?.close();
    for (const c of clients) c.disconnect();
    await server.stop();
  }
}

/** The Redis-down row (see the top of this file). */
async function runDown(z) {
  const server = await startServer();
  const { Redis } = await import('ioredis');
  const { TokenBucket } = await import('../dist/redis.js');
  // ioredis's defaults, as an application has them (it queues commands while reconnecting),
  // but for the resend the library asks to turn off.
  const redis = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
  redis.on('error', () => {});
  const ours = new TokenBucket({
    redis,
    capacity: 1_000_000,
    refillPerSecond: 1,
    prefix: 'bench-down',
    whenUnavailable: 'allow',
    timeoutMs: DOWN_TIMEOUT_MS,
  });
  const decide = async () => {
    const t = performance.now();
    const d = await ours.consume(HOT);
    const end = performance.now();
    return { ms: end - t, end, remaining: d.remaining, limit: d.limit, reason: d.reason };
  };
  try {
    for (let i = 0; i < 200; i++) {
      if ((await decide()).reason === 'unavailable') throw new Error('Redis unavailable');
    }
    await server.kill();
    const killedAt = performance.now();
    const whileDown = [];
    while (performance.now() - killedAt < z.downMs) {
      whileDown.push(await decide());
      await sleep(1);
    }
    if (whileDown.some((d) => d.reason !== 'unavailable')) {
      throw new Error('a decision reached a Redis that was down');
    }
    let readyAt;
    const ready = server.restart().then((t) => {
      readyAt = t;
    });
    let prev;
    let backAt;
    let afterRestart = 0;
    const deadline = performance.now() + 30_000;
    while (backAt === undefined && performance.now() < deadline) {
      const d = await decide();
      afterRestart++;
      if (d.reason !== 'unavailable' && d.remaining < d.limit - 1) {
        backAt =
          prev && prev.reason !== 'unavailable' && prev.remaining === d.remaining + 1
            ? prev.end
            : d.end;
      }
      prev = d;
      await sleep(1);
    }
    await ready;
    const later = whileDown.slice(1).map((d) => d.ms);
    return {
      timeoutMs: DOWN_TIMEOUT_MS,
      downMs: z.downMs,
      firstMs: whileDown[0].ms,
      decisionsWhileDown: whileDown.length,
      medianAfterFirstMs: median(later),
      p99AfterFirstMs: percentile(
        later.sort((a, b) => a - b),
        0.99,
      ),
      decisionsUntilBack: afterRestart,
      backAfterRestartMs: backAt === undefined ? null : backAt - readyAt,
    };
  } finally {
    await ours.close();
    redis.disconnect();
    await server.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (!haveRedisServer()) {
    console.log('redis: skipped — no redis-server on the PATH');
  } else {
    console.log(
      JSON.stringify(
        await runRedis({
          quick: process.argv.includes('--quick'),
          progress: (m) => process.stderr.write(`${m}\n`),
        }),
        null,
        2,
      ),
    );
  }
}
