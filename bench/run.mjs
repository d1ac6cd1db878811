// npm run bench [-- --quick] [-- --threads=N]
//                [-- --parts=native,latency,peers,acquire,threads,effective,growth,cluster,http,redis,fleet,host]
//                [-- --native=native-bench/results/latest.json] [-- --json=FILE]
//
// 1. The floor: native-bench (its atomics, clock, layout, wake, ipc and c11 groups), in this
//    run, unless --native names a saved result.
// 2. Per-decision latency of every algorithm (latency.mjs), each in a child process beside
//    the floors measured there, then the peers (limiter, rate-limiter-flexible, bottleneck)
//    the same way.
// 3. acquire(): when a permit is free, and the wake-up of a queued waiter (acquire.mjs).
//    Throughput over 1…N worker threads (threads.mjs) and the effective-limit demonstration
//    (effective-limit.mjs).
// 4. The cluster bridge (cluster.mjs): a worker process asking the primary's limiter over IPC,
//    one call at a time and 64 in flight, beside rate-limiter-flexible's RateLimiterCluster.
// 5. The HTTP middleware (http.mjs): autocannon against Express and Fastify "hello world" with
//    no limiter, with atomic-limiter/http, and with express-rate-limit / @fastify/rate-limit.
// 6. Redis (redis.mjs): atomic-limiter/redis beside rate-limiter-flexible's RateLimiterRedis on
//    one redis-server started for the run, one hot key and 1 024 keys, beside the floor (a
//    trivial EVALSHA round trip) and the state floor, with Redis's CPU per decision; then Redis
//    killed and restarted under whenUnavailable 'allow'; fleet mode (fleet.mjs); each skipped
//    with one line when redis-server is not on the PATH.
// 6c. Host mode (host.mjs): host memory beside worker threads (decision, N processes on one
//    key, cross-process wake-up); skipped with one line when its native addon cannot load.
// 7. The report: console tables, bench/results/latest.json, latency.svg, throughput.svg, and
//    the Markdown tables (results-md.mjs): bench/RESULTS.md and the README's summary after a
//    run of every part, bench/results/RESULTS.md after a quick or partial one.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { GROUPS, runNativeBench } from '../native-bench/run.mjs';
import { runAcquire } from './acquire.mjs';
import { runCluster } from './cluster.mjs';
import { runEffective } from './effective-limit.mjs';
import { runFleet } from './fleet.mjs';
import { formatGrowth, runGrowth } from './growth.mjs';
import { runHttp } from './http.mjs';
import { parseOptions, progress } from './lib.mjs';
import { haveRedisServer, runRedis } from './redis.mjs';
import { analyzeLatency, analyzeThreads, formatReport, nativeFloors } from './report.mjs';
import { commitOf, formatResultsMarkdown, withSummary } from './results-md.mjs';
import { SUBJECTS } from './subjects.mjs';
import { latencySvg, throughputSvg } from './svg.mjs';
import { runThreads } from './threads.mjs';

const LATENCY = fileURLToPath(new URL('./latency.mjs', import.meta.url));
const CHILD_TIMEOUT_MS = 10 * 60_000;

const opts = parseOptions();
const started = performance.now();
const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
const cpus = os.cpus();
const result = {
  date: new Date().toISOString(),
  machine: {
    node: process.version,
    cpus: os.availableParallelism(),
    model: cpus[0]?.model?.trim() || 'unknown',
    platform: `${os.platform()} ${os.release()}`,
  },
  quick: opts.quick,
  maxThreads: opts.threads,
};
progress(
  `atomic-limiter bench (${opts.quick ? 'quick' : 'full'}): ${result.machine.cpus} CPUs, Node ${process.version}, parts: ${[...opts.parts].join(', ')}`,
);

// ---- 1. floor -----------------------------------------------------------------------------
let figures = {};
if (opts.nativeFile) {
  figures = JSON.parse(readFileSync(opts.nativeFile, 'utf8')).figures;
  result.nativeSource = `saved: ${opts.nativeFile}`;
} else if (opts.parts.has('native')) {
  for (const group of Object.keys(GROUPS)) {
    progress(`[${elapsed()}] native-bench ${group}…`);
    const r = await runNativeBench({ quick: opts.quick, groups: [group] });
    Object.assign(figures, r.figures);
  }
  result.nativeSource = `measured in this run${opts.quick ? ', --quick' : ''}`;
} else {
  result.nativeSource = 'not measured (--parts)';
}
result.nativeFigures = figures;
result.floors = nativeFloors(figures);

// ---- 2. per-decision latency, ours then peers ---------------------------------------------
const children = [];
for (const subject of SUBJECTS) {
  const part = subject.kind === 'ours' ? 'latency' : 'peers';
  if (!opts.parts.has(part)) continue;
  progress(`[${elapsed()}] latency: ${subject.name} (own process)`);
  const child = spawnSync(
    process.execPath,
    [LATENCY, `--subject=${subject.name}`, ...(opts.quick ? ['--quick'] : [])],
    { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', timeout: CHILD_TIMEOUT_MS },
  );
  if (child.status !== 0) {
    throw new Error(
      `latency of ${subject.name} failed (exit ${child.status}, ${child.error ?? ''})`,
    );
  }
  children.push(JSON.parse(child.stdout.trim().split('\n').pop()));
}
if (children.length > 0) result.latency = analyzeLatency(children, result.floors);

// ---- 3. acquire(), threads ----------------------------------------------------------------
if (opts.parts.has('acquire')) {
  progress(`[${elapsed()}] acquire(): free permit, and wake-up within and across threads`);
  result.acquire = await runAcquire({ quick: opts.quick });
}
// ---- threads -----------------------------------------------------------------------------
if (opts.parts.has('threads')) {
  progress(`[${elapsed()}] throughput over 1…${opts.threads} threads`);
  result.threads = analyzeThreads(
    await runThreads({ quick: opts.quick, maxThreads: opts.threads }),
    result.floors,
  );
}
if (opts.parts.has('effective')) {
  progress(`[${elapsed()}] effective limit over 1…${opts.threads} threads`);
  result.effective = await runEffective({ maxThreads: opts.threads });
}

if (opts.parts.has('growth')) {
  progress(`[${elapsed()}] the growing key table: created at N keys against grown to N`);
  result.growth = await runGrowth({ quick: opts.quick });
}

// ---- 4. cluster ----------------------------------------------------------------------------
if (opts.parts.has('cluster')) {
  progress(`[${elapsed()}] cluster: ours and rate-limiter-flexible in one cluster, in turns`);
  result.cluster = await runCluster({ quick: opts.quick });
}

// ---- 5. HTTP -------------------------------------------------------------------------------
if (opts.parts.has('http')) {
  progress(`[${elapsed()}] http: Express and Fastify, no limiter / ours / their usual peer`);
  result.http = await runHttp({ quick: opts.quick });
}

// ---- 6. redis -----------------------------------------------------------------------------
if (opts.parts.has('redis')) {
  if (haveRedisServer()) {
    progress(`[${elapsed()}] redis: ours and rate-limiter-flexible on one redis-server`);
    result.redis = await runRedis({
      quick: opts.quick,
      progress: (m) => progress(`[${elapsed()}] ${m}`),
    });
  } else {
    progress('redis: skipped — no redis-server on the PATH');
    result.redis = { skipped: 'no redis-server on the PATH' };
  }
}

// ---- 6b. fleet mode ------------------------------------------------------------------------
if (opts.parts.has('fleet')) {
  if (haveRedisServer()) {
    progress(`[${elapsed()}] fleet: 4 threads on one hot key, block 64 / plain Redis / rlf`);
    result.fleet = await runFleet({ quick: opts.quick });
  } else {
    progress('fleet: skipped — no redis-server on the PATH');
    result.fleet = { skipped: 'no redis-server on the PATH' };
  }
}

// ---- 6c. host mode ------------------------------------------------------------------------
if (opts.parts.has('host')) {
  progress(`[${elapsed()}] host: host memory beside worker threads`);
  try {
    const { runHost } = await import('./host.mjs');
    result.host = await runHost({ quick: opts.quick });
  } catch (error) {
    const why = String(error?.message ?? error).split('\n')[0];
    progress(`host: skipped — ${why}`);
    result.host = { skipped: why };
  }
}

// ---- 7. report ------------------------------------------------------------------------------
result.wallSeconds = Math.round((performance.now() - started) / 100) / 10;
console.log(`\n${formatReport(result)}`);
if (result.growth) console.log(`\n${formatGrowth(result.growth)}`);
if (result.host && !result.host.skipped) {
  const { formatHost } = await import('./host.mjs');
  console.log(`\n${formatHost(result.host)}`);
}
const dir = new URL('./results/', import.meta.url);
mkdirSync(dir, { recursive: true });
const jsonFile = opts.jsonFile ?? fileURLToPath(new URL('latest.json', dir));
writeFileSync(jsonFile, `${JSON.stringify(result, null, 2)}\n`);
const written = [jsonFile];
if (result.latency) {
  const f = fileURLToPath(new URL('latency.svg', dir));
  writeFileSync(f, latencySvg(result));
  written.push(f);
}
if (result.threads || result.effective) {
  const f = fileURLToPath(new URL('throughput.svg', dir));
  writeFileSync(f, throughputSvg(result));
  written.push(f);
}
// The committed tables come from a full run of every part; any other run writes its own copy
// beside the JSON, so that a quick or partial run never replaces them.
const root = new URL('../', import.meta.url);
const commit = commitOf(fileURLToPath(root));
const everyPart = !process.argv.some((a) => a.startsWith('--parts=')) && !opts.nativeFile;
const committed = everyPart && !opts.quick;
const resultsFile = fileURLToPath(new URL('RESULTS.md', committed ? import.meta.url : dir));
writeFileSync(resultsFile, formatResultsMarkdown(result, { commit }));
written.push(resultsFile);
if (committed) {
  const readme = fileURLToPath(new URL('README.md', root));
  const before = readFileSync(readme, 'utf8');
  const after = withSummary(before, result);
  if (after !== before) {
    writeFileSync(readme, after);
    written.push(readme);
  }
}
console.log(`\nwritten in ${result.wallSeconds} s: ${written.join(', ')}`);
