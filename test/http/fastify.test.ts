import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { type FastifyRateLimitOptions, fastifyRateLimit } from '../../src/http/index.js';
import { Concurrency, chain, FixedWindow, ManualClock, TokenBucket } from '../../src/index.js';
import { rateFields, request, sequence, until, watchWarnings } from '../helpers/http.js';

const warnings = watchWarnings();

const apps: FastifyInstance[] = [];
afterEach(async () => {
  while (apps.length > 0) await apps.pop()!.close();
});

async function start(app: FastifyInstance): Promise<number> {
  apps.push(app);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

describe('fastifyRateLimit with Fastify 5', () => {
  it('applies to the whole app: 5 × 200, then 429 with Retry-After; routes can opt out or override', async () => {
    const clock = new ManualClock();
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const own = new FixedWindow({ limit: 1, windowMs: 60_000, clock });
    const app = Fastify();
    await app.register(fastifyRateLimit, { limiter });
    app.get('/', async () => 'ok');
    app.get('/free', { config: { rateLimit: false } }, async () => 'free');
    app.get(
      '/strict',
      { config: { rateLimit: { limiter: own, statusCode: 503, policyName: 'strict' } } },
      async () => 'strict',
    );
    // A child context registered later is covered too (the plugin is not encapsulated).
    await app.register(async (child) => {
      child.get('/child', async () => 'child');
    });
    const port = await start(app);

    const replies = await sequence(port, 6);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429]);
    expect(rateFields(replies[0]!.headers)).toEqual({
      'ratelimit-policy': '"5-in-5s";q=5;w=5',
      ratelimit: '"5-in-5s";r=4;t=1',
    });
    expect(rateFields(replies[5]!.headers)).toEqual({
      'ratelimit-policy': '"5-in-5s";q=5;w=5',
      ratelimit: '"5-in-5s";r=0;t=5',
      'retry-after': '1',
    });
    expect(replies[5]!.body).toBe('Too Many Requests');
    expect((await request(port, { path: '/child' })).status).toBe(429);

    const free = await sequence(port, 3, { path: '/free' });
    expect(free.map((r) => [r.status, r.headers.ratelimit])).toEqual([
      [200, undefined],
      [200, undefined],
      [200, undefined],
    ]);

    const strict = await sequence(port, 2, { path: '/strict' });
    expect(strict.map((r) => r.status)).toEqual([200, 503]);
    expect(strict[0]!.headers.ratelimit).toBe('"strict";r=0;t=60');
    expect(strict[1]!.headers['retry-after']).toBe('60');
    expect(own.stats('127.0.0.1').admitted).toBe(1);
    expect(limiter.stats('127.0.0.1').admitted).toBe(5);
  });

  it("404s are limited like any request, Fastify's handler and setNotFoundHandler's; skip leaves them out", async () => {
    const clock = new ManualClock();
    for (const custom of [false, true]) {
      const limiter = new FixedWindow({ limit: 2, windowMs: 60_000, clock });
      const app = Fastify();
      await app.register(fastifyRateLimit, { limiter, key: () => 'k' });
      app.get('/', async () => 'ok');
      if (custom) app.setNotFoundHandler((_request, reply) => reply.code(404).send('none here'));
      const port = await start(app);
      const replies = await sequence(port, 3, { path: '/nowhere' });
      expect(replies.map((r) => r.status)).toEqual([404, 404, 429]);
      expect(replies[0]!.headers.ratelimit).toBe('"2-in-60s";r=1;t=60');
      if (custom) expect(replies[0]!.body).toBe('none here');
      // One budget with the routes: the route is refused too.
      expect((await request(port)).status).toBe(429);
      expect(limiter.stats('k').admitted).toBe(2);
    }
    const limiter = new FixedWindow({ limit: 1, windowMs: 60_000, clock });
    const app = Fastify();
    await app.register(fastifyRateLimit, {
      limiter,
      key: () => 'k',
      skip: (request) => request.is404,
    });
    app.get('/', async () => 'ok');
    const port = await start(app);
    const lost = await sequence(port, 3, { path: '/nowhere' });
    expect(lost.map((r) => [r.status, r.headers.ratelimit])).toEqual([
      [404, undefined],
      [404, undefined],
      [404, undefined],
    ]);
    expect((await sequence(port, 2)).map((r) => r.status)).toEqual([200, 429]);
  });

  it('routes added before the plugin loaded are limited as the ones after: each request counted once', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 2, windowMs: 60_000, clock });
    const own = new FixedWindow({ limit: 1, windowMs: 60_000, clock });
    const app = Fastify();
    // Declared before the plugin, at the top and in a child context.
    app.get('/early', async () => 'early');
    app.get('/early-free', { config: { rateLimit: false } }, async () => 'free');
    app.get('/early-own', { config: { rateLimit: { limiter: own } } }, async () => 'own');
    app.register(async (child) => {
      child.get('/child-early', async () => 'child');
    });
    // Not awaited (a common style): the plugin loads after the next line runs.
    app.register(fastifyRateLimit, { limiter, key: () => 'k' });
    app.get('/right-after', async () => 'after');
    const port = await start(app);

    for (const path of ['/early', '/child-early', '/right-after']) {
      limiter.reset('k');
      const replies = await sequence(port, 3, { path });
      expect(replies.map((r) => r.status)).toEqual([200, 200, 429]);
      expect(rateFields(replies[0]!.headers)).toEqual({
        'ratelimit-policy': '"2-in-60s";q=2;w=60',
        ratelimit: '"2-in-60s";r=1;t=60',
      });
      expect(limiter.stats('k').admitted).toBe(2);
    }
    const free = await sequence(port, 3, { path: '/early-free' });
    expect(free.map((r) => [r.status, r.headers.ratelimit])).toEqual([
      [200, undefined],
      [200, undefined],
      [200, undefined],
    ]);
    const owned = await sequence(port, 2, { path: '/early-own' });
    expect(owned.map((r) => r.status)).toEqual([200, 429]);
    expect(own.stats('k').admitted).toBe(1);
    // The 404 handler is limited like any request.
    limiter.reset('k');
    expect((await sequence(port, 3, { path: '/nowhere' })).map((r) => r.status)).toEqual([
      404, 404, 429,
    ]);
    expect(limiter.stats('k').admitted).toBe(2);
  });

  it('a route added before the plugin with bad options fails its requests naming the route', async () => {
    const app = Fastify();
    app.get('/bad', { config: { rateLimit: { statusCode: 99 } as never } }, async () => 'bad');
    const errors: string[] = [];
    app.setErrorHandler((error, _request, reply) => {
      errors.push((error as Error).message);
      reply.code(500).send('error');
    });
    await app.register(fastifyRateLimit, {
      limiter: new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() }),
    });
    const port = await start(app);
    const replies = await sequence(port, 2, { path: '/bad' });
    expect(replies.map((r) => r.status)).toEqual([500, 500]);
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatch(
      /fastifyRateLimit \(route "GET" "\/bad", added before the plugin\).*statusCode/,
    );
  });

  it('one config object for a route before the plugin and one after: each limited by its own', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const own = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const config = { rateLimit: { limiter: own, key: () => 'k' } };
    const app = Fastify();
    app.get('/before', { config }, async () => 'before');
    await app.register(fastifyRateLimit, { limiter });
    app.get('/after', { config }, async () => 'after');
    const port = await start(app);
    await request(port, { path: '/before' });
    await request(port, { path: '/after' });
    expect(own.stats('k').admitted).toBe(2);
    expect(limiter.stats('k').admitted).toBe(0);
  });

  it('two plugins around a route: the one before it and the one after both count it once', async () => {
    const clock = new ManualClock();
    const a = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const b = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const own = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const app = Fastify();
    await app.register(fastifyRateLimit, { limiter: a, key: () => 'k', policyName: 'a' });
    app.get('/', async () => 'ok');
    app.get(
      '/own',
      { config: { rateLimit: { limiter: own, policyName: 'own' } } },
      async () => 'own',
    );
    await app.register(fastifyRateLimit, { limiter: b, key: () => 'k', policyName: 'b' });
    const port = await start(app);
    const r = await request(port);
    // b meets the route late, in an app-level hook: those run before a route's own hooks.
    expect(r.headers.ratelimit).toBe('"b";r=9;t=60, "a";r=9;t=60');
    await request(port, { path: '/own' });
    // The route's own limiter replaces each plugin's, and counts its request once.
    expect([a.stats('k').admitted, b.stats('k').admitted, own.stats('k').admitted]).toEqual([
      1, 1, 1,
    ]);
  });

  it('two plugins stacked: each limiter counts a request once, draft 8 lists both', async () => {
    const clock = new ManualClock();
    const perApp = new FixedWindow({ limit: 100, windowMs: 60_000, clock });
    const perArea = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    const app = Fastify();
    await app.register(fastifyRateLimit, { limiter: perApp });
    // In a child context: its routes get both plugins' hooks, the root's routes only one.
    await app.register(async (child) => {
      await child.register(fastifyRateLimit, { limiter: perArea, policyName: 'area' });
      child.get('/area', async () => 'area');
    });
    app.get('/', async () => 'ok');
    const port = await start(app);
    const area = await sequence(port, 3, { path: '/area' });
    expect(area.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(rateFields(area[0]!.headers)).toEqual({
      'ratelimit-policy': '"100-in-60s";q=100;w=60, "area";q=2;w=1',
      ratelimit: '"100-in-60s";r=99;t=60, "area";r=1;t=1',
    });
    expect(area[2]!.headers.ratelimit).toBe('"100-in-60s";r=97;t=60, "area";r=0;t=1');
    const root = await request(port);
    expect(rateFields(root.headers)).toEqual({
      'ratelimit-policy': '"100-in-60s";q=100;w=60',
      ratelimit: '"100-in-60s";r=96;t=60',
    });
    expect(perApp.stats('127.0.0.1').admitted).toBe(4);
    expect(perArea.stats('127.0.0.1').admitted).toBe(2);
  });

  it('two plugins stacked on one limiter: a route with options but no limiter of its own keeps both', async () => {
    const clock = new ManualClock();
    const shared = new FixedWindow({ limit: 100, windowMs: 60_000, clock });
    const app = Fastify();
    // One limiter, two budgets: per route and one global.
    await app.register(fastifyRateLimit, { limiter: shared, key: (req) => `route:${req.url}` });
    await app.register(fastifyRateLimit, { limiter: shared, key: () => 'global', policyName: 'g' });
    app.get('/plain', async () => 'ok');
    app.get('/tuned', { config: { rateLimit: { statusCode: 503 } } }, async () => 'ok');
    const port = await start(app);
    expect((await request(port, { path: '/plain' })).status).toBe(200);
    expect((await request(port, { path: '/tuned' })).status).toBe(200);
    expect(shared.stats('global').admitted).toBe(2);
    expect(shared.stats('route:/tuned').admitted).toBe(1);
  });

  it("two plugins stacked: a route's own limiter counts each of its requests once", async () => {
    const clock = new ManualClock();
    const perMinute = new FixedWindow({ limit: 100, windowMs: 60_000, clock });
    const perDay = new FixedWindow({ limit: 1000, windowMs: 86_400_000, clock });
    const uploads = new FixedWindow({ limit: 4, windowMs: 60_000, clock });
    const reports = new FixedWindow({ limit: 1, windowMs: 60_000, clock });
    const app = Fastify();
    await app.register(fastifyRateLimit, { limiter: perMinute });
    await app.register(fastifyRateLimit, { limiter: perDay });
    // Merged over each plugin's options, the route's own limiter: one hook, not two.
    app.post('/upload', { config: { rateLimit: { limiter: uploads } } }, async () => 'ok');
    // A GET route's HEAD twin is a route of its own: limited once too, not left out.
    app.get('/report', { config: { rateLimit: { limiter: reports } } }, async () => 'report');
    app.get('/', async () => 'ok');
    const port = await start(app);

    const replies = await sequence(port, 5, { path: '/upload', method: 'POST' });
    expect(replies.map((r) => [r.status, r.headers.ratelimit])).toEqual([
      [200, '"4-in-60s";r=3;t=60'],
      [200, '"4-in-60s";r=2;t=60'],
      [200, '"4-in-60s";r=1;t=60'],
      [200, '"4-in-60s";r=0;t=60'],
      [429, '"4-in-60s";r=0;t=60'],
    ]);
    expect(uploads.stats('127.0.0.1')).toMatchObject({ admitted: 4, rejected: 1 });
    const head = await sequence(port, 2, { path: '/report', method: 'HEAD' });
    expect(head.map((r) => [r.status, r.headers.ratelimit])).toEqual([
      [200, '"1-in-60s";r=0;t=60'],
      [429, '"1-in-60s";r=0;t=60'],
    ]);
    expect(reports.stats('127.0.0.1')).toMatchObject({ admitted: 1, rejected: 1 });
    // A route without its own limiter still has both plugins' limiters.
    expect((await request(port)).headers.ratelimit).toBe(
      '"100-in-60s";r=99;t=60, "1000-in-86400s";r=999;t=86400',
    );
    expect(perMinute.stats('127.0.0.1').admitted).toBe(1);
  });

  it("its fields are the reply's own: later hooks read and remove them, members set earlier are kept", async () => {
    const limiter = new FixedWindow({ limit: 10, windowMs: 60_000, clock: new ManualClock() });
    const app = Fastify();
    // App-level hooks run before the route-level one the plugin adds.
    app.addHook('onRequest', async (request, reply) => {
      if (request.url === '/reply') reply.header('RateLimit', '"gateway";r=7');
      if (request.url === '/raw') reply.raw.setHeader('RateLimit', '"edge";r=3');
    });
    await app.register(fastifyRateLimit, { limiter });
    const seen: unknown[] = [];
    app.addHook('onSend', async (request, reply, payload) => {
      seen.push(reply.getHeader('RateLimit'), reply.getHeaders()['ratelimit-policy']);
      if (request.url === '/quiet') reply.removeHeader('RateLimit-Policy');
      return payload;
    });
    for (const path of ['/reply', '/raw', '/quiet']) app.get(path, async () => 'ok');
    const port = await start(app);

    const fromReply = await request(port, { path: '/reply' });
    const fromRaw = await request(port, { path: '/raw' });
    const quiet = await request(port, { path: '/quiet' });
    const lines = (r: { rawHeaders: string[] }, name: string) =>
      r.rawHeaders.filter((_, i) => i % 2 === 0 && r.rawHeaders[i]!.toLowerCase() === name).length;
    expect(fromReply.status).toBe(200);
    expect(fromReply.headers.ratelimit).toMatch(/^"gateway";r=7, "10-in-60s";r=\d;t=60$/);
    expect(fromRaw.headers.ratelimit).toMatch(/^"edge";r=3, "10-in-60s";r=\d;t=60$/);
    for (const r of [fromReply, fromRaw, quiet]) expect(lines(r, 'ratelimit')).toBe(1);
    expect(quiet.headers['ratelimit-policy']).toBeUndefined();
    expect(quiet.headers.ratelimit).toMatch(/^"10-in-60s";r=\d;t=60$/);
    expect(lines(fromRaw, 'ratelimit-policy')).toBe(1);
    // What onSend read is what was sent.
    expect(seen).toHaveLength(6);
    expect(new Set(seen.filter((_, i) => i % 2 === 1))).toEqual(new Set(['"10-in-60s";q=10;w=60']));
    expect(seen.filter((_, i) => i % 2 === 0).sort()).toEqual(
      [fromReply, fromRaw, quiet].map((r) => r.headers.ratelimit).sort(),
    );
    expect(limiter.stats('127.0.0.1').admitted).toBe(3);
  });

  it('key, permits and a JSON message; a chain reports every member', async () => {
    const clock = new ManualClock();
    const perSecond = new TokenBucket({ capacity: 10, refillPerSecond: 10, clock });
    const perDay = new FixedWindow({ limit: 1000, windowMs: 86_400_000, clock });
    const app = Fastify();
    await app.register(fastifyRateLimit, {
      limiter: chain(perSecond, perDay),
      key: (request) => String(request.headers['x-api-key']),
      permits: (request) => (request.url === '/bulk' ? 4 : 1),
      message: { error: 'rate limited' },
    });
    app.get('/', async () => 'ok');
    app.get('/bulk', async () => 'bulk');
    const port = await start(app);
    const k = { headers: { 'x-api-key': 'k1' } };
    const first = await request(port, { ...k, path: '/bulk' });
    expect(first.headers.ratelimit).toBe('"10-in-1s";r=6;t=1, "1000-in-86400s";r=996;t=86400');
    await request(port, { ...k, path: '/bulk' });
    const refused = await request(port, { ...k, path: '/bulk' });
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body)).toEqual({ error: 'rate limited' });
    expect(refused.headers['content-type']).toMatch(/^application\/json/);
    expect((await request(port, { headers: { 'x-api-key': 'k2' } })).status).toBe(200);
    expect(perDay.stats('k1').available).toBe(992); // the refused 4 were given back
  });

  it("a rejecting limiter is answered 503 with Retry-After; onError rethrowing and a key function that throws go to Fastify's error handler", async () => {
    const app = Fastify();
    const seen: string[] = [];
    app.setErrorHandler((error, _request, reply) => {
      seen.push((error as Error).message);
      reply.code(500).send('handled');
    });
    const failing = { limit: 5, consume: () => Promise.reject(new Error('backend down')) };
    await app.register(fastifyRateLimit, { limiter: failing });
    app.get('/', async () => 'ok');
    app.get(
      '/rethrow',
      {
        config: {
          rateLimit: {
            onError: (error: Error) => {
              throw error;
            },
          },
        },
      },
      async () => 'ok',
    );
    app.get(
      '/key',
      {
        config: {
          rateLimit: {
            limiter: new FixedWindow({ limit: 5, windowMs: 1000 }),
            key: () => {
              throw new Error('no key');
            },
          },
        },
      },
      async () => 'ok',
    );
    const port = await start(app);
    const down = await request(port);
    expect([down.status, down.body, down.headers['retry-after']]).toEqual([
      503,
      'Service Unavailable',
      '1',
    ]);
    expect(warnings.expected('ATOMIC_LIMITER_HTTP_ERROR')).toHaveLength(1);
    expect((await request(port, { path: '/rethrow' })).body).toBe('handled');
    expect((await request(port, { path: '/key' })).body).toBe('handled');
    expect(seen).toEqual(['backend down', 'no key']);
  });

  it("a function that throws or rejects with a value that is not an Error still goes to Fastify's error handler", async () => {
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() });
    const app = Fastify();
    const seen: Error[] = [];
    app.setErrorHandler((error, _request, reply) => {
      seen.push(error as Error);
      reply.code(500).send('handled');
    });
    await app.register(fastifyRateLimit, { limiter });
    // done(undefined) and done(null) mean "go on" to Fastify: the request would run unlimited.
    const routes: [string, Partial<FastifyRateLimitOptions>][] = [
      [
        '/throws',
        {
          key: () => {
            throw undefined;
          },
        },
      ],
      ['/rejects', { key: () => Promise.reject(null) }],
      [
        '/permits',
        {
          permits: () => {
            throw undefined;
          },
        },
      ],
    ];
    let ran = 0;
    for (const [path, rateLimit] of routes) {
      app.get(path, { config: { rateLimit } }, async () => {
        ran++;
        return 'ran';
      });
    }
    const port = await start(app);
    for (const [path] of routes) expect((await request(port, { path })).body, path).toBe('handled');
    expect(ran).toBe(0);
    expect(seen.map((e) => [e instanceof Error, e.message, 'cause' in e, e.cause])).toEqual(
      [
        ['/throws', undefined],
        ['/rejects', null],
        ['/permits', undefined],
      ].map(([path, cause]) => [
        true,
        `fastifyRateLimit (route "GET" ${path}): an option's function threw or rejected with ${String(cause)}, not an Error`,
        true,
        cause,
      ]),
    );
    expect(limiter.stats().admitted).toBe(0);
  });

  it('bad options fail at registration, naming the option', async () => {
    const app = Fastify();
    await expect(
      app.register(fastifyRateLimit, {
        limiter: new FixedWindow({ limit: 1, windowMs: 1 }),
        statusCode: 200,
      }),
    ).rejects.toThrow(/option "statusCode" must be an integer from 400 to 599, got 200/);
    const other = Fastify();
    await expect(
      other.register(fastifyRateLimit, {
        limiter: new FixedWindow({ limit: 1, windowMs: 1 }),
        trustProxy: true,
      } as never),
    ).rejects.toThrow(/"trustProxy" is Fastify's own/);
    const route = Fastify();
    await route.register(fastifyRateLimit, { limiter: new FixedWindow({ limit: 1, windowMs: 1 }) });
    expect(() =>
      route.get('/x', { config: { rateLimit: { headers: 'draft-9' as never } } }, async () => 'x'),
    ).toThrow(/route "GET" \/x.*option "headers"/);
    await route.close();
    await app.close().catch(() => {});
    await other.close().catch(() => {});
  });

  it('Concurrency: released once when the reply finishes and when the client aborts', async () => {
    const limiter = new Concurrency({ limit: 2 });
    const gates: (() => void)[] = [];
    const app = Fastify();
    await app.register(fastifyRateLimit, { limiter, key: () => 'all' });
    app.get('/slow', (_request, reply) => {
      gates.push(() => reply.send('done'));
    });
    const port = await start(app);
    const leaving = new AbortController();
    const a = request(port, { path: '/slow', signal: leaving.signal }).catch((e: Error) => e.name);
    const b = request(port, { path: '/slow' });
    await until(() => gates.length === 2, 'two in the handler');
    expect((await request(port, { path: '/slow' })).status).toBe(429);
    leaving.abort();
    expect(await a).toBe('AbortError');
    await until(() => limiter.stats('all').available === 1, 'the aborted one released');
    for (const g of gates.splice(0)) g();
    expect((await b).status).toBe(200);
    await until(() => limiter.stats('all').available === 2, 'the finished one released');
    expect(limiter.stats('all').available).toBe(2);
  });
});
