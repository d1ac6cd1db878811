import http from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { rateLimit } from '../../src/http/index.js';
import {
  Concurrency,
  chain,
  FixedWindow,
  ManualClock,
  SlidingLog,
  TokenBucket,
} from '../../src/index.js';
import { listen, rateFields, request, sequence, until, watchWarnings } from '../helpers/http.js';

const warnings = watchWarnings();

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

/** An Express 5 app with `limit` in front of GET /, and an error handler that reports. */
async function serve(limit: express.RequestHandler, extra?: (app: express.Express) => void) {
  const app = express();
  const errors: unknown[] = [];
  app.use(limit);
  extra?.(app);
  app.get('/', (_req, res) => {
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

describe('rateLimit with Express 5', () => {
  it('limit 5: exactly 5 × 200, then 429 with Retry-After and the draft-8 fields', async () => {
    const clock = new ManualClock();
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const { port } = await serve(rateLimit({ limiter }));
    const replies = await sequence(port, 8);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    expect(replies[0]!.body).toBe('ok');
    expect(rateFields(replies[0]!.headers)).toEqual({
      'ratelimit-policy': '"5-in-5s";q=5;w=5',
      ratelimit: '"5-in-5s";r=4;t=1',
    });
    expect(rateFields(replies[4]!.headers)).toEqual({
      'ratelimit-policy': '"5-in-5s";q=5;w=5',
      ratelimit: '"5-in-5s";r=0;t=5',
    });
    // Refused: one token comes back after exactly 1 s of the ManualClock.
    expect(rateFields(replies[5]!.headers)).toEqual({
      'ratelimit-policy': '"5-in-5s";q=5;w=5',
      ratelimit: '"5-in-5s";r=0;t=5',
      'retry-after': '1',
    });
    expect(replies[5]!.body).toBe('Too Many Requests');
    expect(replies[5]!.headers['content-type']).toBe('text/plain; charset=utf-8');
    clock.advance(1000);
    expect((await request(port)).status).toBe(200);
    expect((await request(port)).status).toBe(429);
  });

  it('Retry-After is the exact retryAfterMs rounded up, not the window', async () => {
    const clock = new ManualClock();
    const limiter = new SlidingLog({ limit: 2, windowMs: 10_000, clock });
    const { port } = await serve(rateLimit({ limiter }));
    await request(port);
    clock.advance(4_200);
    await request(port);
    clock.advance(100);
    const refused = await request(port);
    expect(refused.status).toBe(429);
    // The first permit leaves the log at 10 000 ms: 5 700 ms from now → 6 s.
    expect(refused.headers['retry-after']).toBe('6');
    expect(refused.headers.ratelimit).toBe('"2-in-10s";r=0;t=10');
  });

  it('draft-7, draft-6 and legacy fields, exactly; false sends none but Retry-After', async () => {
    const clock = new ManualClock();
    const make = (headers: Parameters<typeof rateLimit>[0]['headers']) =>
      rateLimit({
        limiter: new FixedWindow({ limit: 100, windowMs: 10_000, clock }),
        headers,
      });
    const d7 = await serve(make('draft-7'));
    expect(rateFields((await request(d7.port)).headers)).toEqual({
      'ratelimit-policy': '100;w=10',
      ratelimit: 'limit=100, remaining=99, reset=10',
    });
    const d6 = await serve(make('draft-6'));
    expect(rateFields((await request(d6.port)).headers)).toEqual({
      'ratelimit-policy': '100;w=10',
      'ratelimit-limit': '100',
      'ratelimit-remaining': '99',
      'ratelimit-reset': '10',
    });
    const legacy = await serve(make('legacy'));
    const before = Date.now();
    const r = await request(legacy.port);
    const after = Date.now();
    const fields = rateFields(r.headers);
    expect(Object.keys(fields).sort()).toEqual([
      'x-ratelimit-limit',
      'x-ratelimit-remaining',
      'x-ratelimit-reset',
    ]);
    expect(fields['x-ratelimit-limit']).toBe('100');
    expect(fields['x-ratelimit-remaining']).toBe('99');
    const reset = Number(fields['x-ratelimit-reset']); // Unix seconds
    expect(reset).toBeGreaterThanOrEqual(Math.ceil((before + 10_000) / 1000));
    expect(reset).toBeLessThanOrEqual(Math.ceil((after + 10_000) / 1000));

    const both = await serve(make(['draft-8', 'legacy']));
    expect(Object.keys(rateFields((await request(both.port)).headers)).sort()).toEqual([
      'ratelimit',
      'ratelimit-policy',
      'x-ratelimit-limit',
      'x-ratelimit-remaining',
      'x-ratelimit-reset',
    ]);

    const none = rateLimit({
      limiter: new FixedWindow({ limit: 1, windowMs: 10_000, clock }),
      headers: false,
    });
    const n = await serve(none);
    expect(rateFields((await request(n.port)).headers)).toEqual({});
    expect(rateFields((await request(n.port)).headers)).toEqual({ 'retry-after': '10' });
  });

  it('a chain of "10/s and 1000/day" lists both policies in draft 8; older drafts the tightest', async () => {
    const clock = new ManualClock();
    const perSecond = new TokenBucket({ capacity: 10, refillPerSecond: 10, clock });
    const perDay = new FixedWindow({ limit: 1000, windowMs: 86_400_000, clock });
    const both = chain(perSecond, perDay);
    const { port } = await serve(rateLimit({ limiter: both }));
    const first = await request(port);
    expect(rateFields(first.headers)).toEqual({
      'ratelimit-policy': '"10-in-1s";q=10;w=1, "1000-in-86400s";q=1000;w=86400',
      ratelimit: '"10-in-1s";r=9;t=1, "1000-in-86400s";r=999;t=86400',
    });
    const replies = await sequence(port, 10);
    expect(replies.filter((r) => r.status === 200)).toHaveLength(9);
    const refused = replies[9]!;
    expect(refused.status).toBe(429);
    // The per-second bucket refused; the day, asked too, was not charged.
    expect(rateFields(refused.headers)).toEqual({
      'ratelimit-policy': '"10-in-1s";q=10;w=1, "1000-in-86400s";q=1000;w=86400',
      ratelimit: '"10-in-1s";r=0;t=1, "1000-in-86400s";r=990;t=86400',
      'retry-after': '1',
    });
    expect(perDay.stats('127.0.0.1').available).toBe(990);

    const old = await serve(
      rateLimit({ limiter: chain(perSecond, perDay), headers: 'draft-6', policyName: ['s', 'd'] }),
    );
    clock.advance(1000);
    expect(rateFields((await request(old.port)).headers)).toEqual({
      'ratelimit-policy': '10;w=1',
      'ratelimit-limit': '10',
      'ratelimit-remaining': '9',
      'ratelimit-reset': '1',
    });
    const named = await serve(rateLimit({ limiter: both, policyName: ['burst', 'daily'] }));
    expect((await request(named.port)).headers.ratelimit).toBe(
      '"burst";r=8;t=1, "daily";r=988;t=86399',
    );
  });

  it('a chain whose members are all spent sends the Retry-After at which the whole chain admits', async () => {
    const clock = new ManualClock();
    const perSecond = new FixedWindow({ limit: 10, windowMs: 1000, clock });
    const perDay = new FixedWindow({ limit: 10, windowMs: 86_400_000, clock });
    const { port } = await serve(rateLimit({ limiter: chain(perSecond, perDay) }));
    expect((await sequence(port, 10)).every((r) => r.status === 200)).toBe(true);
    // Both spent: the second's window ends in 1 s, the day's in 86 400 s.
    const refused = await request(port);
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBe('86400');
    expect(refused.headers.ratelimit).toBe('"10-in-1s";r=0;t=1, "10-in-86400s";r=0;t=86400');
    clock.advance(86_400_000 - 1);
    expect((await request(port)).status).toBe(429);
    clock.advance(1);
    expect((await request(port)).status).toBe(200);
  });

  it('two middlewares append their draft-8 members instead of overwriting each other', async () => {
    const clock = new ManualClock();
    const global = rateLimit({ limiter: new FixedWindow({ limit: 100, windowMs: 60_000, clock }) });
    const route = rateLimit({
      limiter: new FixedWindow({ limit: 5, windowMs: 1000, clock }),
      policyName: 'route',
    });
    const { port } = await serve(global, (app) =>
      app.get('/r', route, (_q, s) => void s.send('r')),
    );
    const r = await request(port, { path: '/r' });
    expect(r.status).toBe(200);
    expect(r.headers.ratelimit).toBe('"100-in-60s";r=99;t=60, "route";r=4;t=1');
    expect(r.headers['ratelimit-policy']).toBe('"100-in-60s";q=100;w=60, "route";q=5;w=1');
  });

  it('per-API-key limits with a key function, and a per-route cost with a permits function', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 10, windowMs: 60_000, clock });
    const { port } = await serve(
      rateLimit({
        limiter,
        key: (req) => `key:${req.headers['x-api-key']}`,
        permits: (req) => (req.url === '/expensive' ? 5 : 1),
      }),
      (app) => app.get('/expensive', (_q, s) => void s.send('costly')),
    );
    const a = { headers: { 'x-api-key': 'a' } };
    const b = { headers: { 'x-api-key': 'b' } };
    expect((await request(port, { ...a, path: '/expensive' })).status).toBe(200);
    expect((await request(port, { ...a, path: '/expensive' })).status).toBe(200);
    const third = await request(port, { ...a, path: '/expensive' });
    expect(third.status).toBe(429);
    expect(third.headers.ratelimit).toBe('"10-in-60s";r=0;t=60');
    expect((await sequence(port, 10, b)).every((r) => r.status === 200)).toBe(true);
    expect((await request(port, b)).status).toBe(429);
    expect(limiter.stats('key:a').admitted).toBe(10);
    expect(limiter.stats('key:b').admitted).toBe(10);
  });

  it('statusCode, a JSON message, a message function, onRejected and skip', async () => {
    const clock = new ManualClock();
    const json = await serve(
      rateLimit({
        limiter: new FixedWindow({ limit: 1, windowMs: 1000, clock }),
        statusCode: 503,
        message: { error: 'slow down' },
      }),
    );
    await request(json.port);
    const r = await request(json.port);
    expect(r.status).toBe(503);
    expect(r.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(JSON.parse(r.body)).toEqual({ error: 'slow down' });

    const fn = await serve(
      rateLimit({
        limiter: new FixedWindow({ limit: 1, windowMs: 1000, clock }),
        message: (req, d) => `no, ${req.headers['x-who']}; retry in ${d.retryAfterMs} ms`,
      }),
    );
    await request(fn.port);
    expect((await request(fn.port, { headers: { 'x-who': 'ann' } })).body).toBe(
      'no, ann; retry in 1000 ms',
    );

    const seen: number[] = [];
    const custom = await serve(
      rateLimit({
        limiter: new FixedWindow({ limit: 1, windowMs: 1000, clock }),
        onRejected: (_req, res, d) => {
          seen.push(d.remaining);
          res.statusCode = 418;
          res.end('teapot');
        },
        skip: (req) => req.url === '/health',
      }),
      (app) => app.get('/health', (_q, s) => void s.send('up')),
    );
    await request(custom.port);
    const refused = await request(custom.port);
    expect([refused.status, refused.body]).toEqual([418, 'teapot']);
    expect(refused.headers['retry-after']).toBe('1'); // written before onRejected
    expect(seen).toEqual([0]);
    const health = await sequence(custom.port, 3, { path: '/health' });
    expect(health.map((h) => [h.status, h.headers.ratelimit])).toEqual([
      [200, undefined],
      [200, undefined],
      [200, undefined],
    ]);
  });

  it('key and permits functions that fail go to the error handler; nothing is charged', async () => {
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() });
    const cases: [string, Parameters<typeof rateLimit>[0], RegExp][] = [
      [
        'throws',
        {
          limiter,
          key: () => {
            throw new Error('no tenant');
          },
        },
        /^no tenant$/,
      ],
      [
        'undefined',
        { limiter, key: () => undefined as never },
        /option "key" must return .*undefined/,
      ],
      ['object', { limiter, key: () => ({}) as never }, /option "key" must return .*an object/],
      ['NaN', { limiter, key: () => Number.NaN }, /option "key" must return .*NaN/],
      ['long', { limiter, key: () => 'x'.repeat(5000) }, /over 4096 bytes/],
      [
        'permits 0',
        { limiter, permits: () => 0 },
        /option "permits" must return an integer from 1 to 5.*got 0/,
      ],
      ['permits 6', { limiter, permits: () => 6 }, /from 1 to 5.*got 6/],
      [
        'permits str',
        { limiter, permits: () => '1' as never },
        /option "permits" must return an integer, got "1"/,
      ],
      [
        'async key rejects',
        { limiter, key: () => Promise.reject(new Error('lookup failed')) },
        /^lookup failed$/,
      ],
      [
        'skip not boolean',
        { limiter, skip: () => 'yes' as never },
        /option "skip" must return a boolean/,
      ],
    ];
    for (const [name, options, pattern] of cases) {
      const { port, errors } = await serve(rateLimit(options));
      const r = await request(port);
      expect(r.status, name).toBe(500);
      expect(errors, name).toHaveLength(1);
      expect((errors[0] as Error).message, name).toMatch(pattern);
    }
    expect(limiter.stats().admitted).toBe(0);
    expect(limiter.stats().rejected).toBe(0);
  });

  it('a function that throws or rejects with a value that is not an Error still goes to the error handler', async () => {
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() });
    // next(undefined), next(null), next(0) and next('') mean "go on" to Express, and
    // next('route') "skip to the next route": each would let the request through unlimited.
    const cases: [string, Parameters<typeof rateLimit>[0], unknown][] = [
      [
        'key throws undefined',
        {
          limiter,
          key: () => {
            throw undefined;
          },
        },
        undefined,
      ],
      ['async key rejects with null', { limiter, key: () => Promise.reject(null) }, null],
      [
        'key throws 0',
        {
          limiter,
          key: () => {
            throw 0;
          },
        },
        0,
      ],
      [
        "key throws ''",
        {
          limiter,
          key: () => {
            throw '';
          },
        },
        '',
      ],
      [
        "key throws 'route'",
        {
          limiter,
          key: () => {
            throw 'route';
          },
        },
        'route',
      ],
      [
        'permits throws undefined',
        {
          limiter,
          permits: () => {
            throw undefined;
          },
        },
        undefined,
      ],
    ];
    for (const [name, options, thrown] of cases) {
      let reached = 0;
      const { port, errors } = await serve(rateLimit(options), (app) =>
        app.use((_req, _res, next) => {
          reached++;
          next();
        }),
      );
      const r = await request(port);
      expect(r.status, name).toBe(500);
      expect(reached, name).toBe(0);
      expect(errors, name).toHaveLength(1);
      const error = errors[0] as Error;
      expect(error, name).toBeInstanceOf(Error);
      expect(error.message, name).toBe(
        `rateLimit: an option's function threw or rejected with ${typeof thrown === 'string' ? JSON.stringify(thrown) : String(thrown)}, not an Error`,
      );
      expect(error.cause, name).toBe(thrown);
      expect('cause' in error, name).toBe(true);
    }
    expect(limiter.stats().admitted).toBe(0);
  });

  it('an async key function and an async limiter are awaited', async () => {
    const inner = new FixedWindow({ limit: 2, windowMs: 1000, clock: new ManualClock() });
    // An asynchronous limiter, as a cluster client or a Redis limiter is.
    const remote = {
      limit: 2,
      algorithm: 'FixedWindow',
      windowMs: 1000,
      consume: async (key?: string | number, permits?: number) => inner.consume(key, permits),
    };
    const { port } = await serve(
      rateLimit({ limiter: remote, key: async (req) => `t:${req.headers['x-t']}` }),
    );
    const replies = await sequence(port, 3, { headers: { 'x-t': '1' } });
    expect(replies.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(replies[0]!.headers.ratelimit).toBe('"2-in-1s";r=1;t=1');
    expect(inner.stats('t:1').admitted).toBe(2);
  });

  it('a limiter that throws or rejects is answered 503 with Retry-After, not by the error handler', async () => {
    const failing = {
      limit: 5,
      consume: () => Promise.reject(new Error('backend down')),
    };
    const a = await serve(rateLimit({ limiter: failing }));
    const r = await request(a.port);
    expect([r.status, r.body, r.headers['retry-after']]).toEqual([503, 'Service Unavailable', '1']);
    expect(a.errors).toEqual([]);
    const throwing = {
      limit: 5,
      consume: () => {
        throw new Error('closed');
      },
    };
    const b = await serve(rateLimit({ limiter: throwing }));
    expect((await request(b.port)).status).toBe(503);
    expect(b.errors).toEqual([]);
    // Reported once each, where operators see it.
    expect(warnings.expected('ATOMIC_LIMITER_HTTP_ERROR').map((w) => w.message)).toEqual([
      'rateLimit: answered 503: backend down',
      'rateLimit: answered 503: closed',
    ]);
    // onError rethrowing hands it to Express's error handler.
    const c = await serve(
      rateLimit({
        limiter: failing,
        onError: (error) => {
          throw error;
        },
      }),
    );
    expect((await request(c.port)).body).toBe('error: backend down');
    expect(c.errors).toHaveLength(1);
  });

  it('Concurrency: permits held for the response, released once on finish, abort and throw', async () => {
    const limiter = new Concurrency({ limit: 2 });
    let inFlight = 0;
    let peak = 0;
    const gates: (() => void)[] = [];
    const { port } = await serve(rateLimit({ limiter, key: () => 'all' }), (app) => {
      app.get('/slow', (_req, res) => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        gates.push(() => {
          inFlight--;
          if (!res.destroyed) res.send('done');
        });
      });
      app.get('/throw', () => {
        throw new Error('handler failed');
      });
    });
    const all = () => limiter.stats('all').available;

    // Two slow requests hold both permits; a third is refused with no Retry-After.
    const c1 = new AbortController();
    const c2 = new AbortController();
    const p1 = request(port, { path: '/slow', signal: c1.signal }).catch((e) => e);
    const p2 = request(port, { path: '/slow', signal: c2.signal }).catch((e) => e);
    await until(() => gates.length === 2, 'two requests in the handler');
    const third = await request(port, { path: '/slow' });
    expect(third.status).toBe(429);
    expect(rateFields(third.headers)).toEqual({
      'ratelimit-policy': '"2-concurrent";q=2',
      ratelimit: '"2-concurrent";r=0',
    });
    expect(all()).toBe(0);

    // Both clients go away mid-request: both permits come back, each once.
    c1.abort();
    c2.abort();
    await Promise.all([p1, p2]);
    await until(() => all() === 2, 'permits released after the aborts');
    for (const g of gates.splice(0)) g(); // the handlers finish late: no second release
    expect(all()).toBe(2);

    // A handler that throws: Express answers 500, the permit comes back.
    const thrown = await sequence(port, 3, { path: '/throw' });
    expect(thrown.map((t) => t.status)).toEqual([500, 500, 500]);
    await until(() => all() === 2, 'released after a throw');

    // Normal finish: many requests through, never more than 2 in the handler.
    const finishing = Array.from({ length: 2 }, () => request(port, { path: '/slow' }));
    await until(() => gates.length === 2, 'two in flight');
    for (const g of gates.splice(0)) g();
    expect((await Promise.all(finishing)).map((r) => r.status)).toEqual([200, 200]);
    await until(() => all() === 2, 'released on finish');
    expect(peak).toBe(2);
    expect(limiter.stats('all').admitted).toBe(7);
  });
});

describe('rateLimit mounted twice', () => {
  it('counts a request once and writes its fields once', async () => {
    const limiter = new FixedWindow({ limit: 3, windowMs: 1000, clock: new ManualClock() });
    const limit = rateLimit({ limiter });
    const app = express();
    const router = express.Router();
    app.use(limit);
    router.use(limit);
    router.get('/', (_req, res) => {
      res.send('ok');
    });
    app.use('/r', router);
    const { port, close } = await listen(http.createServer(app));
    try {
      const replies = await sequence(port, 4, { path: '/r/' });
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
      expect(replies[0]!.headers.ratelimit).toBe('"3-in-1s";r=2;t=1');
      expect(limiter.stats('127.0.0.1').admitted).toBe(3);
    } finally {
      await close();
    }
  });
});

describe('rateLimit and the request objects', () => {
  it('adds no property to the request or the response, allowed or refused', async () => {
    // Its "seen" mark lives outside the request: adding a property to an Express request
    // costs microseconds (see core.ts), and the objects are the application's.
    const limiter = new FixedWindow({ limit: 1, windowMs: 1000, clock: new ManualClock() });
    const limit = rateLimit({ limiter, key: () => 'k' });
    const added: string[][] = [];
    const app = express();
    app.use((req, res, next) => {
      const before = new Set([...Reflect.ownKeys(req), ...Reflect.ownKeys(res)]);
      let wentOn = false;
      limit(req, res, (err?: unknown) => {
        wentOn = true;
        if (err) return next(err);
        const after = [...Reflect.ownKeys(req), ...Reflect.ownKeys(res)];
        added.push(after.filter((k) => !before.has(k)).map(String));
        next();
      });
      if (!wentOn) {
        // Refused: the response was written (Node's own fields change), the request not.
        added.push(
          Reflect.ownKeys(req)
            .filter((k) => !before.has(k))
            .map(String),
        );
      }
    });
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    const { port, close } = await listen(http.createServer(app));
    try {
      const replies = await sequence(port, 2);
      expect(replies.map((r) => r.status)).toEqual([200, 429]);
      expect(added).toEqual([[], []]);
    } finally {
      await close();
    }
  });
});

describe('rateLimit with a chain holding a Concurrency member', () => {
  it('releases the Concurrency permits after the response and keeps the rate permits spent', async () => {
    const clock = new ManualClock();
    const perMinute = new FixedWindow({ limit: 100, windowMs: 60_000, clock });
    const inFlight = new Concurrency({ limit: 1 });
    const gates: (() => void)[] = [];
    const app = express();
    app.use(rateLimit({ limiter: chain(perMinute, inFlight), key: () => 'u' }));
    app.get('/', (_req, res) => {
      gates.push(() => res.send('ok'));
    });
    const { port, close } = await listen(http.createServer(app));
    try {
      const first = request(port);
      await until(() => gates.length === 1, 'the first in the handler');
      const second = await request(port);
      expect(second.status).toBe(429);
      expect(second.headers['retry-after']).toBeUndefined(); // only a release can help
      // Its minute permit was given back when the Concurrency member refused: 99 left.
      expect(second.headers.ratelimit).toBe('"100-in-60s";r=99;t=60, "1-concurrent";r=0');
      gates.shift()!();
      expect((await first).headers.ratelimit).toBe('"100-in-60s";r=99;t=60, "1-concurrent";r=0');
      await until(() => inFlight.stats('u').available === 1, 'released after the response');
      // The refused request's minute permit was refunded by the chain; the first stays spent.
      expect(perMinute.stats('u').available).toBe(99);
    } finally {
      for (const g of gates) g();
      await close();
    }
  });

  it('held ahead of a window, its refusal lists the members up to it: the chain asks no further', async () => {
    const inFlight = new Concurrency({ limit: 1 });
    const perMinute = new FixedWindow({ limit: 100, windowMs: 60_000 });
    const app = express();
    app.use(rateLimit({ limiter: chain(inFlight, perMinute), key: () => 'u' }));
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    const { port, close } = await listen(http.createServer(app));
    try {
      inFlight.tryAcquire('u');
      expect(rateFields((await request(port)).headers)).toEqual({
        'ratelimit-policy': '"1-concurrent";q=1',
        ratelimit: '"1-concurrent";r=0',
      });
      expect(perMinute.stats('u').admitted).toBe(0);
    } finally {
      inFlight.release('u');
      await close();
    }
  });
});
