// A Fastify 5 app rate-limited by the atomic-limiter/http plugin:
//
//   - every route, per API key (X-Api-Key): at most 5 requests in any 10 s (SlidingLog);
//   - GET /health opts out (`config: { rateLimit: false }`);
//   - POST /upload has a limit of its own: at most 2 uploads in flight per key
//     (Concurrency), and `wait: true` queues the others in FIFO order instead of refusing.
//
//   node examples/fastify.mjs
//
// It then sends requests to itself on loopback, prints what happened, and closes. The last
// line is JSON.
import { Concurrency, SlidingLog } from 'atomic-limiter';
import { fastifyRateLimit } from 'atomic-limiter/http';
import Fastify from 'fastify';

const app = Fastify();
await app.register(fastifyRateLimit, {
  limiter: new SlidingLog({ limit: 5, windowMs: 10_000, keys: 10_000 }),
  key: (request) => `key:${request.headers['x-api-key'] ?? 'anonymous'}`,
});

app.get('/hello', async () => ({ hello: 'world' }));
app.get('/health', { config: { rateLimit: false } }, async () => ({ ok: true }));

let inFlight = 0;
let maxInFlight = 0;
const order = [];
app.post(
  '/upload',
  {
    config: {
      rateLimit: {
        limiter: new Concurrency({ limit: 2, queueLimit: 10, keys: 10_000 }),
        wait: { timeoutMs: 5000 },
      },
    },
  },
  async (request) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    order.push(Number(request.headers['x-n']));
    await new Promise((resolve) => setTimeout(resolve, 20)); // the upload's work
    inFlight--;
    return { stored: true };
  },
);

// Never hang: whatever happens, the example ends within 20 s.
setTimeout(() => {
  console.error('fastify: timed out');
  process.exit(1);
}, 20_000).unref();

await app.listen({ port: 0, host: '127.0.0.1' });
const base = `http://127.0.0.1:${app.server.address().port}`;
const call = (path, apiKey, init = {}) =>
  fetch(`${base}${path}`, { ...init, headers: { 'x-api-key': apiKey, ...init.headers } });

const hello = [];
for (let i = 0; i < 7; i++) hello.push(await call('/hello', 'k1'));
const health = await Promise.all([1, 2, 3].map(() => call('/health', 'k1')));
// Six uploads at once from one key: two run, four wait their turn; none is refused.
const uploads = await Promise.all(
  [1, 2, 3, 4, 5, 6].map((n) =>
    call('/upload', 'k2', { method: 'POST', headers: { 'x-n': String(n) } }),
  ),
);
await app.close();

const statuses = (rs) => rs.map((r) => r.status);
const refused = hello[5];
console.log('fastify: per API key 5 per 10 s on every route; /health exempt; /upload 2 at a time');
console.log(`  /hello × 7 → ${statuses(hello).join(', ')}`);
console.log(
  `    refused: Retry-After ${refused.headers.get('retry-after')} s, ${await refused.text()}`,
);
console.log(
  `    RateLimit: ${hello[0].headers.get('ratelimit')} (first), ${refused.headers.get('ratelimit')} (refused)`,
);
console.log(`  /health × 3 → ${statuses(health).join(', ')} (no RateLimit field)`);
console.log(
  `  /upload × 6 at once → ${statuses(uploads).join(', ')}; at most ${maxInFlight} in flight`,
);
console.log(
  JSON.stringify({
    example: 'fastify',
    hello: statuses(hello),
    retryAfter: refused.headers.get('retry-after'),
    firstRateLimit: hello[0].headers.get('ratelimit'),
    health: statuses(health),
    healthHasRateLimit: health.some((r) => r.headers.has('ratelimit')),
    uploads: statuses(uploads),
    maxInFlight,
    uploadsServed: order.length,
  }),
);
