// Fleet mode: 4 worker threads of one process on one hot key, on one redis-server started
// here. Subjects, in the same run: atomic-limiter/redis TokenBucket with `block: 64` (the
// threads attach() one limiter: shared blocks), the same without blocks (a Redis call per
// decision), and rate-limiter-flexible's RateLimiterRedis. Each thread awaits its calls one
// at a time. Fleet mode and plain Redis take turns, three rounds of each (see runFleet()). Redis calls are counted by the server (INFO commandstats, after RESETSTAT).
// Also: a refused hot key (capacity 1, 1 per second: retryAfterMs ≈ 1000) hammered by the
// 4 threads for a while: Redis calls per retryAfterMs.
//
//   runFleet({ quick })        from run.mjs (part "fleet")
//   node bench/fleet.mjs       alone, prints the JSON
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { startServer } from './redis.mjs';

const THREADS = 4;
/** Turns taken by fleet mode and plain Redis (the two subjects whose ratio is reported). */
const ROUNDS = 3;
const BLOCK = 64;
const KEY = 'hot';
const WARM = 3000;

async function thread() {
  const { Redis } = await import('ioredis');
  const { TokenBucket, attach } = await import('../dist/redis.js');
  const { RateLimiterRedis } = await import('rate-limiter-flexible');
  const { subject, port, n, handle, hammerMs } = workerData;
  const redis = new Redis(port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
  let call;
  let limiter;
  if (subject === 'fleet' || subject === 'fleetTurns' || subject === 'refused') {
    limiter = attach(handle, { redis });
    call = () => limiter.tryAcquire(KEY);
  } else if (subject === 'plain') {
    limiter = new TokenBucket({ redis, capacity: 2 ** 24, refillPerSecond: 1e6, prefix: 'fb' });
    call = () => limiter.tryAcquire(KEY);
  } else {
    const rlf = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: 'fb-rlf',
      points: 2 ** 30,
      duration: 3600,
    });
    call = () => rlf.consume(KEY);
  }
  // Warm: enough calls that the client's code is optimised before timing (with 200, plain
  // Redis's quick runs timed it part-way: 22–24 k decisions/s against 35 k in full runs).
  for (let i = 0; i < WARM; i++) await call();
  parentPort.postMessage({ ready: true });
  await new Promise((r) => parentPort.once('message', r));
  const lat = new Float64Array(n);
  let done = 0;
  let allowed = 0;
  const t0 = performance.now();
  if (subject === 'refused') {
    while (performance.now() - t0 < hammerMs) {
      if (await call()) allowed++;
      done++;
    }
  } else {
    // fleetTurns: an event-loop turn every 16 decisions, as a server's requests arrive.
    const turns = subject === 'fleetTurns';
    for (; done < n; done++) {
      if (turns && (done & 15) === 0) await new Promise(setImmediate);
      const s = performance.now();
      await call();
      lat[done] = performance.now() - s;
    }
  }
  const wallMs = performance.now() - t0;
  await limiter?.close();
  redis.disconnect();
  parentPort.postMessage({ done, allowed, wallMs, lat: subject === 'refused' ? [] : [...lat] });
}

async function redisCalls(admin) {
  const info = await admin.info('commandstats');
  // Round trips: script calls (commands a script runs are counted apart by Redis, not here).
  let n = 0;
  for (const m of info.matchAll(/cmdstat_(evalsha|eval|evalsha_ro|eval_ro|fcall):calls=(\d+)/g)) {
    n += Number(m[2]);
  }
  return n;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2;
}

/** One subject's rounds as one row: medians of the rounds' figures, calls over all of them. */
function medianOfRounds(rounds) {
  const sum = (f) => rounds.reduce((a, r) => a + f(r), 0);
  const decisions = sum((r) => r.decisions);
  const redisCalls = sum((r) => r.redisCalls);
  return {
    decisions,
    allowed: sum((r) => r.allowed),
    decisionsPerSecond: Math.round(median(rounds.map((r) => r.decisionsPerSecond))),
    p50Us: median(rounds.map((r) => r.p50Us)),
    p99Us: median(rounds.map((r) => r.p99Us)),
    redisCalls,
    redisCallsPer1000: (redisCalls / decisions) * 1000,
    wallMs: sum((r) => r.wallMs),
  };
}

async function runSubject(port, admin, subject, n, handle, hammerMs) {
  const file = fileURLToPath(import.meta.url);
  const workers = Array.from(
    { length: THREADS },
    () => new Worker(file, { workerData: { subject, port, n, handle, hammerMs } }),
  );
  const next = (w) =>
    new Promise((resolve, reject) => w.once('message', resolve).once('error', reject));
  await Promise.all(workers.map(next));
  await admin.config('RESETSTAT');
  const t0 = performance.now();
  const results = Promise.all(workers.map(next));
  for (const w of workers) w.postMessage('go');
  const out = await results;
  const wallMs = performance.now() - t0;
  const calls = await redisCalls(admin);
  await Promise.all(workers.map((w) => w.terminate()));
  const decisions = out.reduce((a, r) => a + r.done, 0);
  const lat = out.flatMap((r) => r.lat).sort((a, b) => a - b);
  return {
    decisions,
    allowed: out.reduce((a, r) => a + r.allowed, 0),
    decisionsPerSecond: Math.round(decisions / (wallMs / 1000)),
    p50Us: lat.length ? lat[Math.floor(lat.length / 2)] * 1000 : undefined,
    p99Us: lat.length ? lat[Math.floor(lat.length * 0.99)] * 1000 : undefined,
    redisCalls: calls,
    redisCallsPer1000: (calls / decisions) * 1000,
    wallMs,
  };
}

export async function runFleet({ quick = false } = {}) {
  const server = await startServer();
  const { Redis } = await import('ioredis');
  const { TokenBucket } = await import('../dist/redis.js');
  const admin = new Redis(server.port, '127.0.0.1');
  const owner = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
  try {
    const n = quick ? 20_000 : 100_000;
    const nRedis = quick ? 2_000 : 5_000;
    const fleetLimiter = new TokenBucket({
      redis: owner,
      capacity: 2 ** 24,
      refillPerSecond: 1e6,
      block: BLOCK,
      prefix: 'fb-fleet',
    });
    // Fleet mode and plain Redis take turns, ROUNDS times (in the other order every other
    // round): a noisy moment of this shared machine then lands on both, and the ratio
    // reported is the median of the rounds' own ratios.
    const fleetRounds = [];
    const plainRounds = [];
    for (let r = 0; r < ROUNDS; r++) {
      const runFleetRound = async () =>
        fleetRounds.push(await runSubject(server.port, admin, 'fleet', n, fleetLimiter.handle));
      const runPlainRound = async () =>
        plainRounds.push(await runSubject(server.port, admin, 'plain', nRedis));
      if (r % 2 === 0) {
        await runFleetRound();
        await runPlainRound();
      } else {
        await runPlainRound();
        await runFleetRound();
      }
    }
    const fleet = medianOfRounds(fleetRounds);
    const plain = medianOfRounds(plainRounds);
    const fleetOverPlainRounds = fleetRounds.map(
      (f, i) => f.decisionsPerSecond / plainRounds[i].decisionsPerSecond,
    );
    const fleetTurns = await runSubject(server.port, admin, 'fleetTurns', n, fleetLimiter.handle);
    await fleetLimiter.close();
    // The same with leases that may grow to 8 blocks (maxBlock): more permits per round
    // trip for a hot key, more held unspent (README, "Fleet mode").
    const grownLimiter = new TokenBucket({
      redis: owner,
      capacity: 2 ** 24,
      refillPerSecond: 1e6,
      block: BLOCK,
      maxBlock: 8 * BLOCK,
      prefix: 'fb-grown',
    });
    const fleetGrown = await runSubject(server.port, admin, 'fleet', n, grownLimiter.handle);
    await grownLimiter.close();
    // The same leasing ahead (leaseAhead: true): no round trip's wait each time the block
    // runs out, up to 2 × block + block / 4 held per process.
    const aheadLimiter = new TokenBucket({
      redis: owner,
      capacity: 2 ** 24,
      refillPerSecond: 1e6,
      block: BLOCK,
      leaseAhead: true,
      prefix: 'fb-ahead',
    });
    const fleetAhead = await runSubject(server.port, admin, 'fleet', n, aheadLimiter.handle);
    await aheadLimiter.close();
    const rlf = await runSubject(server.port, admin, 'rlf', nRedis);
    // A refused hot key: 1 permit, 1 per second; the threads hammer it for hammerMs.
    const hammerMs = quick ? 1000 : 2000;
    const refusedLimiter = new TokenBucket({
      redis: owner,
      capacity: 1,
      refillPerSecond: 1,
      block: 1,
      prefix: 'fb-refused',
    });
    const refused = await runSubject(
      server.port,
      admin,
      'refused',
      0,
      refusedLimiter.handle,
      hammerMs,
    );
    await refusedLimiter.close();
    // Calls that were refusals (each grant is one call too), per retryAfterMs (1 s) begun.
    const refusedCallsPerRetryAfter =
      (refused.redisCalls - refused.allowed) / Math.ceil(refused.wallMs / 1000);
    const ratios = {
      fleetOverPlain: median(fleetOverPlainRounds),
      fleetOverPlainRounds,
      fleetOverRlf: fleet.decisionsPerSecond / rlf.decisionsPerSecond,
      fleetTurnsOverPlain: fleetTurns.decisionsPerSecond / plain.decisionsPerSecond,
      fleetGrownOverPlain: fleetGrown.decisionsPerSecond / plain.decisionsPerSecond,
      fleetAheadOverPlain: fleetAhead.decisionsPerSecond / plain.decisionsPerSecond,
    };
    return {
      threads: THREADS,
      block: BLOCK,
      rounds: ROUNDS,
      subjects: { fleet, fleetTurns, fleetGrown, fleetAhead, plain, rlf, refused },
      // Redis calls a refused hot key made per retryAfterMs (1 s) in this process.
      ratios: { ...ratios, refusedCallsPerRetryAfter },
    };
  } finally {
    admin.disconnect();
    owner.disconnect();
    await server.stop();
  }
}

if (!isMainThread && workerData?.subject) await thread();
else if (isMainThread && process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(JSON.stringify(await runFleet({ quick: process.argv.includes('--quick') }), null, 2));
}
