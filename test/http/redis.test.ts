import http from 'node:http';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rateLimit } from '../../src/http/index.js';
import { chain, FixedWindow, ManualClock } from '../../src/index.js';
import * as redisLimiters from '../../src/redis/index.js';
import { listen, rateFields, request, until, watchWarnings } from '../helpers/http.js';
import { RedisServer } from '../helpers/redis.js';

// The middleware in front of a Redis limiter whose server is gone, with the policies that
// answer without it (whenUnavailable 'allow' / 'deny').

watchWarnings();

describe('rateLimit in front of a Redis limiter while Redis is down', () => {
  let server: RedisServer;
  let client: Redis;
  beforeAll(async () => {
    server = await RedisServer.start();
    client = new Redis(server.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => null,
      enableOfflineQueue: false,
    });
    client.on('error', () => {});
    await new Promise((resolve) => client.once('ready', resolve));
    await server.stop();
    await until(() => client.status === 'end', 'the client gave up on Redis');
  });
  afterAll(async () => {
    client.disconnect();
    await server.close();
  });

  it("whenUnavailable 'deny' with wait: refused at once with 429 and its Retry-After, as without wait", async () => {
    const limiter = new redisLimiters.TokenBucket({
      redis: client,
      prefix: 'http-deny',
      capacity: 5,
      refillPerSecond: 1,
      queueLimit: 10,
      timeoutMs: 2000,
      whenUnavailable: 'deny',
    });
    const closers: (() => Promise<void>)[] = [];
    try {
      const replies = [];
      for (const wait of [false, { timeoutMs: 30_000 }] as const) {
        const limit = rateLimit({ limiter, key: () => 'k', wait });
        const s = await listen(
          http.createServer(async (req, res) => {
            if (await limit(req, res)) res.end('ok');
          }),
        );
        closers.push(s.close);
        replies.push(await request(s.port));
      }
      // The refusal of the 'deny' policy: retry once Redis may answer (its timeoutMs). No
      // queue can help while Redis is away, and the limiter did not fail: no 503, no warning.
      for (const r of replies) {
        expect([r.status, r.body, rateFields(r.headers)['retry-after']]).toEqual([
          429,
          'Too Many Requests',
          '2',
        ]);
      }
    } finally {
      for (const c of closers) await c();
      limiter.close();
    }
  });

  it("a chain refused by a 'deny' member and by a spent one in memory: refused at once under wait too", async () => {
    const remote = new redisLimiters.FixedWindow({
      redis: client,
      prefix: 'http-deny-chain',
      limit: 5,
      windowMs: 60_000,
      queueLimit: 10,
      timeoutMs: 2000,
      whenUnavailable: 'deny',
    });
    const local = new FixedWindow({
      limit: 1,
      windowMs: 10_000,
      queueLimit: 10,
      clock: new ManualClock(),
    });
    local.tryAcquire('k');
    const limit = rateLimit({ limiter: chain(remote, local), key: () => 'k', wait: true });
    const s = await listen(
      http.createServer(async (req, res) => {
        if (await limit(req, res)) res.end('ok');
      }),
    );
    try {
      // The chain admits when both do: the spent window, in 10 s.
      const r = await request(s.port);
      expect([r.status, r.body, rateFields(r.headers)['retry-after']]).toEqual([
        429,
        'Too Many Requests',
        '10',
      ]);
    } finally {
      await s.close();
      remote.close();
    }
  });
});

describe('rateLimit with wait in front of a Redis limiter', () => {
  let server: RedisServer;
  let client: Redis;
  beforeAll(async () => {
    server = await RedisServer.start();
    client = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
  });
  afterAll(async () => {
    client.disconnect();
    await server.close();
  });

  it('a request that finds the queue full is refused at once with the fields of its refusal, though Redis answered it', async () => {
    const clock = new ManualClock();
    const limiter = new redisLimiters.TokenBucket({
      redis: client,
      prefix: 'http-full',
      capacity: 1,
      refillPerSecond: 0.2,
      queueLimit: 1,
      clock,
    });
    const limit = rateLimit({ limiter, key: () => 'k', wait: { timeoutMs: 60_000 } });
    const outcomes: boolean[] = [];
    const s = await listen(
      http.createServer(async (req, res) => {
        const go = await limit(req, res);
        outcomes.push(go);
        if (go) res.end('ok');
      }),
    );
    try {
      expect((await request(s.port)).status).toBe(200);
      const leave = new AbortController();
      const waiting = request(s.port, { signal: leave.signal }).catch((e: Error) => e.name);
      // Its place in the queue is a reservation in Redis: counted as admitted at once.
      while ((await limiter.stats('k')).admitted !== 2) await new Promise((r) => setImmediate(r));
      // Next after the waiter, whose reservation holds the bucket until 10 s: in 10 s.
      const full = await request(s.port);
      expect([full.status, rateFields(full.headers)]).toEqual([
        429,
        {
          'ratelimit-policy': '"1-in-5s";q=1;w=5',
          ratelimit: '"1-in-5s";r=0;t=10',
          'retry-after': '10',
        },
      ]);
      leave.abort();
      expect(await waiting).toBe('AbortError');
      await until(() => outcomes.length === 3, 'the waiter gone');
      expect(outcomes).toEqual([true, false, false]);
    } finally {
      await s.close();
      limiter.close();
    }
  });
});
