// An HTTP server on node:cluster (2 worker processes) with a per-IP limit that holds across
// both processes: the primary owns the limiter (serveCluster), each worker asks it over IPC
// (connectCluster), through the atomic-limiter/http middleware. Limited requests get 429 with
// Retry-After and the RateLimit fields.
//
//   node examples/cluster-http.mjs
//
// The primary itself then sends REQUESTS requests per client address over loopback
// (127.0.0.1, and 127.0.0.2 where the host routes it: all of 127/8 is loopback on Linux),
// prints how many got 200 and 429, and shuts everything down. The last line is JSON.
import cluster from 'node:cluster';
import http from 'node:http';
import { SlidingLog } from 'atomic-limiter';
import { connectCluster, serveCluster } from 'atomic-limiter/cluster';
import { rateLimit } from 'atomic-limiter/http';

const LIMIT = 5; // requests …
const WINDOW_MS = 10_000; // … per 10 s, per client IP
const WORKERS = 2;
const REQUESTS = 12; // sent per client address
const CLIENTS = ['127.0.0.1', '127.0.0.2'];

if (cluster.isPrimary) {
  // SlidingLog: at most LIMIT in *any* trailing 10 s, exactly. (A FixedWindow would also do,
  // but its windows are aligned to the clock: a burst that straddles a boundary may get up
  // to 2 × LIMIT.)
  const perIp = new SlidingLog({ limit: LIMIT, windowMs: WINDOW_MS, keys: 10_000 });
  const server = serveCluster({ 'per-ip': perIp });

  // Never hang: whatever happens, the example ends within 20 s.
  const guard = setTimeout(() => {
    console.error('cluster-http: timed out');
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGKILL');
    process.exit(1);
  }, 20_000);
  guard.unref();

  const workers = Array.from({ length: WORKERS }, () => cluster.fork());
  // Workers listening on port 0 share one ephemeral port (the primary holds the socket).
  const ports = await Promise.all(
    workers.map(
      (w) =>
        new Promise((resolve, reject) => {
          w.once('listening', (address) => resolve(address.port));
          w.once('exit', (code) => reject(new Error(`worker ${w.id} exited (${code})`)));
        }),
    ),
  );
  const port = ports[0];
  if (ports.some((p) => p !== port)) throw new Error(`workers listen on ${ports}`);

  const byClient = {};
  for (const from of CLIENTS) {
    // All of one client's requests at once: both workers decide concurrently.
    const replies = await Promise.all(
      Array.from({ length: REQUESTS }, () => get(port, from).catch((error) => ({ error }))),
    );
    if (from !== CLIENTS[0] && replies.every((r) => r.error?.code === 'EADDRNOTAVAIL')) {
      byClient[from] = { skipped: 'address not available on this host' };
      continue;
    }
    const failed = replies.find((r) => r.error);
    if (failed) throw failed.error;
    const count = (status) => replies.filter((r) => r.status === status).length;
    const limited = replies.filter((r) => r.status === 429);
    byClient[from] = {
      200: count(200),
      429: count(429),
      other: replies.length - count(200) - count(429),
      retryAfter: limited.map((r) => Number(r.headers['retry-after'])),
      // Which worker process answered: both admit and both refuse, from one shared limit.
      allowedBy: tally(
        replies.filter((r) => r.status === 200).map((r) => r.headers['x-served-by']),
      ),
      limitedBy: tally(limited.map((r) => r.headers['x-served-by'])),
      firstLimitedHeaders: pick(limited[0]?.headers ?? {}),
    };
  }

  server.close();
  // Workers close their servers and exit; the primary has nothing left and exits too.
  await new Promise((resolve) => cluster.disconnect(resolve));

  console.log(
    `cluster-http: ${WORKERS} worker processes, limit ${LIMIT} per ${WINDOW_MS / 1000} s per IP (SlidingLog in the primary)`,
  );
  for (const [from, r] of Object.entries(byClient)) {
    if (r.skipped) console.log(`  ${from}: skipped (${r.skipped})`);
    else {
      console.log(
        `  ${from}: ${REQUESTS} requests → ${r[200]} × 200, ${r[429]} × 429 (Retry-After ${[...new Set(r.retryAfter)].join('/')} s); 200s from workers ${JSON.stringify(r.allowedBy)}, 429s from ${JSON.stringify(r.limitedBy)}`,
      );
    }
  }
  console.log(
    JSON.stringify({
      example: 'cluster-http',
      limit: LIMIT,
      windowMs: WINDOW_MS,
      workers: WORKERS,
      requests: REQUESTS,
      port,
      byClient,
    }),
  );
} else {
  // One client per process; every call made in one tick goes to the primary in one message.
  // The middleware awaits it (a cluster client answers with promises), keys each request
  // by its client address, writes the RateLimit fields and answers refusals with 429 and
  // Retry-After. When the primary does not answer within timeoutMs it answers 503.
  const limit = rateLimit({ limiter: connectCluster('per-ip', { timeoutMs: 1000 }) });
  const id = String(cluster.worker.id);

  http
    .createServer(async (req, res) => {
      res.setHeader('X-Served-By', id);
      if (!(await limit(req, res))) return; // answered: 429 (or 503)
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end(`hello ${req.socket.remoteAddress}\n`);
    })
    .listen(0, '127.0.0.1'); // loopback only
}

/** One GET on a fresh connection (so the cluster spreads them over the workers). */
function get(port, localAddress) {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: '127.0.0.1', port, path: '/', localAddress, agent: false, timeout: 5000 },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
  });
}

function tally(xs) {
  const out = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}

function pick(headers) {
  const out = {};
  for (const h of ['retry-after', 'ratelimit-policy', 'ratelimit']) out[h] = headers[h];
  return out;
}
