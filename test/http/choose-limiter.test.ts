import http from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { clientKey, fastifyRateLimit, type HttpLimiter, rateLimit } from '../../src/http/index.js';
import { FixedWindow, ManualClock } from '../../src/index.js';
import { listen, rateFields, request, sequence, watchWarnings } from '../helpers/http.js';

const warnings = watchWarnings();

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

async function serveExpress(setup: (app: express.Express) => void) {
  const app = express();
  const errors: unknown[] = [];
  setup(app);
  app.get(/.*/, (_req, res) => {
    res.send('ok');
  });
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    errors.push(err);
    res.status(500).send(`error: ${(err as Error).message}`);
  });
  const { port, close } = await listen(http.createServer(app));
  closers.push(close);
  return { port, errors };
}

const as = (key: string, plan?: string) => ({
  headers: { 'x-api-key': key, ...(plan ? { 'x-plan': plan } : {}) },
});

describe('a limiter chosen per request', () => {
  it('a free and a paid plan: each key limited by its plan, each plan with its own policy', async () => {
    const clock = new ManualClock();
    const free = new FixedWindow({ limit: 2, windowMs: 60_000, clock });
    const paid = new FixedWindow({ limit: 4, windowMs: 60_000, clock });
    for (const async of [false, true]) {
      free.reset('f');
      paid.reset('p');
      const pick = (req: http.IncomingMessage) => (req.headers['x-plan'] === 'paid' ? paid : free);
      const { port } = await serveExpress((app) =>
        app.use(
          rateLimit({
            limiter: async ? async (req) => pick(req) : pick,
            key: (req) => String(req.headers['x-api-key']),
          }),
        ),
      );
      const f = await sequence(port, 3, as('f'));
      const p = await sequence(port, 5, as('p', 'paid'));
      expect(f.map((r) => r.status)).toEqual([200, 200, 429]);
      expect(p.map((r) => r.status)).toEqual([200, 200, 200, 200, 429]);
      expect(rateFields(f[0]!.headers)).toEqual({
        'ratelimit-policy': '"2-in-60s";q=2;w=60',
        ratelimit: '"2-in-60s";r=1;t=60',
      });
      expect(rateFields(p[0]!.headers)).toEqual({
        'ratelimit-policy': '"4-in-60s";q=4;w=60',
        ratelimit: '"4-in-60s";r=3;t=60',
      });
    }
  });

  it('policyName as a function of the limiter names each plan; Fastify takes the function too', async () => {
    const clock = new ManualClock();
    const free = new FixedWindow({ limit: 2, windowMs: 60_000, clock });
    const paid = new FixedWindow({ limit: 4, windowMs: 60_000, clock });
    const names = new Map<HttpLimiter, string>([
      [free, 'free'],
      [paid, 'paid'],
    ]);
    const app = Fastify();
    await app.register(fastifyRateLimit, {
      limiter: (request) => (request.headers['x-plan'] === 'paid' ? paid : free),
      key: (request) => String(request.headers['x-api-key']),
      policyName: (limiter) => names.get(limiter)!,
    });
    app.get('/', async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    const port = (app.server.address() as { port: number }).port;
    expect((await request(port, as('a'))).headers.ratelimit).toBe('"free";r=1;t=60');
    expect((await request(port, as('b', 'paid'))).headers.ratelimit).toBe('"paid";r=3;t=60');
  });

  it('a function that returns no limiter sends the request to the error handler, naming the option', async () => {
    const { port, errors } = await serveExpress((app) =>
      app.use(rateLimit({ limiter: () => 'free' as never, key: () => 'k' })),
    );
    const r = await request(port);
    expect(r.status).toBe(500);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(TypeError);
    expect((errors[0] as Error).message).toMatch(
      /option "limiter" must be a function that must return a limiter .*got "free"/,
    );
  });

  it('a fixed policyName with a limiter function is refused at rateLimit()', () => {
    expect(() =>
      rateLimit({ limiter: () => new FixedWindow({ limit: 1, windowMs: 1 }), policyName: 'x' }),
    ).toThrow(/option "policyName" must be a function of the limiter when "limiter" is a function/);
  });
});

describe('clientKey(): the default key as a helper', () => {
  it('an API key or else the client address, IPv6 grouped by /56 as the default key does', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 2, windowMs: 60_000, clock });
    const limit = rateLimit({
      limiter,
      key: (req) =>
        (req.headers['x-api-key'] as string | undefined) ??
        clientKey(req, { trustProxy: 'loopback' }),
    });
    const server = http.createServer(async (req, res) => {
      if (await limit(req, res)) res.end('ok');
    });
    const { port, close } = await listen(server);
    closers.push(close);
    const from = (address: string) => ({ headers: { 'x-forwarded-for': address } });
    // Rotating addresses inside one /56 (a /64 each): one client, one budget.
    const rotating = ['2001:db8:1:2300::1', '2001:db8:1:2301::1', '2001:db8:1:23ff:1::9'];
    const statuses = [];
    for (const a of rotating) statuses.push((await request(port, from(a))).status);
    expect(statuses).toEqual([200, 200, 429]);
    expect(limiter.stats('2001:db8:1:2300::/56').admitted).toBe(2);
    expect((await request(port, from('::ffff:203.0.113.7'))).status).toBe(200);
    expect(limiter.stats('203.0.113.7').admitted).toBe(1);
    expect((await request(port, as('key-1'))).status).toBe(200);
    expect(limiter.stats('key-1').admitted).toBe(1);
  });

  it('reads a Fastify request (its ip), and throws ERR_NO_CLIENT_ADDRESS for none', async () => {
    const app = Fastify();
    const keys: string[] = [];
    app.get('/', async (request) => {
      keys.push(clientKey(request));
      return 'ok';
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    await request((app.server.address() as { port: number }).port);
    expect(keys).toEqual(['127.0.0.1']);
    const fake = { raw: { socket: {}, headers: {} }, ip: 'not-an-address' } as never;
    expect(() => clientKey(fake)).toThrow(
      expect.objectContaining({ code: 'ERR_NO_CLIENT_ADDRESS' }),
    );
    expect(() => clientKey(fake, { ipv6Subnet: 7 })).toThrow(RangeError);
  });
});

describe('misconfigurations are reported once per middleware, with a code and a docs anchor', () => {
  it("Express: X-Forwarded-For while Express trusts no proxy, and 'trust proxy' true", async () => {
    const clock = new ManualClock();
    const off = await serveExpress((app) =>
      app.use(rateLimit({ limiter: new FixedWindow({ limit: 9, windowMs: 1000, clock }) })),
    );
    await sequence(off.port, 3, { headers: { 'x-forwarded-for': '203.0.113.1' } });
    expect(warnings.expected('ATOMIC_LIMITER_FORWARDED_IGNORED').map((w) => w.message)).toEqual([
      `rateLimit: a request came with X-Forwarded-For, but it is not trusted (Express's "trust proxy" setting): every client behind that proxy is counted under the proxy's address, as one (see docs/http.md#atomic_limiter_forwarded_ignored)`,
    ]);
    const all = await serveExpress((app) => {
      app.set('trust proxy', true);
      app.use(rateLimit({ limiter: new FixedWindow({ limit: 9, windowMs: 1000, clock }) }));
    });
    await sequence(all.port, 3, { headers: { 'x-forwarded-for': '203.0.113.1' } });
    expect(
      warnings.expected('ATOMIC_LIMITER_PERMISSIVE_TRUST_PROXY').map((w) => w.message),
    ).toEqual([
      'rateLimit: the framework trusts any proxy ("trust proxy" true): a client picks its own key by sending X-Forwarded-For; trust the proxies you run (a hop count or their addresses) (see docs/http.md#atomic_limiter_permissive_trust_proxy)',
    ]);
    // Trusting the loopback proxy: neither.
    const one = await serveExpress((app) => {
      app.set('trust proxy', 'loopback');
      app.use(rateLimit({ limiter: new FixedWindow({ limit: 9, windowMs: 1000, clock }) }));
    });
    await sequence(one.port, 2, { headers: { 'x-forwarded-for': '203.0.113.1' } });
    expect(warnings.of('ATOMIC_LIMITER_FORWARDED_IGNORED')).toHaveLength(1);
    expect(warnings.of('ATOMIC_LIMITER_PERMISSIVE_TRUST_PROXY')).toHaveLength(1);
  });

  it('two middlewares counting one request under one key of the same limiter: one warning, not one a request', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const { port } = await serveExpress((app) => {
      app.use(rateLimit({ limiter, key: () => 'k' }));
      app.use('/api', rateLimit({ limiter, key: () => 'k' }));
      // The same limiter under another key is a second budget, not a double count.
      app.use('/other', rateLimit({ limiter, key: () => 'other' }));
    });
    await sequence(port, 2, { path: '/other' });
    expect(warnings.of('ATOMIC_LIMITER_COUNTED_TWICE')).toEqual([]);
    await sequence(port, 3, { path: '/api' });
    expect(limiter.stats('k').admitted).toBe(8);
    expect(warnings.expected('ATOMIC_LIMITER_COUNTED_TWICE').map((w) => w.message)).toEqual([
      'rateLimit: two middlewares with the same limiter counted one request under one key: it is counted twice; give each its own limiter, or mount one of them on fewer paths (see docs/http.md#atomic_limiter_counted_twice)',
    ]);
  });

  it('Fastify: two plugins with the same limiter and key are reported; with distinct keys they are not', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const app = Fastify();
    await app.register(fastifyRateLimit, { limiter, key: () => 'k' });
    await app.register(fastifyRateLimit, { limiter, key: () => 'k', policyName: 'again' });
    app.get('/', async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    const port = (app.server.address() as { port: number }).port;
    await sequence(port, 2);
    expect(warnings.expected('ATOMIC_LIMITER_COUNTED_TWICE')).toHaveLength(1);
    expect(limiter.stats('k').admitted).toBe(4);
  });
});
