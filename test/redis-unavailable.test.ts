import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AcquireOptions } from '../src/index.js';
import { TokenBucket as MemoryBucket } from '../src/index.js';
import { TokenBucket } from '../src/redis/index.js';
import { RedisProxy, RedisServer } from './helpers/redis.js';

// What a call does while Redis cannot answer: the policy, within the caller's deadline.

describe('whenUnavailable within one deadline', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });

  it('acquire({ timeoutMs }) with a fallback limiter: the fallback gets what the Redis wait left, and none once it is spent', async () => {
    const px = await RedisProxy.start(server.port);
    const c = new Redis(px.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    c.on('error', () => {});
    const local = new MemoryBucket({ capacity: 5, refillPerSecond: 1, queueLimit: 5 });
    const given: (number | undefined)[] = [];
    // The local limiter itself, its acquire() options seen on the way.
    const fallback = {
      consume: (key?: string, permits?: number) => local.consume(key, permits),
      acquire: (key?: string, permits?: number, options?: AcquireOptions) => {
        given.push(options?.timeoutMs);
        return local.acquire(key, permits, options);
      },
    };
    const bucket = new TokenBucket({
      redis: c,
      capacity: 5,
      refillPerSecond: 1,
      timeoutMs: 300,
      whenUnavailable: fallback,
      prefix: 'deadline',
    });
    try {
      await bucket.consume('warm');
      // Redis answers nothing: each Redis wait lasts its 300 ms.
      px.hang();
      const lease = await bucket.acquire('k', 1, { timeoutMs: 2000 });
      lease.release();
      expect(given).toHaveLength(1);
      expect(given[0]).toBeGreaterThan(0);
      expect(given[0]).toBeLessThanOrEqual(2000 - 300);
      // A deadline the Redis wait spends whole: a TimeoutError, the fallback never asked.
      await expect(bucket.acquire('k', 1, { timeoutMs: 100 })).rejects.toMatchObject({
        name: 'TimeoutError',
      });
      expect(given).toHaveLength(1);
    } finally {
      px.heal();
      await bucket.close();
      c.disconnect();
      px.close();
    }
  });
});
