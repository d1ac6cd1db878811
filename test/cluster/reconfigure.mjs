// Cluster scenarios around a served limiter's options and give-backs. The primary prints its
// outcome as one JSON line; the same file is the workers' script.
//   node reconfigure.mjs figures   the primary reconfigures its FixedWindow twice; one worker
//                                  calls and serves HTTP, another only reads `limit`
//   node reconfigure.mjs release   a worker whose answers pile up unread releases a
//                                  Concurrency permit in a batch the primary refuses
// DIST (optional) points at another build, to show the test failing on an older one.
import cluster from 'node:cluster';
import { writeSync } from 'node:fs';
import http from 'node:http';

const DIST = process.env.DIST ?? new URL('../../dist/', import.meta.url).pathname;
const { connectCluster, serveCluster } = await import(`${DIST}/cluster.js`);
const { Concurrency, FixedWindow, TokenBucket } = await import(`${DIST}/index.js`);
const { rateLimit } = await import(`${DIST}/http.js`);

const MARK = 'atomic-limiter/cluster@3';
const scenario = process.argv[2] ?? process.env.SCENARIO;
const messageOf = (w, test) => new Promise((r) => w.on('message', (m) => test(m) && r(m)));
const nextMessage = () => new Promise((r) => process.once('message', r));
const report = (x) => process.send(x);
/** Blocks this process's event loop: nothing is read from the IPC channel meanwhile. */
const block = (ms) => {
  const end = Date.now() + ms;
  while (Date.now() < end) {}
};
const settled = (r) =>
  r.status === 'fulfilled' ? { ok: r.value ?? null } : { error: r.reason?.name };

if (cluster.isPrimary) {
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname });
  const guard = setTimeout(() => {
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGKILL');
    console.error(`reconfigure ${scenario}: timed out`);
    process.exit(1);
  }, 40_000);
  guard.unref();
  const out = scenario === 'figures' ? await figures() : await release();
  console.log(JSON.stringify(out));
  for (const w of Object.values(cluster.workers ?? {})) w?.kill();
} else if (process.env.ROLE === 'active') {
  await active();
} else if (process.env.ROLE === 'idle') {
  await idle();
} else if (process.env.ROLE === 'releaser') {
  await releaser();
}

async function figures() {
  const api = new FixedWindow({ limit: 5, windowMs: 60_000 });
  serveCluster({ api });
  const activeWorker = cluster.fork({ ROLE: 'active' });
  const idleWorker = cluster.fork({ ROLE: 'idle' });
  const step = async (worker, msg) => {
    const answer = messageOf(worker, (m) => m?.step === msg);
    worker.send(msg);
    return await answer;
  };
  await Promise.all([
    messageOf(activeWorker, (m) => m === 'ready'),
    messageOf(idleWorker, (m) => m === 'ready'),
  ]);
  const before = await step(activeWorker, 'before');
  api.reconfigure({ limit: 10, windowMs: 30_000 });
  const [raised, idleSaw] = await Promise.all([
    step(activeWorker, 'raised'),
    step(idleWorker, 'raised'),
  ]);
  api.reconfigure({ limit: 3 });
  const lowered = await step(activeWorker, 'lowered');
  return { before, raised, idle: idleSaw, lowered };
}

async function active() {
  const api = connectCluster('api');
  await api.ready();
  const server = http.createServer(async (req, res) => {
    if (!(await limit(req, res))) return;
    res.end('ok');
  });
  const limit = rateLimit({ limiter: api, key: () => 'http' });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  const policy = async () =>
    (await fetch(`http://127.0.0.1:${port}/`)).headers.get('ratelimit-policy');
  const attempt = (key, permits) =>
    api.consume(key, permits).then(
      (d) => ({ allowed: d.allowed, limit: d.limit }),
      (e) => ({ error: e.name, message: e.message }),
    );
  process.send('ready');
  for (;;) {
    const step = await nextMessage();
    if (step === 'before') {
      report({ step, limit: api.limit, policy: await policy(), eight: await attempt('a', 8) });
    } else if (step === 'raised') {
      // 8 is above the limit the worker was told first, within the primary's new one.
      const eight = await attempt('a', 8);
      report({ step, eight, limit: api.limit, windowMs: api.windowMs, policy: await policy() });
    } else if (step === 'lowered') {
      // 4 is within the raised limit the worker knows, above the primary's new one.
      const four = await attempt('b', 4);
      const three = await attempt('b', 3);
      report({ step, four, three, limit: api.limit, policy: await policy() });
      return;
    }
  }
}

async function idle() {
  const api = connectCluster('api');
  await api.ready();
  process.send('ready');
  await nextMessage();
  // No call of its own: the primary's announcement is all it can learn from.
  for (let waited = 0; api.limit === 5 && waited < 5000; waited += 10) {
    await new Promise((r) => setTimeout(r, 10));
  }
  report({ step: 'raised', limit: api.limit, windowMs: api.windowMs });
}

async function release() {
  const api = new Concurrency({ limit: 1 });
  const flood = new TokenBucket({ capacity: 2 ** 30, refillPerSecond: 1 });
  serveCluster({ api, flood });
  const worker = cluster.fork({ ROLE: 'releaser' });
  const done = await messageOf(worker, (m) => m?.done);
  // The worker is alive and holds nothing if its release ran: the permit is free.
  return { ...done, freeAfter: api.tryAcquire('k') };
}

async function releaser() {
  const FLOOD_BATCHES = 12;
  const CALLS = 4096;
  const FLOOD_SEQ = 1e9; // the raw batches' numbers, apart from the client's own
  const api = connectCluster('api', { timeoutMs: 30_000 });
  await api.ready();
  const held = await api.tryAcquire('k');
  let ownRefused = 0;
  let floodRefused = 0;
  process.on('message', (m) => {
    if (m?.mark !== MARK || m.t !== 'r' || !m.e) return;
    if (m.s >= FLOOD_SEQ) floodRefused++;
    else ownRefused++;
  });
  // Batches written straight to the channel, without letting the event loop read once: the
  // primary answers the first few, and those answers pile up unread.
  const records = [0, 'flood'];
  for (let i = 0; i < CALLS; i++) records.push(2, 'x', 1); // CONSUME x 1
  const fd = process.channel.fd;
  for (let s = 0; s < FLOOD_BATCHES; s++) {
    const line = Buffer.from(
      `${JSON.stringify({ mark: MARK, t: 'c', s: FLOOD_SEQ + s, c: records })}\n`,
    );
    for (let off = 0; off < line.length; ) {
      try {
        off += writeSync(fd, line, off);
      } catch (error) {
        if (error.code !== 'EAGAIN') throw error;
      }
    }
  }
  block(500); // the primary reads the flood meanwhile
  // One batch: a release and a call. It leaves in this turn's microtasks; the event loop
  // still reads nothing until the primary has decided it.
  const released = api.release('k');
  const other = api.tryAcquire('other');
  queueMicrotask(() => block(1500));
  const [r, o] = await Promise.allSettled([released, other]);
  report({
    done: true,
    held,
    release: settled(r),
    other: settled(o),
    ownRefused,
    floodRefused,
  });
  await nextMessage();
}
