// A cluster worker serving HTTP with refundWhen over a connectCluster client: the primary
// serves a FixedWindow of 2 a minute; the worker's successes are given back, its failures
// count. The primary prints the outcome as one JSON line. Usage: node cluster-refund.mjs
import cluster from 'node:cluster';
import http from 'node:http';
import { connectCluster, serveCluster } from '../../dist/cluster.js';
import { rateLimit } from '../../dist/http.js';
import { FixedWindow, ManualClock } from '../../dist/index.js';

if (cluster.isPrimary) {
  const api = new FixedWindow({ limit: 2, windowMs: 60_000, clock: new ManualClock() });
  serveCluster({ api });
  const worker = cluster.fork();
  const result = await new Promise((resolve) => worker.on('message', (m) => m?.done && resolve(m)));
  console.log(JSON.stringify({ ...result, stats: api.stats('u') }));
  worker.kill();
  process.exit(0);
} else {
  const api = connectCluster('api');
  const limit = rateLimit({
    limiter: api,
    key: () => 'u',
    refundWhen: (_req, res) => res.statusCode < 400,
  });
  const server = http.createServer(async (req, res) => {
    if (!(await limit(req, res))) return;
    res.statusCode = req.headers['x-fail'] ? 401 : 200;
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/`;
  const ok = [];
  for (let i = 0; i < 4; i++) {
    ok.push((await fetch(url)).status);
    // Each success back before the next request.
    while ((await api.stats('u')).available !== 2) await new Promise((r) => setImmediate(r));
  }
  const failed = [];
  for (let i = 0; i < 3; i++)
    failed.push((await fetch(url, { headers: { 'x-fail': '1' } })).status);
  server.close();
  process.send({ done: true, ok, failed });
}
