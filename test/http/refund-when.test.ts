import http from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { fastifyRateLimit, rateLimit } from '../../src/http/index.js';
import {
  Concurrency,
  chain,
  FixedWindow,
  ManualClock,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import { runScenario } from '../helpers/child.js';
import { listen, request, sequence, until, watchWarnings } from '../helpers/http.js';

const warnings = watchWarnings();

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

/** Express: POST /login answers 200 for password "right", 401 otherwise; GET /slow parks. */
async function loginApp(limit: express.RequestHandler) {
  const app = express();
  const parked: Response[] = [];
  const errors: unknown[] = [];
  app.post('/login', limit, (req, res) => {
    if (req.headers['x-password'] === 'right') res.send('welcome');
    else res.status(401).send('no');
  });
  app.get('/slow', limit, (_req, res) => {
    parked.push(res);
  });
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    errors.push(err);
    res.status(500).send('error');
  });
  const { port, close } = await listen(http.createServer(app));
  closers.push(close);
  return { port, parked, errors };
}

const login = (password: string) => ({
  path: '/login',
  method: 'POST',
  headers: { 'x-password': password },
});

const failedOnly = (_req: unknown, res: { statusCode: number }) => res.statusCode < 400;

describe('refundWhen: counting requests by their outcome', () => {
  it('a login route counts failed attempts only: successes are given back when they finish', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 3, windowMs: 60_000, clock });
    const { port } = await loginApp(rateLimit({ limiter, key: () => 'u', refundWhen: failedOnly }));
    for (let i = 0; i < 10; i++) expect((await request(port, login('right'))).status).toBe(200);
    await until(() => limiter.stats('u').available === 3, 'the successes given back');
    const wrong = await sequence(port, 4, login('wrong'));
    expect(wrong.map((r) => r.status)).toEqual([401, 401, 401, 429]);
    // Spent by failures: a right password is refused too until the window ends.
    expect((await request(port, login('right'))).status).toBe(429);
    expect(limiter.stats('u')).toMatchObject({ available: 0, admitted: 13 });
  });

  it('a refund after the window ended goes to the window the permits came from, not the new one', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    const { port, parked } = await loginApp(
      rateLimit({ limiter, key: () => 'u', refundWhen: (req) => req.url === '/slow' }),
    );
    const slow = request(port, { path: '/slow' });
    await until(() => parked.length === 1, 'the slow request in its handler');
    clock.advance(1000); // a new window, spent by two failures
    expect((await sequence(port, 2, login('wrong'))).map((r) => r.status)).toEqual([401, 401]);
    parked[0]!.send('done');
    expect((await slow).status).toBe(200);
    await new Promise((r) => setImmediate(r));
    // The slow request's permit was the old window's: the new one gains nothing.
    expect((await request(port, login('wrong'))).status).toBe(429);
    expect(limiter.stats('u').available).toBe(0);
  });

  it('a request whose client goes away before the response finishes stays counted', async () => {
    const limiter = new TokenBucket({ capacity: 2, refillPerSecond: 1, clock: new ManualClock() });
    let asked = 0;
    const { port, parked } = await loginApp(
      rateLimit({
        limiter,
        key: () => 'u',
        refundWhen: () => {
          asked++;
          return true;
        },
      }),
    );
    const gone = new AbortController();
    const slow = request(port, { path: '/slow', signal: gone.signal }).catch(() => 'aborted');
    await until(() => parked.length === 1, 'the slow request in its handler');
    gone.abort();
    await until(() => parked[0]!.destroyed, 'the connection closed');
    expect(await slow).toBe('aborted');
    parked[0]!.end();
    await new Promise((r) => setImmediate(r));
    expect(asked).toBe(0);
    expect(limiter.stats('u').available).toBe(1);
  });

  it('a refundWhen that throws or answers a non-boolean keeps the permits counted, once, with a warning', async () => {
    const clock = new ManualClock();
    const window = new SlidingWindow({ limit: 5, windowMs: 60_000, clock });
    const held = new Concurrency({ limit: 5 });
    let answer: () => unknown = () => {
      throw new Error('bug in refundWhen');
    };
    const { port } = await loginApp(
      rateLimit({
        limiter: chain(window, held),
        key: () => 'u',
        refundWhen: () => answer() as boolean,
      }),
    );
    expect((await request(port, login('right'))).status).toBe(200);
    await until(() => held.stats('u').available === 5, 'the Concurrency permit released');
    expect(window.stats('u').available).toBe(4);
    answer = () => 'yes';
    expect((await request(port, login('right'))).status).toBe(200);
    await until(() => held.stats('u').available === 5, 'released again');
    expect(window.stats('u').available).toBe(3);
    // A true refund: the window's permit comes back; the Concurrency one only once, at close.
    answer = () => true;
    expect((await request(port, login('right'))).status).toBe(200);
    await until(() => window.stats('u').available === 3 && held.stats('u').available === 5, 'back');
    expect(held.stats('u').available).toBe(5);
    expect(warnings.expected('ATOMIC_LIMITER_REFUND_WHEN_FAILED').map((w) => w.message)).toEqual([
      'rateLimit: option "refundWhen" threw (the request\'s permits stay counted): bug in refundWhen',
      'rateLimit: option "refundWhen" must return a boolean, got "yes" (the request\'s permits stay counted)',
    ]);
  });

  it('a chain gives back each rate member to the window its permits came from', async () => {
    const clock = new ManualClock();
    const perSecond = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    const perMinute = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const { port, parked } = await loginApp(
      rateLimit({ limiter: chain(perSecond, perMinute), key: () => 'u', refundWhen: () => true }),
    );
    const slow = request(port, { path: '/slow' });
    await until(() => parked.length === 1, 'in its handler');
    clock.advance(1000); // the per-second window rolls; the minute does not
    expect(perSecond.tryAcquire('u', 2)).toBe(true);
    expect(perMinute.tryAcquire('u', 2)).toBe(true);
    parked[0]!.send('ok');
    expect((await slow).status).toBe(200);
    await until(() => perMinute.stats('u').available === 8, 'the minute credited');
    expect(perSecond.stats('u').available).toBe(0); // the new second gains nothing
  });
});

describe('refundWhen with wait', () => {
  it('a refund lets the next waiter in; a request that waited is refunded too', async () => {
    const clock = new ManualClock();
    const limiter = new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 2, clock });
    const { port, parked } = await loginApp(
      rateLimit({ limiter, key: () => 'u', wait: { timeoutMs: 60_000 }, refundWhen: () => true }),
    );
    const a = request(port, { path: '/slow' });
    await until(() => parked.length === 1, 'the first in its handler');
    const b = request(port, { path: '/slow' });
    await until(() => limiter.stats('u').queued === 1, 'the second waiting');
    parked[0]!.send('a'); // its refund is the token the waiter takes: no time passes
    await until(() => parked.length === 2, 'the second served');
    parked[1]!.send('b');
    expect([(await a).status, (await b).status]).toEqual([200, 200]);
    await until(() => limiter.stats('u').available === 1, 'the waiter refunded too');
  });

  it('a request that waited is refunded to the window it took its permit in, not the one current when it finishes', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 1, windowMs: 1000, queueLimit: 1, clock });
    let refunds = 0;
    const { port, parked } = await loginApp(
      rateLimit({
        limiter,
        key: () => 'u',
        wait: { timeoutMs: 60_000 },
        refundWhen: (req) => req.url === '/slow' && ++refunds > 0,
      }),
    );
    expect((await request(port, login('wrong'))).status).toBe(401); // window 0 spent
    const slow = request(port, { path: '/slow' });
    await until(() => limiter.stats('u').queued === 1, 'the slow request waiting');
    clock.advance(1000); // window 1: the waiter takes its permit
    await until(() => parked.length === 1, 'the slow request in its handler');
    clock.advance(1000); // window 2, spent by a failure
    expect((await request(port, login('wrong'))).status).toBe(401);
    parked[0]!.send('done');
    expect((await slow).status).toBe(200);
    await until(() => refunds === 1, 'the slow request refunded');
    // Its permit was window 1's: window 2 gains nothing.
    expect(limiter.stats('u').available).toBe(0);
  });
});

describe('refundWhen with Fastify', () => {
  it('an auth hook that rejects before the limiter is never counted; failures after it are', async () => {
    const limiter = new FixedWindow({ limit: 2, windowMs: 60_000, clock: new ManualClock() });
    const app = Fastify();
    // Registered first: Fastify runs onRequest hooks in order, so it answers before the limiter.
    app.addHook('onRequest', async (request, reply) => {
      if (request.headers['x-user'] === undefined) return reply.code(401).send('who?');
    });
    await app.register(fastifyRateLimit, {
      limiter,
      key: (request) => String(request.headers['x-user']),
      refundWhen: (_request, reply) => reply.statusCode < 400,
    });
    app.get('/', async (request, reply) =>
      request.headers['x-ok'] ? 'ok' : reply.code(403).send('no'),
    );
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    const port = (app.server.address() as { port: number }).port;
    expect((await sequence(port, 5)).map((r) => r.status)).toEqual([401, 401, 401, 401, 401]);
    const ok = { headers: { 'x-user': 'a', 'x-ok': '1' } };
    expect((await sequence(port, 5, ok)).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    await until(() => limiter.stats('a').available === 2, 'the successes given back');
    const no = { headers: { 'x-user': 'a' } };
    expect((await sequence(port, 3, no)).map((r) => r.status)).toEqual([403, 403, 429]);
  });
});

describe('refundWhen over a cluster client', () => {
  it('a worker process gives its successes back to the primary; failures count', async () => {
    const script = new URL('../fixtures/http/cluster-refund.mjs', import.meta.url).pathname;
    const r = await runScenario(script, '');
    expect(r.ok).toEqual([200, 200, 200, 200]);
    expect(r.failed).toEqual([401, 401, 429]);
    expect(r.stats).toMatchObject({ available: 0, admitted: 6, rejected: 1 });
  });
});
