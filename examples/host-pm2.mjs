// An HTTP API limited per client address across every instance PM2 runs in cluster mode.
// PM2's daemon is the cluster primary, so there is no primary of ours to ask: the
// instances share the limiter through host memory instead.
//
//   npx pm2 start examples/host-pm2.mjs -i 2     # two instances, one limit
//   curl -i localhost:3000/                        # 10 per minute per client, in total
//   npx pm2 delete host-pm2
//
// Also runs alone (`node examples/host-pm2.mjs`): one instance, the same limit.
import http from 'node:http';
import { SlidingWindow } from 'atomic-limiter';
import { hostMemory } from 'atomic-limiter/host';
import { rateLimit } from 'atomic-limiter/http';

// The same name and options in every instance: the first to start creates the region.
const limiter = new SlidingWindow({
  limit: 10,
  windowMs: 60_000,
  keys: 100_000,
  memory: hostMemory('example-api-per-client'),
});
const limit = rateLimit({ limiter });

http
  .createServer(async (req, res) => {
    if (!(await limit(req, res))) return; // answered 429 with Retry-After
    res.end(`hello from process ${process.pid}\n`);
  })
  .listen(Number(process.env.PORT ?? 3000));
