// The subjects of the HTTP bench (bench/http.mjs): "hello world" Express and Fastify apps with
// no limiter, ours, or the peer, and their two ways of being measured in a child process:
//
//   node bench/http-subjects.mjs --serve --framework=express|fastify --subject=S
//          one server; prints {"port":…}; answers 'cpu' over IPC with its CPU time so far and
//          the in-situ spans since the last 'cpu'; serves until killed
//   node bench/http-subjects.mjs --in-process --framework=F --subjects=S,… --n=N
//          one in-process measurement; prints one JSON line
import { fileURLToPath } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
export const KEYS = 10_000;
export const FRAMEWORKS = ['express', 'fastify'];
/** Under autocannon: each limiter as a user would set it up (its default fields). */
export const SUBJECTS = ['none', 'ours', 'peer'];
/**
 * In process, also each limiter writing the same draft-6 fields; and two parts of ours, whose
 * sum is the least a limiter writing draft 8's two fields can add: ours with no fields
 * (`headers: false`, so the fields' cost is ours minus it), and a bare `consume()` of the
 * same limiter in a hook or middleware of the bench's own.
 */
export const IN_PROCESS_SUBJECTS = [
  ...SUBJECTS,
  'ours-draft-6',
  'peer-draft-6',
  'ours-no-fields',
  'bare-consume',
];
export const PEER = { express: 'express-rate-limit', fastify: '@fastify/rate-limit' };
const BIG = 1_000_000_000; // so that nothing is ever refused

// ---- the server (child process) ---------------------------------------------------------

const keyOf = (req) => req.headers['x-key'] ?? 'none';
export const draft6 = (subject) => subject.endsWith('-draft-6');
const fieldsOf = (subject) =>
  subject === 'ours-no-fields' ? false : draft6(subject) ? 'draft-6' : 'draft-8';
const newLimiter = (L) =>
  new L.TokenBucket({ capacity: 2 ** 24, refillPerSecond: 1e6, keys: 2 * KEYS });

/** The limiting middleware of a subject for Express ('none': one that only calls next()). */
async function expressMiddleware(subject) {
  if (subject.startsWith('ours')) {
    const { rateLimit } = await import('../dist/http.js');
    const limiter = newLimiter(await import('../dist/index.js'));
    return rateLimit({ limiter, key: keyOf, headers: fieldsOf(subject) });
  }
  if (subject === 'bare-consume') {
    const limiter = newLimiter(await import('../dist/index.js'));
    return (req, _res, next) =>
      next(limiter.consume(keyOf(req)).allowed ? undefined : new Error('refused'));
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

// ---- in situ: the limiter's time inside a loaded server --------------------------------------

/**
 * Each served request is stamped just before the limiter runs (a middleware, or a root
 * onRequest hook, both ahead of the limiter's) and again when the handler starts: the time
 * between is the limiter's own (with its promises, if it awaits any), plus the framework's
 * step from one layer to the next, which 'none' has too. Unlike requests/s and the process's
 * CPU time, its median barely moves when other processes take the CPU: a request that was
 * preempted is one slow sample among thousands.
 */
// Stamps live in a WeakMap: a property added to an Express request would change the object
// the limiters work on (and made a later property add by a limiter cost more).
const stamps = new WeakMap();
const spans = new Float64Array(1 << 20);
let spanCount = 0;
const stamp = (raw) => {
  stamps.set(raw, performance.now());
};
const record = (raw) => {
  const t0 = stamps.get(raw);
  if (spanCount < spans.length) spans[spanCount++] = performance.now() - t0;
};

/** The spans recorded since the last call, in µs (median and mean), then forgets them. */
function takeSpans() {
  const xs = spans.subarray(0, spanCount).sort();
  const n = xs.length;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += xs[i];
  spanCount = 0;
  if (n === 0) return { n, medianUs: Number.NaN, meanUs: Number.NaN };
  return { n, medianUs: ((xs[(n - 1) >> 1] + xs[n >> 1]) / 2) * 1000, meanUs: (sum / n) * 1000 };
}

async function serveExpress(subject) {
  const { default: express } = await import('express');
  const app = express();
  app.set('etag', false);
  app.use((req, _res, next) => {
    stamp(req);
    next();
  });
  app.use(await expressMiddleware(subject));
  app.get('/', (req, res) => {
    record(req);
    res.send('hello world');
  });
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

async function fastifyApp(subject, timed = false) {
  const { default: Fastify } = await import('fastify');
  const app = Fastify({ logger: false });
  // Root hooks run before the route-level ones the limiters add.
  if (timed) {
    app.addHook('onRequest', (request, _reply, done) => {
      stamp(request.raw);
      done();
    });
  }
  if (subject.startsWith('ours')) {
    const { fastifyRateLimit } = await import('../dist/http.js');
    const limiter = newLimiter(await import('../dist/index.js'));
    await app.register(fastifyRateLimit, { limiter, key: keyOf, headers: fieldsOf(subject) });
  } else if (subject === 'bare-consume') {
    const limiter = newLimiter(await import('../dist/index.js'));
    app.addHook('onRequest', (request, _reply, done) =>
      done(limiter.consume(keyOf(request)).allowed ? undefined : new Error('refused')),
    );
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
  app.get(
    '/',
    timed
      ? async (request) => {
          record(request.raw);
          return 'hello world';
        }
      : async () => 'hello world',
  );
  return app;
}

async function serveFastify(subject) {
  const app = await fastifyApp(subject, true);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return app.server.address().port;
}

// ---- in process: the limiter's own cost, without the network --------------------------------

/**
 * A response socket that takes every write and discards it: Fastify's whole reply path
 * (head serialization, body) runs, without a network.
 */
async function discardingSocket() {
  const { Writable } = await import('node:stream');
  const socket = new Writable({
    write: (_chunk, _encoding, done) => done(),
    writev: (_chunks, done) => done(),
  });
  socket.setTimeout = () => socket; // what ServerResponse may call on its socket
  return socket;
}

/**
 * Express: the subject's middleware called on real IncomingMessage / ServerResponse objects
 * made into Express's own the way its app.handle() does (prototypes, `res.locals`, the
 * X-Powered-By field), with no socket (the middleware only sets fields and calls next),
 * each call awaited. Fastify: the whole app through its own request handler (`app.routing`, what its server calls), on real
 * IncomingMessage / ServerResponse objects whose socket discards the reply, each request
 * awaited until its response finishes. (app.inject() was ~100 µs a request of its own
 * fake-socket machinery, 10 to 20 times the limiters' cost, and its noise hid them.) All
 * subjects live in this one process and take turns in batches, so drift of this shared
 * machine falls on each of them alike. Returns CPU µs per request, per subject and key count.
 */
async function measureInProcess(framework, subjects, n) {
  const { IncomingMessage, ServerResponse } = await import('node:http');
  const { Socket } = await import('node:net');
  const socket = new Socket();
  const calls = {};
  const app = framework === 'express' ? (await import('express')).default() : undefined;
  for (const subject of subjects) {
    if (framework === 'express') {
      const mw = await expressMiddleware(subject);
      calls[subject] = (key) => {
        const req = new IncomingMessage(socket);
        req.method = 'GET';
        req.url = '/';
        req.headers = { 'x-key': key };
        const res = new ServerResponse(req);
        // What Express 5's app.handle() does to every request before its middleware: each
        // response gets a hidden class of its own, which makes property reads on it dear.
        res.setHeader('X-Powered-By', 'Express');
        req.res = res;
        res.req = req;
        Object.setPrototypeOf(req, app.request);
        Object.setPrototypeOf(res, app.response);
        res.locals = Object.create(null);
        return new Promise((resolve, reject) => mw(req, res, (e) => (e ? reject(e) : resolve())));
      };
    } else {
      const fastify = await fastifyApp(subject);
      await fastify.ready();
      const handle = fastify.routing;
      const out = await discardingSocket();
      calls[subject] = (key) =>
        new Promise((resolve, reject) => {
          const req = new IncomingMessage(socket);
          req.method = 'GET';
          req.url = '/';
          req.headers = { host: 'localhost', 'x-key': key };
          req.push(null); // no body
          const res = new ServerResponse(req);
          res.assignSocket(out);
          res.once('finish', () => {
            res.detachSocket(out);
            if (res.statusCode === 200) resolve();
            else reject(new Error(`status ${res.statusCode}`));
          });
          handle(req, res);
        });
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
    if (m === 'cpu') process.send({ ...process.cpuUsage(), spans: takeSpans() });
  });
  console.log(JSON.stringify({ port }));
}
