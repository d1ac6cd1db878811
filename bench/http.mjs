// The HTTP middleware under load: requests per second of a "hello world" server with no
// limiter, with ours (atomic-limiter/http, an in-memory TokenBucket), and with the peer a
// user of that framework would pick (express-rate-limit with its memory store;
// @fastify/rate-limit), on one key and on 10 000 keys.
//
//   runHttp({ quick })                                     from run.mjs (part "http")
//   node bench/http.mjs --serve --framework=express|fastify --subject=none|ours|peer
//                                          one server; prints {"port":…} and serves until killed
//
// Each server runs in a child process; autocannon drives it from this process (the machine
// has 2 cores: one for each). Every subject reads the key from an `x-key` header with a key
// function, which autocannon varies per request (one key, or 10 000 in turn), so each does
// the same work per request apart from the limiting. Limits are large enough that every
// request is allowed; any non-2xx answer fails the run. Each limiter writes the same fields:
// draft-6 style RateLimit-Limit / -Remaining / -Reset (and ours and express-rate-limit a
// RateLimit-Policy too). Rounds alternate subjects so that drift of this shared VM falls on
// all of them alike; the median of the rounds is reported.
//
// Overhead per request = 1/rps − 1/rps(no limiter), in µs, and the server's CPU time per
// request minus that of no limiter (read from the child over IPC around each measured load);
// the goal is ours ≤ ½ of each peer's.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const KEYS = 10_000;
const FRAMEWORKS = ['express', 'fastify'];
const SUBJECTS = ['none', 'ours', 'peer'];
const PEER = { express: 'express-rate-limit', fastify: '@fastify/rate-limit' };
const BIG = 1_000_000_000; // so that nothing is ever refused

function sizes(quick) {
  return quick
    ? { rounds: 1, durationS: 1, warmupS: 0.5, connections: 16 }
    : { rounds: 3, durationS: 4, warmupS: 1, connections: 16 };
}

// ---- the server (child process) ---------------------------------------------------------

const keyOf = (req) => req.headers['x-key'] ?? 'none';

async function serveExpress(subject) {
  const { default: express } = await import('express');
  const app = express();
  app.set('etag', false);
  if (subject === 'ours') {
    const { TokenBucket } = await import('../dist/index.js');
    const { rateLimit } = await import('../dist/http.js');
    const limiter = new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys: 2 * KEYS });
    app.use(rateLimit({ limiter, key: keyOf, headers: 'draft-6' }));
  } else if (subject === 'peer') {
    const { rateLimit } = await import('express-rate-limit');
    app.use(
      rateLimit({
        windowMs: 60_000,
        limit: BIG,
        keyGenerator: keyOf,
        standardHeaders: 'draft-6',
        legacyHeaders: false,
        validate: false,
      }),
    );
  }
  app.get('/', (_req, res) => {
    res.send('hello world');
  });
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

async function serveFastify(subject) {
  const { default: Fastify } = await import('fastify');
  const app = Fastify({ logger: false });
  if (subject === 'ours') {
    const { TokenBucket } = await import('../dist/index.js');
    const { fastifyRateLimit } = await import('../dist/http.js');
    const limiter = new TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys: 2 * KEYS });
    await app.register(fastifyRateLimit, { limiter, key: keyOf, headers: 'draft-6' });
  } else if (subject === 'peer') {
    const { default: fastifyRateLimit } = await import('@fastify/rate-limit');
    await app.register(fastifyRateLimit, {
      max: BIG,
      timeWindow: 60_000,
      keyGenerator: keyOf,
      enableDraftSpec: true, // RateLimit-Limit / -Remaining / -Reset
      cache: 2 * KEYS,
    });
  }
  app.get('/', async () => 'hello world');
  await app.listen({ port: 0, host: '127.0.0.1' });
  return app.server.address().port;
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

const NAME = { none: 'no limiter', ours: 'atomic-limiter' };

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
  return analyzeHttp(samples, sz);
}

/** Medians, overhead per request (µs) and the ratios the goal is judged on. */
export function analyzeHttp(samples, sz) {
  const rows = [];
  const goal = [];
  for (const framework of FRAMEWORKS) {
    for (const keys of [1, KEYS]) {
      const rps = (s) => median(samples[framework][s][keys].rps);
      const cpu = (s) => median(samples[framework][s][keys].cpuUs);
      const none = rps('none');
      const overheadUs = (s) => (1 / rps(s) - 1 / none) * 1e6;
      const cpuOverheadUs = (s) => cpu(s) - cpu('none');
      for (const subject of SUBJECTS) {
        rows.push({
          framework,
          subject: NAME[subject] ?? PEER[framework],
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
      });
    }
  }
  return { ...sz, keys: KEYS, rows, goal, samples };
}

// ---- command line ------------------------------------------------------------------------

if (process.argv[1] === SELF && process.argv.includes('--serve')) {
  const arg = (name) =>
    process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const framework = arg('framework');
  const subject = arg('subject');
  if (!FRAMEWORKS.includes(framework) || !SUBJECTS.includes(subject)) {
    throw new RangeError(`--framework=${FRAMEWORKS} --subject=${SUBJECTS}`);
  }
  const port = framework === 'express' ? await serveExpress(subject) : await serveFastify(subject);
  process.on('message', (m) => {
    if (m === 'cpu') process.send(process.cpuUsage());
  });
  console.log(JSON.stringify({ port }));
}
