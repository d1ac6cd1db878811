// The HTTP middleware: a "hello world" server with no limiter, with ours (atomic-limiter/http,
// an in-memory TokenBucket), and with the peer a user of that framework would pick
// (express-rate-limit with its memory store; @fastify/rate-limit), on one key and on 10 000.
//
//   runHttp({ quick })                                     from run.mjs (part "http")
//   node bench/http.mjs --load             the load generator: one autocannon run per IPC message
//   (the servers and the in-process measurement: bench/http-subjects.mjs)
//
// 1. Under load: for each framework the three servers run side by side in child processes and
//    the load generator (autocannon) in another; with taskset and 2 CPUs, the servers are
//    pinned to CPU 0 and the load generator to CPU 1. Each server is warmed up with every key
//    first. Then rounds of none, ours, peer, none (ours and peer swap every other round) on
//    1 key and on 10 000; each limiter's overhead in a round is taken against the two
//    no-limiter loads around it, and the medians over rounds are reported, beside the noise
//    floor (how far the two no-limiter loads of a round differ). Three figures per request:
//    - wall: 1/rps − 1/rps(no limiter);
//    - CPU: the server's CPU time per request − that with no limiter (read over IPC);
//    - in situ: the time from a stamp taken just before the limiter to the handler's start,
//      median over the requests, − that with no limiter: the limiter's own time inside the
//      loaded server, which other processes taking the CPU barely move.
//    Each limiter with its default fields (ours: draft-8 RateLimit + RateLimit-Policy;
//    express-rate-limit and @fastify/rate-limit: X-RateLimit-Limit / -Remaining / -Reset).
// 2. In process, without the network: Express, the subject's middleware called on real
//    IncomingMessage / ServerResponse objects made Express's own as its app.handle() does
//    (prototypes, res.locals), each call awaited; Fastify, the whole app
//    through its own request handler on real IncomingMessage / ServerResponse objects whose
//    socket discards the reply. CPU µs per request minus no limiter's. Both with each
//    limiter's default fields and with the same draft-6 fields for all.
//
// Every subject reads the key from an `x-key` header with a key function (one key, or 10 000
// in turn). Limits are large enough that every request is allowed; any non-2xx answer fails
// the run. The report gives our overhead ÷ each peer's.
import { spawn, spawnSync } from 'node:child_process';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { draft6, FRAMEWORKS, IN_PROCESS_SUBJECTS, KEYS, PEER, SUBJECTS } from './http-subjects.mjs';

const SELF = fileURLToPath(import.meta.url);
const SUBJECTS_FILE = fileURLToPath(new URL('./http-subjects.mjs', import.meta.url));

function sizes(quick) {
  const base = {
    connections: 16,
    // Requests each server gets before any measurement, on top of one per key.
    warmupRequests: 3_000,
    pipelining: 1,
  };
  const sz = quick
    ? {
        ...base,
        warmupRequests: 500,
        rounds: 2,
        durationS: 0.5,
        inProcessRounds: 1,
        inProcessExpress: 10_000,
        inProcessFastify: 10_000,
        inProcessSubjects: SUBJECTS,
      }
    : {
        ...base,
        rounds: 7,
        durationS: 1.5,
        inProcessRounds: 3,
        inProcessExpress: 100_000,
        inProcessFastify: 50_000,
        inProcessSubjects: IN_PROCESS_SUBJECTS,
      };
  // Overrides for experiments: HTTP_BENCH='{"rounds":3,"pipelining":4}'.
  return { ...sz, ...JSON.parse(process.env.HTTP_BENCH ?? '{}') };
}

function inProcessChild(framework, subjects, n) {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        SUBJECTS_FILE,
        '--in-process',
        `--framework=${framework}`,
        `--subjects=${subjects}`,
        `--n=${n}`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0) reject(new Error(`${framework} in process: exit ${code}`));
      else resolve(JSON.parse(out.trim().split('\n').pop()));
    });
  });
}

// ---- the load (parent) --------------------------------------------------------------------

/**
 * Pinning: with taskset and two CPUs, the servers run on CPU 0 and the load generator on
 * CPU 1, so that neither takes the other's core (other processes of the machine still may).
 * Returns the command prefix for each side, or none.
 */
function pinning() {
  if (os.availableParallelism() < 2 || os.platform() !== 'linux') return undefined;
  const probe = spawnSync('taskset', ['-c', '0,1', process.execPath, '-e', '0'], {
    stdio: 'ignore',
  });
  if (probe.status !== 0) return undefined;
  return { server: ['taskset', '-c', '0'], loader: ['taskset', '-c', '1'] };
}

function spawnNode(prefix, args, stdio) {
  const [cmd, ...rest] = prefix ?? [process.execPath];
  return spawn(cmd, prefix ? [...rest, process.execPath, ...args] : args, { stdio });
}

function startServer(framework, subject, pin) {
  return new Promise((resolve, reject) => {
    const child = spawnNode(
      pin?.server,
      [SUBJECTS_FILE, '--serve', `--framework=${framework}`, `--subject=${subject}`],
      ['ignore', 'pipe', 'inherit', 'ipc'],
    );
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve({ port: JSON.parse(line).port, child });
    });
    child.once('error', reject);
    child.once('exit', (code) =>
      reject(new Error(`${framework}/${subject} server exited (${code})`)),
    );
  });
}

/** Asks a child over IPC and waits for its one answer. */
function ask(child, message) {
  return new Promise((resolve, reject) => {
    const onExit = (code) => reject(new Error(`child exited (${code}) during ${message.type}`));
    child.once('exit', onExit);
    child.once('message', (m) => {
      child.off('exit', onExit);
      if (m?.error) reject(new Error(m.error));
      else resolve(m);
    });
    child.send(message);
  });
}

/** The load generator: a child process running autocannon on request (see `--load`). */
function startLoader(pin) {
  return spawnNode(pin?.loader, [SELF, '--load'], ['ignore', 'inherit', 'inherit', 'ipc']);
}

/** One load on a port: `durationS` seconds, or `amount` requests (the warm-up). */
async function runLoad({ port, keys, durationS, amount, connections, pipelining }) {
  const { default: autocannon } = await import('autocannon');
  let n = 0;
  const result = await autocannon({
    url: `http://127.0.0.1:${port}/`,
    connections,
    pipelining,
    ...(amount === undefined ? { duration: durationS } : { amount }),
    requests: [
      {
        setupRequest: (req) => {
          // One key, or 10 000 in turn: the same work on the client side either way.
          req.headers = { 'x-key': keys === 1 ? 'k' : `k${n++ % keys}` };
          return req;
        },
      },
    ],
  });
  if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0) {
    throw new Error(
      `port ${port}: ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts`,
    );
  }
  return { requests: result.requests.total, seconds: result.duration };
}

/** One measured load: requests/s, and the server's CPU time per request and busy share. */
async function measure(loader, server, keys, sz) {
  const c0 = await ask(server.child, 'cpu');
  const t0 = performance.now();
  const { requests } = await ask(loader, {
    type: 'load',
    port: server.port,
    keys,
    durationS: sz.durationS,
    connections: sz.connections,
    pipelining: sz.pipelining,
  });
  const wallS = (performance.now() - t0) / 1000;
  const c1 = await ask(server.child, 'cpu');
  const cpuUs = c1.user + c1.system - (c0.user + c0.system);
  return {
    rps: requests / sz.durationS,
    cpuUs: cpuUs / requests,
    busy: cpuUs / 1e6 / wallS,
    spanUs: c1.spans.medianUs,
    spanMeanUs: c1.spans.meanUs,
  };
}

function nameOf(subject, framework) {
  if (subject === 'ours-no-fields') return 'atomic-limiter (no fields)';
  if (subject === 'bare-consume') return 'a bare consume()';
  const base = subject.startsWith('ours')
    ? 'atomic-limiter'
    : subject.startsWith('peer')
      ? PEER[framework]
      : 'no limiter';
  return draft6(subject) ? `${base} (draft-6)` : base;
}

/**
 * Ours ÷ the peer's overhead. `noiseUs`: the median change between the two no-limiter loads
 * of a round. A peer overhead within twice that (or at or below zero) cannot be told from
 * zero by the measurement: `withinNoise` says so, and the ratio means nothing then.
 */
function compare(ours, peer, noiseUs = 0) {
  const withinNoise = !(peer > 0 && peer > 2 * noiseUs);
  const ratio = peer > 0 ? Math.max(0, ours) / peer : undefined;
  return { ours, peer, noiseUs, ratio, withinNoise };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2;
}

/**
 * Under load. Per framework, the three servers run side by side (idle but for the one under
 * load), each warmed up first with every key it will see (so 10 000 keys measure keys the
 * limiter already holds, for ours and the peer alike). Then rounds, each: none, ours, peer,
 * none (ours and peer swap places every other round), for 1 key and for 10 000. Each
 * limiter's overhead in a round is taken against the two no-limiter loads around it, so the
 * machine's drift between rounds cancels; the medians over rounds are reported.
 */
export async function runHttpLoad(sz) {
  const pin = sz.pin === false ? undefined : pinning();
  const loader = startLoader(pin);
  const samples = {}; // framework → keys → subject → [{ rps, cpuUs, busy, wallOverheadUs, … }]
  try {
    for (const framework of FRAMEWORKS) {
      const servers = {};
      try {
        for (const subject of SUBJECTS) {
          servers[subject] = await startServer(framework, subject, pin);
        }
        for (const subject of SUBJECTS) {
          for (const keys of [1, KEYS]) {
            await ask(loader, {
              type: 'load',
              port: servers[subject].port,
              keys,
              amount: (keys === 1 ? 0 : keys) + sz.warmupRequests,
              connections: sz.connections,
              pipelining: sz.pipelining,
            });
          }
        }
        for (let round = 0; round < sz.rounds; round++) {
          for (const keys of [1, KEYS]) {
            const order = round % 2 === 0 ? ['ours', 'peer'] : ['peer', 'ours'];
            const before = await measure(loader, servers.none, keys, sz);
            const got = {};
            for (const s of order) got[s] = await measure(loader, servers[s], keys, sz);
            const after = await measure(loader, servers.none, keys, sz);
            const noneUsPerRequest = (1e6 / before.rps + 1e6 / after.rps) / 2;
            const noneCpuUs = (before.cpuUs + after.cpuUs) / 2;
            const at = ((samples[framework] ??= {})[keys] ??= { none: [], ours: [], peer: [] });
            at.none.push(before, after);
            // What the wall and CPU figures move by with nothing changed: the noise floor.
            (at.noise ??= []).push({
              wallUs: Math.abs(1e6 / before.rps - 1e6 / after.rps),
              cpuUs: Math.abs(before.cpuUs - after.cpuUs),
              inSituUs: Math.abs(before.spanUs - after.spanUs),
            });
            for (const s of order) {
              at[s].push({
                ...got[s],
                wallOverheadUs: 1e6 / got[s].rps - noneUsPerRequest,
                cpuOverheadUs: got[s].cpuUs - noneCpuUs,
                inSituUs: got[s].spanUs - (before.spanUs + after.spanUs) / 2,
                inSituMeanUs: got[s].spanMeanUs - (before.spanMeanUs + after.spanMeanUs) / 2,
              });
            }
          }
        }
      } finally {
        for (const s of Object.values(servers)) {
          s.child.removeAllListeners('exit');
          s.child.kill('SIGKILL');
        }
      }
    }
  } finally {
    loader.kill('SIGKILL');
  }
  return { samples, pinned: pin !== undefined };
}

export async function runHttp({ quick = false } = {}) {
  const sz = sizes(quick);
  const { samples, pinned } = await runHttpLoad(sz);
  // In process: one child per framework and round, its subjects taking turns.
  const inProcess = {};
  for (let round = 0; round < sz.inProcessRounds; round++) {
    for (const framework of FRAMEWORKS) {
      const n = framework === 'express' ? sz.inProcessExpress : sz.inProcessFastify;
      const r = await inProcessChild(framework, sz.inProcessSubjects, n);
      for (const subject of sz.inProcessSubjects) {
        for (const keys of [1, KEYS]) {
          inProcess[framework] ??= {};
          inProcess[framework][subject] ??= {};
          (inProcess[framework][subject][keys] ??= { cpuUs: [] }).cpuUs.push(
            r[subject][keys].cpuUs,
          );
        }
      }
    }
  }
  return analyzeHttp(samples, inProcess, { ...sz, pinned });
}

/** Medians, overhead per request (µs) and our overhead ÷ each peer's. */
export function analyzeHttp(samples, inProcess, sz) {
  const rows = [];
  const ratios = [];
  const inProcessRows = [];
  for (const framework of FRAMEWORKS) {
    for (const keys of [1, KEYS]) {
      const at = samples[framework][keys];
      const med = (s, field) => median(at[s].map((x) => x[field]));
      const noise = (field) => median(at.noise.map((x) => x[field]));
      const inCpu = (s) => median(inProcess[framework][s][keys].cpuUs);
      const inOverhead = (s) => inCpu(s) - inCpu('none');
      const least = (fieldsUs, decisionUs) => ({
        fieldsUs,
        decisionUs,
        ...compare(fieldsUs + decisionUs, inOverhead('peer')),
      });
      for (const subject of sz.inProcessSubjects) {
        inProcessRows.push({
          framework,
          subject: nameOf(subject, framework),
          keys,
          cpuUs: inCpu(subject),
          overheadUs: inOverhead(subject),
        });
      }
      for (const subject of SUBJECTS) {
        const none = subject === 'none';
        rows.push({
          framework,
          subject: nameOf(subject, framework),
          keys,
          rps: med(subject, 'rps'),
          ratioToNone: med(subject, 'rps') / med('none', 'rps'),
          overheadUs: none ? undefined : med(subject, 'wallOverheadUs'),
          serverCpuUs: med(subject, 'cpuUs'),
          cpuOverheadUs: none ? undefined : med(subject, 'cpuOverheadUs'),
          serverBusy: med(subject, 'busy'),
          inSituUs: med(subject, 'spanUs'),
          inSituOverheadUs: none ? undefined : med(subject, 'inSituUs'),
          inSituMeanOverheadUs: none ? undefined : med(subject, 'inSituMeanUs'),
        });
      }
      ratios.push({
        framework,
        peer: PEER[framework],
        keys,
        // Wall: from requests/s. CPU: the server's CPU time per request. Each ratio is ours
        // ÷ the peer's (medians over rounds).
        wall: compare(
          med('ours', 'wallOverheadUs'),
          med('peer', 'wallOverheadUs'),
          noise('wallUs'),
        ),
        cpu: compare(med('ours', 'cpuOverheadUs'), med('peer', 'cpuOverheadUs'), noise('cpuUs')),
        inSitu: compare(med('ours', 'inSituUs'), med('peer', 'inSituUs'), noise('inSituUs')),
        inSituMean: compare(med('ours', 'inSituMeanUs'), med('peer', 'inSituMeanUs')),
        inProcess: compare(inOverhead('ours'), inOverhead('peer')),
        inProcessDraft6: sz.inProcessSubjects.includes('ours-draft-6')
          ? compare(inOverhead('ours-draft-6'), inOverhead('peer-draft-6'))
          : undefined,
        // The least a limiter writing draft 8's two fields adds in process: our fields (ours
        // minus ours without them) plus a bare consume() of the same limiter.
        least: sz.inProcessSubjects.includes('bare-consume')
          ? least(inOverhead('ours') - inOverhead('ours-no-fields'), inOverhead('bare-consume'))
          : undefined,
      });
    }
  }
  return { ...sz, keys: KEYS, rows, inProcessRows, ratios, samples, inProcess };
}

// ---- command line ------------------------------------------------------------------------

if (process.argv[1] === SELF && process.argv.includes('--load')) {
  // The load generator: runs one load per message from the parent, answers its counts.
  process.on('message', (m) => {
    runLoad(m).then(
      (r) => process.send(r),
      (error) => process.send({ error: String(error?.stack ?? error) }),
    );
  });
  process.on('disconnect', () => process.exit(0));
}
