// Cluster permit blocks with the options Redis fleet mode takes too: leaseAhead, maxBlock.
// The primary prints its outcome as one JSON line; the same file is the worker's script.
// DIST (optional) points at another build.
import cluster from 'node:cluster';

const DIST = process.env.DIST ?? new URL('../../dist/', import.meta.url).pathname;
const { connectCluster, serveCluster } = await import(`${DIST}/cluster.js`);
const { ManualClock, TokenBucket } = await import(`${DIST}/index.js`);

if (cluster.isPrimary) {
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname });
  const api = new TokenBucket({ capacity: 1000, refillPerSecond: 1e-6, clock: new ManualClock() });
  serveCluster({ api });
  const w = cluster.fork();
  const report = await new Promise((resolve) => w.on('message', (m) => m?.done && resolve(m)));
  console.log(
    JSON.stringify({ ...report, a: api.stats('a'), b: api.stats('b'), g: api.stats('g') }),
  );
  w.kill();
} else {
  const remaining = async (limiter, key, n) => {
    const out = [];
    for (let i = 0; i < n; i++) out.push((await limiter.consume(key)).remaining);
    return out;
  };
  // One call after another (no macrotask between them: no answer can land meanwhile).
  const plain = connectCluster('api', { block: 8 });
  const ahead = connectCluster('api', { block: 8, leaseAhead: true });
  const plainRemaining = await remaining(plain, 'a', 9);
  const aheadRemaining = await remaining(ahead, 'b', 9);
  // Six calls at once on a key with blocks of 4 growing up to 16, then one at a time.
  const grow = connectCluster('api', { block: 4, maxBlock: 16 });
  const burst = (await Promise.all(Array.from({ length: 6 }, () => grow.consume('g')))).map(
    (d) => d.remaining,
  );
  const after = await remaining(grow, 'g', 7);
  for (const c of [plain, ahead, grow]) c.close();
  await connectCluster('api').stats('a'); // the give-backs travel before this answer
  process.send({ done: true, plainRemaining, aheadRemaining, burst, after });
}
