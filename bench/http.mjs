// The HTTP middleware: a "hello world" server with no limiter, with ours (atomic-limiter/http,
// an in-memory TokenBucket), and with the peer a user of that framework would pick
// (express-rate-limit with its memory store; @fastify/rate-limit), on one key and on 10 000.
//
//   runHttp({ quick })                                     from run.mjs (part "http")
//   node bench/http.mjs --serve --framework=express|fastify --subject=S
//                                          one server; prints {"port":…} and serves until killed
//   node bench/http.mjs --in-process --framework=F --subject=S --keys=K --n=N
//                                          one in-process measurement; prints one JSON line
//
// 1. Under load: each server in a child process, autocannon in this one (2 cores: one each),
//    each limiter with its default fields (ours: draft-8 RateLimit + RateLimit-Policy;
//    express-rate-limit and @fastify/rate-limit: X-RateLimit-Limit / -Remaining / -Reset).
//    Overhead per request: 1/rps − 1/rps(no limiter), and the server's CPU time per request
//    minus that of no limiter (read from the child over IPC around each measured load).
// 2. In process, without the network (steadier on a shared machine): Express, the subject's
//    middleware called on real IncomingMessage / ServerResponse objects, each call awaited;
//    Fastify, the whole app through app.inject(). CPU µs per request minus no limiter's. Both
//    with each limiter's default fields and with the same draft-6 fields for all.
//
// Every subject reads the key from an `x-key` header with a key function (one key, or 10 000
// in turn). Limits are large enough that every request is allowed; any non-2xx answer fails
// the run. Rounds alternate the order of subjects; medians of the rounds are reported. The
// goal: our overhead ≤ ½ of each peer's.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const KEYS = 10_000;
const FRAMEWORKS = ['express', 'fastify'];
/** Under autocannon: each limiter as a user would set it up (its default fields). */
const SUBJECTS = ['none', 'ours', 'peer'];
/** In process, also each limiter writing the same draft-6 fields. */
const IN_PROCESS_SUBJECTS = [...SUBJECTS, 'ours-draft-6', 'peer-draft-6'];
const PEER = { express: 'express-rate-limit', fastify: '@fastify/rate-limit' };
const BIG = 1_000_000_000; // so that nothing is ever refused

function sizes(quick) {
  return quick
    ? {
        rounds: 1,
        durationS: 1,
        warmupS: 0.3,
        connections: 16,
        inProcessExpress: 10_000,
        inProcessFastify: 1_000,
        inProcessSubjects: SUBJECTS,
      }
    : {
        rounds: 3,
        durationS: 3,
        warmupS: 1,
        connections: 16,
        inProcessExpress: 100_000,
        inProcessFastify: 10_000,
        inProcessSubjects: IN_PROCESS_SUBJECTS,
      };
}

// ---- the server (child process) ---------------------------------------------------------

const keyOf = (req) => req.headers['x-key'] ?? 'none';
const draft6 = (subject) => subject.endsWith('-draft-6');

/** The limiting middleware of a subject for Express ('none': one that only calls next()). */
async function expressMiddleware(subject) {
  if (subject.startsWith('ours')) {
    const { TokenBucket } = await import('../dist/index.js');
    const { rateLimit } = await import('../dist/http.js');
    const limiter = new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys: 2 * KEYS });
    return rateLimit({ limiter, key: keyOf, headers: draft6(subject) ? 'draft-6' : 'draft-8' });
  }
  if (subject.startsWith('peer')) {
    const { rateLimit } = await import('express-rate-limit');
    return rateLimit({
      windowMs: 60_000,
      limit: BIG,
      keyGenerator: keyOf,
      validate: false,
      // Its defaults: X-RateLimit-Limit / -Remaining / -Reset (and Date).
      ...(draft6(subject) ? { standardHeaders: 'draft-6', legacyHeaders: false } : {}),
    });
  }
  return (_req, _res, next) => next();
}

async function serveExpress(subject) {
  const { default: express } = await import('express');
  const app = express();
  app.set('etag', false);
  app.use(await expressMiddleware(subject));
  app.get('/', (_req, res) => {
    res.send('hello world');
  });
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

async function fastifyApp(subject) {
  const { default: Fastify } = await import('fastify');
  const app = Fastify({ logger: false });
  if (subject.startsWith('ours')) {
    const { TokenBucket } = await import('../dist/index.js');
    const { fastifyRateLimit } = await import('../dist/http.js');
    const limiter = new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys: 2 * KEYS });
    await app.register(fastifyRateLimit, {
      limiter,
      key: keyOf,
      headers: draft6(subject) ? 'draft-6' : 'draft-8',
    });
  } else if (subject.startsWith('peer')) {
    const { default: fastifyRateLimit } = await import('@fastify/rate-limit');
    await app.register(fastifyRateLimit, {
      max: BIG,
      timeWindow: 60_000,
      keyGenerator: keyOf,
      // Its default: X-RateLimit-Limit / -Remaining / -Reset; the draft: RateLimit-… names.
      enableDraftSpec: draft6(subject),
      cache: 2 * KEYS,
    });
  }
  app.get('/', async () => 'hello world');
  return app;
}

async function serveFastify(subject) {
  const app = await fastifyApp(subject);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return app.server.address().port;
}

// ---- in process: the limiter's own cost, without the network --------------------------------

/**
 * Express: the subject's middleware called on real IncomingMessage / ServerResponse objects
 * (no socket: it only sets headers and calls next), each call awaited. Fastify: the whole app
 * through app.inject(), one request after the other. All subjects live in this one process
 * and take turns in batches, so drift of this shared machine falls on each of them alike.
 * Returns CPU µs per request, per subject and key count.
 */
async function measureInProcess(framework, subjects, n) {
  const { IncomingMessage, ServerResponse } = await import('node:http');
  const { Socket } = await import('node:net');
  const calls = {};
  for (const subject of subjects) {
    if (framework === 'express') {
      const mw = await expressMiddleware(subject);
      const socket = new Socket();
      calls[subject] = (key) => {
        const req = new IncomingMessage(socket);
        req.method = 'GET';
        req.url = '/';
        req.headers = { 'x-key': key };
        const res = new ServerResponse(req);
        return new Promise((resolve, reject) => mw(req, res, (e) => (e ? reject(e) : resolve())));
      };
    } else {
      const app = await fastifyApp(subject);
      await app.ready();
      calls[subject] = async (key) => {
        const r = await app.inject({ method: 'GET', url: '/', headers: { 'x-key': key } });
        if (r.statusCode !== 200) throw new Error(`status ${r.statusCode}`);
      };
    }
  }
  const BATCH = 100;
  const out = {};
  for (const keys of [1, KEYS]) {
    const keyAt = (i) => (keys === 1 ? 'k' : `k${i % keys}`);
    const cpuUs = Object.fromEntries(subjects.map((s) => [s, 0]));
    for (let pass = 0; pass < 2; pass++) {
      // Pass 0 warms every subject up; pass 1 measures.
      for (let b = 0; b < n / BATCH; b++) {
        for (let j = 0; j < subjects.length; j++) {
          const subject = subjects[(b + j) % subjects.length]; // rotate who goes first
          const call = calls[subject];
          const c0 = process.cpuUsage();
          for (let i = b * BATCH; i < (b + 1) * BATCH; i++) await call(keyAt(i));
          const c = process.cpuUsage(c0);
          if (pass === 1) cpuUs[subject] += c.user + c.system;
        }
      }
    }
    for (const s of subjects) (out[s] ??= {})[keys] = { cpuUs: cpuUs[s] / n };
  }
  return out;
}

function inProcessChild(framework, subjects, n) {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [SELF, '--in-process', `--framework=${framework}`, `--subjects=${subjects}`, `--n=${n}`],
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

function startServer(framework, subject) {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [SELF, '--serve', `--framework=${framework}`, `--subject=${subject}`],
      { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] },
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

/** The server's CPU time so far (µs), asked over IPC. */
function serverCpuUs(child) {
  return new Promise((resolve) => {
    child.once('message', (m) => resolve(m.user + m.system));
    child.send('cpu');
  });
}

async function load(autocannon, port, keys, durationS, connections) {
  let n = 0;
  const result = await autocannon({
    url: `http://127.0.0.1:${port}/`,
    connections,
    duration: durationS,
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
  return { rps: result.requests.total / durationS, requests: result.requests.total };
}

function nameOf(subject, framework) {
  const base = subject.startsWith('ours')
    ? 'atomic-limiter'
    : subject.startsWith('peer')
      ? PEER[framework]
      : 'no limiter';
  return draft6(subject) ? `${base} (draft-6)` : base;
}

function judge(ours, peer) {
  if (!(peer > 0)) return { ours, peer, ratio: undefined, met: undefined };
  return { ours, peer, ratio: Math.max(0, ours) / peer, met: ours <= peer / 2 };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return (s[(s.length - 1) >> 1] + s[s.length >> 1]) / 2;
}

export async function runHttp({ quick = false } = {}) {
  const { default: autocannon } = await import('autocannon');
  const sz = sizes(quick);
  const samples = {}; // framework → subject → keys → [rps]
  for (let round = 0; round < sz.rounds; round++) {
    for (const framework of FRAMEWORKS) {
      // Alternate the order of subjects between rounds.
      const order = round % 2 === 0 ? SUBJECTS : [...SUBJECTS].reverse();
      for (const subject of order) {
        const { port, child } = await startServer(framework, subject);
        try {
          for (const keys of [1, KEYS]) {
            await load(autocannon, port, keys, sz.warmupS, sz.connections);
            const cpu0 = await serverCpuUs(child);
            const { rps, requests } = await load(
              autocannon,
              port,
              keys,
              sz.durationS,
              sz.connections,
            );
            const cpuUs = ((await serverCpuUs(child)) - cpu0) / requests;
            samples[framework] ??= {};
            samples[framework][subject] ??= {};
            const at = (samples[framework][subject][keys] ??= { rps: [], cpuUs: [] });
            at.rps.push(rps);
            at.cpuUs.push(cpuUs);
          }
        } finally {
          child.removeAllListeners('exit');
          child.kill('SIGKILL');
        }
      }
    }
  }
  // In process: one child per framework and round, its subjects taking turns.
  const inProcess = {};
  for (let round = 0; round < sz.rounds; round++) {
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
  return analyzeHttp(samples, inProcess, sz);
}

/** Medians, overhead per request (µs) and the ratios the goal is judged on. */
export function analyzeHttp(samples, inProcess, sz) {
  const rows = [];
  const goal = [];
  const inProcessRows = [];
  for (const framework of FRAMEWORKS) {
    for (const keys of [1, KEYS]) {
      const rps = (s) => median(samples[framework][s][keys].rps);
      const cpu = (s) => median(samples[framework][s][keys].cpuUs);
      const none = rps('none');
      const overheadUs = (s) => (1 / rps(s) - 1 / none) * 1e6;
      const cpuOverheadUs = (s) => cpu(s) - cpu('none');
      const inCpu = (s) => median(inProcess[framework][s][keys].cpuUs);
      const inOverhead = (s) => inCpu(s) - inCpu('none');
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
        rows.push({
          framework,
          subject: nameOf(subject, framework),
          keys,
          rps: rps(subject),
          ratioToNone: rps(subject) / none,
          overheadUs: overheadUs(subject),
          serverCpuUs: cpu(subject),
          cpuOverheadUs: cpuOverheadUs(subject),
        });
      }
      goal.push({
        framework,
        peer: PEER[framework],
        keys,
        // Wall: from requests/s. CPU: the server's CPU time per request (steadier on a shared
        // machine). Each ratio is ours ÷ the peer's; ≤ 0.5 meets the goal. An overhead the
        // noise swallows (the peer's at or below zero) decides nothing.
        wall: judge(overheadUs('ours'), overheadUs('peer')),
        cpu: judge(cpuOverheadUs('ours'), cpuOverheadUs('peer')),
        inProcess: judge(inOverhead('ours'), inOverhead('peer')),
        inProcessDraft6: sz.inProcessSubjects.includes('ours-draft-6')
          ? judge(inOverhead('ours-draft-6'), inOverhead('peer-draft-6'))
          : undefined,
      });
    }
  }
  return { ...sz, keys: KEYS, rows, inProcessRows, goal, samples, inProcess };
}

// ---- command line ------------------------------------------------------------------------

if (process.argv[1] === SELF && process.argv.includes('--in-process')) {
  const arg = (name) =>
    process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const r = await measureInProcess(arg('framework'), arg('subjects').split(','), Number(arg('n')));
  console.log(JSON.stringify(r));
} else if (process.argv[1] === SELF && process.argv.includes('--serve')) {
  const arg = (name) =>
    process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const framework = arg('framework');
  const subject = arg('subject');
  if (!FRAMEWORKS.includes(framework) || !IN_PROCESS_SUBJECTS.includes(subject)) {
    throw new RangeError(`--framework=${FRAMEWORKS} --subject=${IN_PROCESS_SUBJECTS}`);
  }
  const port = framework === 'express' ? await serveExpress(subject) : await serveFastify(subject);
  process.on('message', (m) => {
    if (m === 'cpu') process.send(process.cpuUsage());
  });
  console.log(JSON.stringify({ port }));
}
