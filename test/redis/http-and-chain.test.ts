import http from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { fastifyRateLimit, type RateLimitOptions, rateLimit } from '../../src/http/index.js';
import { chain, FixedWindow, ManualClock, TokenBucket } from '../../src/index.js';
import * as redisLimiters from '../../src/redis/index.js';
import { listen, rateFields, request, sequence, until, watchWarnings } from '../helpers/http.js';
import { RedisProxy, RedisServer, withRedisServer } from '../helpers/redis.js';

const warnings = watchWarnings();

/** Resolves once `check()` holds (polled every 10 ms, up to 10 s). */
async function eventually(check: () => boolean): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('never happened');
}

// The parts together: a Redis limiter behind the HTTP middleware, and chain()
// mixing a Redis limiter with an in-memory one, against a real redis-server.

describe('Redis limiters with chain() and the HTTP middleware', () => {
  let redis: Redis;
  withRedisServer((_server, r) => {
    redis = r;
  });

  it('Express in front of a Redis TokenBucket: exactly 5 × 200, then 429 with the exact Retry-After', async () => {
    const clock = new ManualClock();
    const limiter = new redisLimiters.TokenBucket({
      redis,
      prefix: 'http-test',
      capacity: 5,
      refillPerSecond: 1,
      clock,
    });
    const app = express();
    const errors: unknown[] = [];
    app.use(rateLimit({ limiter, key: () => 'one-client' }));
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
      errors.push(err);
      res.status(500).send('error');
    });
    const { port, close } = await listen(http.createServer(app));
    try {
      const replies = await sequence(port, 7);
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);
      expect(rateFields(replies[5]!.headers)).toEqual({
        'ratelimit-policy': '"5-in-5s";q=5;w=5',
        ratelimit: '"5-in-5s";r=0;t=5',
        'retry-after': '1',
      });
      expect(errors).toEqual([]);
    } finally {
      await close();
      limiter.close();
    }
  });

  it('wait with a Redis Concurrency: a lease that cannot be given back (Redis gone) is a warning, not a crash', async () => {
    // A server of its own, stopped while a request that waited for its lease is in its
    // handler; a client that does not reconnect, so the release fails at once.
    const lone = await RedisServer.start();
    const client = new Redis(lone.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => null,
    });
    client.on('error', () => {});
    const limiter = new redisLimiters.Concurrency({
      redis: client,
      prefix: 'http-wait-test',
      limit: 1,
      queueLimit: 4,
    });
    const gates: (() => void)[] = [];
    const app = express();
    const errors: unknown[] = [];
    app.use(rateLimit({ limiter, key: () => 'k', wait: { timeoutMs: 30_000 } }));
    app.get('/', (_req, res) => {
      gates.push(() => res.send('ok'));
    });
    app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
      errors.push(err);
      res.status(500).send('error');
    });
    const { port, close } = await listen(http.createServer(app));
    try {
      const first = request(port);
      await until(() => gates.length === 1, 'the first request in its handler');
      const waited = request(port);
      // The second waits for the first's lease: released when the first response closes.
      while ((await limiter.stats('k')).queued !== 1) await new Promise((r) => setImmediate(r));
      gates.shift()!();
      expect((await first).status).toBe(200);
      await until(() => gates.length === 1, 'the waited request in its handler');
      await lone.stop();
      await until(() => client.status === 'end', 'the client gave up on Redis');
      gates.shift()!();
      expect((await waited).status).toBe(200);
      const failed = () => warnings.expected('ATOMIC_LIMITER_RELEASE_FAILED');
      await until(() => failed().length > 0, 'the failed release reported');
      expect(failed()).toHaveLength(1);
      expect(failed()[0]!.message).toMatch(
        /permits could not be given back: .*Redis is unavailable/,
      );
      expect(errors).toEqual([]);
    } finally {
      for (const g of gates) g();
      await close();
      limiter.close();
      client.disconnect();
      await lone.close();
    }
  });

  it('chain(redis, memory) grants from both or neither, and answers with a promise', async () => {
    const clock = new ManualClock();
    const shared = new redisLimiters.FixedWindow({
      redis,
      prefix: 'chain-test',
      limit: 3,
      windowMs: 60_000,
      clock,
    });
    const local = new FixedWindow({ limit: 5, windowMs: 60_000, clock });
    const both = chain(local, shared);
    const decisions = [];
    for (let i = 0; i < 5; i++) {
      const d = both.consume('k');
      expect(d).toBeInstanceOf(Promise);
      decisions.push(await d);
    }
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, false, false]);
    expect(decisions[0]!.decisions).toHaveLength(2);
    // The refused attempts gave the in-memory window its permits back.
    expect(local.stats('k')).toMatchObject({ available: 2 });
    expect(await shared.stats('k')).toMatchObject({ available: 0 });
    expect(decisions[3]).toMatchObject({ allowed: false, reason: 'limited', limit: 3 });
    shared.close();
  });

  it('Redis down: Express, Fastify and node:http answer 503 with Retry-After and no stack trace; onError can take over', async () => {
    const lone = await RedisServer.start();
    const client = new Redis(lone.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => null,
      enableOfflineQueue: false,
    });
    client.on('error', () => {});
    await new Promise((resolve) => client.once('ready', resolve));
    const limiter = new redisLimiters.TokenBucket({
      redis: client,
      prefix: 'http-down-test',
      capacity: 5,
      refillPerSecond: 1,
    });
    const closers: (() => Promise<void>)[] = [];
    try {
      const expressErrors: unknown[] = [];
      const app = express();
      app.get('/', rateLimit({ limiter, key: () => 'k' }));
      const logged: string[] = [];
      app.get(
        '/logged',
        rateLimit({ limiter, key: () => 'k', onError: (e) => void logged.push(e.name) }),
      );
      app.get('/open', rateLimit({ limiter, key: () => 'k', onError: () => true }));
      app.get(/.*/, (_req, res) => {
        res.send('ok');
      });
      app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
        expressErrors.push(err);
        res.status(500).send('error');
      });
      const e = await listen(http.createServer(app));
      closers.push(e.close);

      const fastify = Fastify();
      await fastify.register(fastifyRateLimit, { limiter, key: () => 'k' });
      fastify.get('/', async () => 'ok');
      await fastify.listen({ port: 0, host: '127.0.0.1' });
      closers.push(() => fastify.close());
      const fastifyPort = (fastify.server.address() as { port: number }).port;

      const limit = rateLimit({ limiter, key: () => 'k' });
      const n = await listen(
        http.createServer(async (req, res) => {
          if (await limit(req, res)) res.end('ok');
        }),
      );
      closers.push(n.close);

      // Up: each serves.
      for (const port of [e.port, fastifyPort, n.port])
        expect((await request(port)).status).toBe(200);
      await lone.stop();
      await until(() => client.status === 'end', 'the client gave up on Redis');
      for (const port of [e.port, fastifyPort, n.port]) {
        const r = await request(port);
        expect([r.status, r.headers['retry-after'], r.body]).toEqual([
          503,
          '1',
          'Service Unavailable',
        ]);
      }
      expect(expressErrors).toEqual([]);
      // onError that only logs: still the 503; one that returns true lets the request on.
      expect((await request(e.port, { path: '/logged' })).status).toBe(503);
      expect(logged).toEqual(['BackendUnavailableError']);
      expect((await request(e.port, { path: '/open' })).status).toBe(200);
      // Once per message per middleware, where operators see it.
      const reported = warnings.expected('ATOMIC_LIMITER_HTTP_ERROR');
      expect(reported.map((w) => w.message.replace(/: Redis is unavailable.*/, ''))).toEqual([
        'rateLimit: answered 503: TokenBucket',
        'fastifyRateLimit: answered 503: TokenBucket',
        'rateLimit: answered 503: TokenBucket',
      ]);
    } finally {
      for (const c of closers) await c();
      limiter.close();
      client.disconnect();
      await lone.close();
    }
  });

  it('refundWhen gives a Redis limiter its permits back when the response finishes', async () => {
    const clock = new ManualClock();
    const limiter = new redisLimiters.SlidingWindow({
      redis,
      prefix: 'http-refund-test',
      limit: 2,
      windowMs: 60_000,
      clock,
    });
    const limit = rateLimit({
      limiter,
      key: () => 'u',
      refundWhen: (_req, res) => res.statusCode < 400,
    });
    const server = http.createServer(async (req, res) => {
      if (!(await limit(req, res))) return;
      res.statusCode = req.headers['x-fail'] ? 401 : 200;
      res.end();
    });
    const { port, close } = await listen(server);
    try {
      for (let i = 0; i < 4; i++) {
        expect((await request(port)).status).toBe(200);
        // Each success back before the next request.
        while ((await limiter.stats('u')).available !== 2) {
          await new Promise((r) => setImmediate(r));
        }
      }
      const failing = { headers: { 'x-fail': '1' } };
      expect((await sequence(port, 3, failing)).map((r) => r.status)).toEqual([401, 401, 429]);
    } finally {
      await close();
      limiter.close();
    }
  });

  it('a chain with a Redis member refuses with the time at which every member admits, in either order', async () => {
    const clock = new ManualClock();
    const remote = new redisLimiters.FixedWindow({
      redis,
      prefix: 'chain-retry-test',
      limit: 1,
      windowMs: 60_000,
      clock,
    });
    const local = new FixedWindow({ limit: 1, windowMs: 1000, clock });
    expect((await remote.consume('k')).allowed).toBe(true);
    expect(local.tryAcquire('k')).toBe(true);
    for (const both of [chain(local, remote), chain(remote, local)]) {
      const d = await both.consume('k');
      expect(d).toMatchObject({ allowed: false, retryAfterMs: 60_000 });
      expect(d.decisions.map((x) => x.retryAfterMs).sort((a, b) => a - b)).toEqual([1000, 60_000]);
    }
    // A member that grants while another refuses gives its permit back (Redis too).
    clock.advance(1000);
    const d = await chain(local, remote).consume('k');
    expect(d.allowed).toBe(false);
    expect(local.stats('k').available).toBe(1);
    remote.close();
  });

  /**
   * A Redis TokenBucket of capacity 2 whose two permits Redis spent, on a client that reaches
   * its own server through a proxy, with an in-memory bucket as whenUnavailable.
   */
  async function spentBehindProxy(prefix: string, fallbackClock?: ManualClock) {
    const server = await RedisServer.start();
    const proxy = await RedisProxy.start(server.port);
    const client = new Redis(proxy.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => 20,
    });
    client.on('error', () => {});
    const clock = new ManualClock();
    const fallback = new TokenBucket({
      capacity: 5,
      refillPerSecond: 1,
      clock: fallbackClock ?? clock,
      queueLimit: 10,
    });
    const remote = new redisLimiters.TokenBucket({
      redis: client,
      prefix,
      capacity: 2,
      refillPerSecond: 1,
      clock,
      timeoutMs: 300,
      whenUnavailable: fallback,
      queueLimit: 10,
    });
    for (let i = 0; i < 2; i++) expect((await remote.consume('k')).allowed).toBe(true);
    return {
      remote,
      fallback,
      clock,
      proxy,
      /** Heals the proxy; resolves once Redis answers (stats() never falls back). */
      async heal() {
        proxy.heal();
        for (;;) {
          try {
            await remote.stats('k');
            return;
          } catch {
            await new Promise((r) => setTimeout(r, 20));
          }
        }
      },
      async close() {
        remote.close();
        client.disconnect();
        proxy.close();
        await server.close();
      },
    };
  }

  /**
   * A node:http server whose requests on key 'k' of `options.limiter` answer 500 once
   * `open()` is called (refundWhen: a 5xx), `admitted` resolving when one is in its handler.
   */
  async function failingServer(
    options: Pick<RateLimitOptions<http.IncomingMessage, http.ServerResponse>, 'limiter' | 'wait'>,
  ) {
    let entered: () => void = () => {};
    const admitted = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let open: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const limit = rateLimit({
      ...options,
      key: () => 'k',
      refundWhen: (_req, res) => res.statusCode >= 500,
    });
    const s = await listen(
      http.createServer(async (req, res) => {
        if (!(await limit(req, res))) return;
        entered();
        await gate;
        res.statusCode = 500;
        res.end('failed');
      }),
    );
    return { ...s, admitted, open };
  }

  it('refundWhen gives nothing back to Redis for a request its whenUnavailable limiter admitted: Redis never charged it', async () => {
    const r = await spentBehindProxy('fallback-refund');
    const s = await failingServer({ limiter: r.remote });
    try {
      r.proxy.partition();
      // While Redis is away the fallback admits the request; it is in its handler.
      const reply = request(s.port);
      await s.admitted;
      await r.heal();
      s.open();
      expect((await reply).status).toBe(500);
      // The refund, had one gone out at the response's end, went before this call on the
      // same connection: the key is still spent in Redis.
      const after = await r.remote.consume('k');
      expect([after.allowed, after.remaining]).toEqual([false, 0]);
    } finally {
      s.open();
      await s.close();
      await r.close();
    }
  });

  it('a chain refused after its Redis member was answered by the whenUnavailable limiter gives Redis nothing back', async () => {
    const r = await spentBehindProxy('fallback-chain');
    const spent = new FixedWindow({ limit: 1, windowMs: 60_000, clock: r.clock });
    try {
      expect(spent.tryAcquire('k')).toBe(true);
      r.proxy.partition();
      const d = await chain(r.remote, spent).consume('k');
      expect([d.allowed, d.decisions.map((x) => [x.allowed, x.reason])]).toEqual([
        false,
        [
          [true, 'unavailable'],
          [false, 'limited'],
        ],
      ]);
      await r.heal();
      // Redis never charged the chain's call: the key is as spent as before it.
      const after = await r.remote.consume('k');
      expect([after.allowed, after.remaining]).toEqual([false, 0]);
    } finally {
      await r.close();
    }
  });

  it('a chain.acquire() that fails after its Redis member was answered by the whenUnavailable limiter gives Redis nothing back', async () => {
    const r = await spentBehindProxy('fallback-chain-acquire');
    const spent = new FixedWindow({ limit: 1, windowMs: 60_000, clock: r.clock, queueLimit: 10 });
    try {
      expect(spent.tryAcquire('k')).toBe(true);
      r.proxy.partition();
      // The Redis member's wait falls back once Redis is found away; then the window's
      // wait times out, and the chain rolls its Redis member back: with Redis there again.
      const waiting = chain(r.remote, spent).acquire('k', 1, { timeoutMs: 3000 });
      const outcome = waiting.then(
        () => 'granted',
        (e: Error) => e.name,
      );
      await eventually(() => r.fallback.stats('k').available === 4);
      await r.heal();
      expect(await outcome).toBe('TimeoutError');
      // Redis never charged the chain's call: the key is as spent as before it.
      const after = await r.remote.consume('k');
      expect([after.allowed, after.remaining]).toEqual([false, 0]);
    } finally {
      await r.close();
    }
  });

  it('refundWhen gives nothing back to Redis for a request that waited and was admitted by its whenUnavailable limiter', async () => {
    const fallbackClock = new ManualClock();
    const r = await spentBehindProxy('fallback-wait-refund', fallbackClock);
    const s = await failingServer({ limiter: r.remote, wait: { timeoutMs: 3000 } });
    try {
      // The fallback is spent too: the request is refused by it, waits, and the wait is
      // granted by the fallback once its clock moves (Redis still away).
      for (let i = 0; i < 5; i++) expect(r.fallback.tryAcquire('k')).toBe(true);
      r.proxy.partition();
      const reply = request(s.port);
      await eventually(() => r.fallback.stats('k').queued === 1);
      fallbackClock.advance(1000);
      await s.admitted;
      await r.heal();
      s.open();
      expect((await reply).status).toBe(500);
      const after = await r.remote.consume('k');
      expect([after.allowed, after.remaining]).toEqual([false, 0]);
    } finally {
      s.open();
      await s.close();
      await r.close();
    }
  });
});
