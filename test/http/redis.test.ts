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
