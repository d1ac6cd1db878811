// An application run by PM2 in cluster mode (`pm2 start pm2-app.cjs -i 2`): each instance
// opens one limiter in host memory, tries TRIES times, and writes what it was granted to
// OUT_DIR/<pid>.json. PM2's daemon is the cluster primary; no code of ours runs there.
const { writeFileSync } = require('node:fs');
const { join } = require('node:path');
const { TokenBucket } = require('../../dist/index.cjs');
const { hostMemory } = require('../../dist/host.cjs');

const limiter = new TokenBucket({
  capacity: Number(process.env.CAPACITY),
  refillPerSecond: 1e-6,
  keys: 16,
  memory: hostMemory(process.env.REGION),
});
// Wait for the go file so that the instances decide at the same time.
const go = join(process.env.OUT_DIR, 'go');
const timer = setInterval(() => {
  if (!require('node:fs').existsSync(go)) return;
  clearInterval(timer);
  let granted = 0;
  for (let i = 0; i < Number(process.env.TRIES); i++) if (limiter.tryAcquire('k')) granted++;
  writeFileSync(join(process.env.OUT_DIR, `${process.pid}.json`), JSON.stringify({ granted }));
  setInterval(() => {}, 60_000); // stay up: PM2 restarts an app that exits
}, 5);
