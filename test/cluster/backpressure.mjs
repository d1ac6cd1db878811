// Cluster back-pressure: one worker sends batches without reading a single answer, another
// calls as usual meanwhile. The primary prints its outcome as one JSON line; the same file
// is the workers' script. Usage: node backpressure.mjs
// DIST (optional) points at another build, to show the test failing on an older one.
import cluster from 'node:cluster';
import { writeSync } from 'node:fs';

const DIST = process.env.DIST ?? new URL('../../dist/', import.meta.url).pathname;
const { connectCluster, serveCluster } = await import(`${DIST}/cluster.js`);
const { TokenBucket } = await import(`${DIST}/index.js`);

const MARK = 'atomic-limiter/cluster@3';
const BATCHES = 200;
const CALLS_PER_BATCH = 4096;
const messageOf = (w, test) => new Promise((r) => w.on('message', (m) => test(m) && r(m)));

/**
 * What the primary has handed to `worker`'s channel and the channel has not written yet:
 * messages and JSON bytes, now and at most (worker.send's callback runs once written).
 */
function watch(worker) {
  const q = { messages: 0, bytes: 0, maxMessages: 0, maxBytes: 0 };
  const send = worker.send.bind(worker);
  worker.send = (msg, handle, options, callback) => {
    const bytes = JSON.stringify(msg).length;
    q.messages++;
    q.bytes += bytes;
    q.maxMessages = Math.max(q.maxMessages, q.messages);
    q.maxBytes = Math.max(q.maxBytes, q.bytes);
    return send(msg, handle, options, (error) => {
      q.messages--;
      q.bytes -= bytes;
      callback?.(error);
    });
  };
  return q;
}

if (cluster.isPrimary) {
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname });
  const api = new TokenBucket({ capacity: 2 ** 30, refillPerSecond: 1 });
  serveCluster({ api });
  const flood = cluster.fork({ ROLE: 'flood' });
  const good = cluster.fork({ ROLE: 'good' });
  const queued = watch(flood);
  await Promise.all([
    messageOf(flood, (m) => m === 'waiting'),
    messageOf(good, (m) => m === 'waiting'),
  ]);
  const floodDone = messageOf(flood, (m) => m?.done);
  const goodDone = messageOf(good, (m) => m?.done);
  flood.send('go');
  good.send('go');
  const [floodReport, goodReport] = await Promise.all([floodDone, goodDone]);
  console.log(
    JSON.stringify({
      batches: BATCHES,
      flood: floodReport,
      good: goodReport,
      maxQueuedMessages: queued.maxMessages,
      maxQueuedBytes: queued.maxBytes,
    }),
  );
  flood.kill();
  good.kill();
} else if (process.env.ROLE === 'flood') {
  // Writes its batches straight to the IPC channel, without once letting its event loop
  // read: a worker that reads answers more slowly than it sends calls, at the extreme.
  const records = [0, 'api'];
  for (let i = 0; i < CALLS_PER_BATCH; i++) records.push(2, 'k', 1); // CONSUME k 1
  let answered = 0;
  let refused = 0;
  const finished = new Promise((resolve) => {
    process.on('message', (m) => {
      if (m?.mark !== MARK || m.t !== 'r') return;
      if (m.e) refused++;
      else answered++;
      if (answered + refused === BATCHES) resolve();
    });
  });
  const go = new Promise((resolve) => process.once('message', resolve));
  process.send('waiting');
  await go;
  const fd = process.channel.fd;
  for (let s = 1; s <= BATCHES; s++) {
    const line = Buffer.from(`${JSON.stringify({ mark: MARK, t: 'c', s, c: records })}\n`);
    for (let off = 0; off < line.length; ) {
      try {
        off += writeSync(fd, line, off);
      } catch (error) {
        if (error.code !== 'EAGAIN') throw error; // the primary is reading: write the rest
      }
    }
  }
  await finished;
  process.send({ done: true, answered, refused });
} else {
  // Calls as a server would, 100 in flight, while the other floods.
  const api = connectCluster('api', { timeoutMs: 20_000 });
  await api.ready();
  const go = new Promise((resolve) => process.once('message', resolve));
  process.send('waiting');
  await go;
  let allowed = 0;
  const errors = [];
  for (let round = 0; round < 20; round++) {
    const results = await Promise.allSettled(
      Array.from({ length: 100 }, () => api.tryAcquire('other')),
    );
    for (const r of results) {
      if (r.status === 'fulfilled') allowed += r.value ? 1 : 0;
      else errors.push(r.reason?.name);
    }
  }
  process.send({ done: true, calls: 2000, allowed, errors });
}
