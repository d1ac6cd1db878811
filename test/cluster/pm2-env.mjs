// connectCluster in a cluster worker whose environment is what PM2 gives its instances.
// Usage: node pm2-env.mjs <cluster_mode|fork_mode>. The primary is ours and serves 'api':
// in fork mode the worker reaches it; in cluster mode PM2's daemon would be the primary, so
// connectCluster must refuse at once. Prints one JSON line.
import cluster from 'node:cluster';

const DIST = process.env.DIST ?? new URL('../../dist/', import.meta.url).pathname;
const { connectCluster, serveCluster } = await import(`${DIST}/cluster.js`);
const { TokenBucket } = await import(`${DIST}/index.js`);

if (cluster.isPrimary) {
  const mode = process.argv[2];
  cluster.setupPrimary({ exec: new URL(import.meta.url).pathname });
  serveCluster({ api: new TokenBucket({ capacity: 10, refillPerSecond: 1 }) });
  const w = cluster.fork({ pm_id: '3', exec_mode: mode, NODE_APP_INSTANCE: '0' });
  const report = await new Promise((resolve) =>
    w.on('message', (m) => typeof m?.threw === 'boolean' && resolve(m)),
  );
  console.log(JSON.stringify(report));
  w.kill();
} else {
  let report;
  try {
    const api = connectCluster('api', { timeoutMs: 60_000 });
    report = { threw: false, allowed: await api.tryAcquire('k') };
  } catch (error) {
    report = { threw: true, name: error.name, code: error.code, message: error.message };
  }
  process.send(report);
}
