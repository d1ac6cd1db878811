// An Express 5 API with two layers of limits from atomic-limiter/http:
//
//   - every request, per client IP: at most 30 per minute (SlidingLog: exact in any
//     trailing minute);
//   - /api/*, per API key (the X-Api-Key header): "10 per second and 1000 per day", a chain
//     of two limiters, where GET /api/export costs 5 permits and GET /api/search costs 1.
//
//   node examples/express.mjs
//
// It then sends requests to itself on loopback, prints what each client got, and closes.
// The last line is JSON.
import http from 'node:http';
import { chain, FixedWindow, SlidingLog } from 'atomic-limiter';
import { rateLimit } from 'atomic-limiter/http';
import express from 'express';

const app = express();

// Per IP (the default key: req.ip, IPv6 grouped by /56). Express's own 'trust proxy'
// setting decides req.ip behind a proxy.
app.use(rateLimit({ limiter: new SlidingLog({ limit: 30, windowMs: 60_000, keys: 10_000 }) }));

// Per API key: both limits must allow; the RateLimit field lists both policies.
const perKey = chain(
  new SlidingLog({ limit: 10, windowMs: 1000, keys: 10_000 }),
  new FixedWindow({ limit: 1000, windowMs: 86_400_000, keys: 10_000 }),
);
app.use(
  '/api',
  rateLimit({
    limiter: perKey,
    key: (req) => `key:${req.get('x-api-key') ?? 'anonymous'}`,
    permits: (req) => (req.path === '/export' ? 5 : 1),
    policyName: ['per-second', 'per-day'],
    message: { error: 'rate limited' },
  }),
);
app.get('/api/search', (_req, res) => {
  res.json({ results: [] });
});
app.get('/api/export', (_req, res) => {
  res.json({ rows: 1000 });
});

const server = http.createServer(app);
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address();

// Never hang: whatever happens, the example ends within 20 s.
setTimeout(() => {
  console.error('express: timed out');
  process.exit(1);
}, 20_000).unref();

// alpha: two exports (5 + 5 = the 10 per second), then a search: refused.
const alpha = [];
for (const path of ['/api/export', '/api/export', '/api/search']) {
  alpha.push(await get(port, path, 'alpha'));
}
// beta: 12 searches at once: 10 get through in the second, 2 are refused.
const beta = await Promise.all(Array.from({ length: 12 }, () => get(port, '/api/search', 'beta')));
const refused = alpha[2];

server.closeAllConnections();
server.close();

const count = (rs, s) => rs.filter((r) => r.status === s).length;
console.log('express: per-IP 30/min on every route; per API key "10/s and 1000/day" on /api');
console.log(`  alpha: export, export, search → ${alpha.map((r) => r.status).join(', ')}`);
console.log(
  `    refused with Retry-After ${refused.headers['retry-after']} s, body ${refused.body}`,
);
console.log(`    RateLimit-Policy: ${refused.headers['ratelimit-policy']}`);
console.log(`    RateLimit: ${refused.headers.ratelimit}`);
console.log(`  beta: 12 searches at once → ${count(beta, 200)} × 200, ${count(beta, 429)} × 429`);
console.log(`  first allowed response: RateLimit: ${alpha[0].headers.ratelimit}`);
console.log(
  JSON.stringify({
    example: 'express',
    alpha: alpha.map((r) => r.status),
    alphaRefused: {
      retryAfter: refused.headers['retry-after'],
      ratelimit: refused.headers.ratelimit,
      body: JSON.parse(refused.body),
    },
    firstAllowed: {
      ratelimit: alpha[0].headers.ratelimit,
      policy: alpha[0].headers['ratelimit-policy'],
    },
    beta: { 200: count(beta, 200), 429: count(beta, 429) },
  }),
);

function get(port, path, apiKey) {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: '127.0.0.1', port, path, agent: false, headers: { 'x-api-key': apiKey } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
  });
}
