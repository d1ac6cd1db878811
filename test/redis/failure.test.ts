import { Redis } from 'ioredis';
import * as nodeRedis from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendUnavailableError, TokenBucket as MemoryBucket } from '../../src/index.js';
import { Concurrency, TokenBucket } from '../../src/redis/index.js';
import { RedisServer } from '../helpers/redis.js';

// Redis killed in the middle of a run: each whenUnavailable policy does what it says, a
// refund or release that cannot reach Redis rejects, nothing hangs, and once Redis is back
// the same limiter works again without a restart.

const CLIENTS: [string, (port: number) => Promise<{ client: unknown; close(): void }>][] = [
  [
    'ioredis',
    async (port) => {
      const c = new Redis(port, '127.0.0.1', {
        autoResendUnfulfilledCommands: false,
        retryStrategy: () => 50,
      });
      c.on('error', () => {});
      return { client: c, close: () => c.disconnect() };
    },
  ],
  [
    'node-redis',
    async (port) => {
      const c = nodeRedis.createClient({
        url: `redis://127.0.0.1:${port}`,
        socket: { reconnectStrategy: () => 50 },
      });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => void c.destroy() };
    },
  ],
];

async function eventually<T>(f: () => Promise<T>): Promise<T> {
  let last: unknown;
  for (let i = 0; i < 200; i++) {
    try {
      return await f();
    } catch (error) {
      last = error;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw last;
}

describe('Redis goes away and comes back', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });

  for (const [name, connect] of CLIENTS) {
    it(`${name}: each policy answers while Redis is down, and all recover`, async () => {
      const { client, close } = await connect(server.port);
      try {
        const common = { redis: client, capacity: 3, refillPerSecond: 1e-6, timeoutMs: 200 };
        const thrower = new TokenBucket({ ...common, prefix: `${name}-throw` });
        const allower = new TokenBucket({
          ...common,
          prefix: `${name}-allow`,
          whenUnavailable: 'allow',
        });
        const denier = new TokenBucket({
          ...common,
          prefix: `${name}-deny`,
          whenUnavailable: 'deny',
        });
        const local = new MemoryBucket({ capacity: 2, refillPerSecond: 1e-6 });
        const insured = new TokenBucket({
          ...common,
          prefix: `${name}-local`,
          whenUnavailable: local,
        });
        const conc = new Concurrency({ redis: client, limit: 2, timeoutMs: 200, prefix: name });
        for (const l of [thrower, allower, denier, insured]) {
          expect(await l.consume('k')).toMatchObject({ allowed: true, remaining: 2, limit: 3 });
        }
        expect(await conc.tryAcquire('k')).toBe(true);

        await server.stop();

        const thrown = await thrower.consume('k').then(
          () => undefined,
          (e) => e,
        );
        expect(thrown).toBeInstanceOf(BackendUnavailableError);
        expect(thrown.code).toBe('ERR_BACKEND_UNAVAILABLE');
        expect(thrown.cause).toBeDefined();
        await expect(thrower.tryAcquire('k')).rejects.toBeInstanceOf(BackendUnavailableError);
        await expect(thrower.acquire('k')).rejects.toBeInstanceOf(BackendUnavailableError);
        expect(await allower.consume('k')).toMatchObject({ allowed: true, reason: 'unavailable' });
        expect(await denier.consume('k')).toMatchObject({ allowed: false, reason: 'unavailable' });
        // The local limiter decides in Redis's place: its own capacity of 2.
        const locally = [];
        for (let i = 0; i < 3; i++) locally.push(await insured.consume('k'));
        expect(locally.map((d) => d.allowed)).toEqual([true, true, false]);
        expect(locally[2]!.reason).toBe('limited');
        // Give-backs are never dropped silently.
        await expect(thrower.refund('k')).rejects.toBeInstanceOf(BackendUnavailableError);
        await expect(allower.refund('k')).rejects.toBeInstanceOf(BackendUnavailableError);
        await expect(conc.release('k')).rejects.toBeInstanceOf(BackendUnavailableError);
        await expect(thrower.stats('k')).rejects.toBeInstanceOf(BackendUnavailableError);

        await server.up();

        // Same limiter objects, no restart. The restarted server lost its data (no
        // persistence), so every key is fresh again.
        const back = await eventually(() => thrower.consume('k'));
        expect(back).toMatchObject({ allowed: true, remaining: 2 });
        expect(back.reason).toBeUndefined();
        expect(await allower.consume('k')).toMatchObject({ allowed: true, remaining: 2 });
        expect((await allower.consume('k')).reason).toBeUndefined();
        expect(await denier.consume('k')).toMatchObject({ allowed: true, remaining: 2 });
        expect(await conc.tryAcquire('k')).toBe(true);
        await conc.release('k');
        await conc.close();
      } finally {
        close();
      }
    });
  }

  it('a script error is an error naming the script, never an allow, whatever the policy', async () => {
    const redis = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    try {
      const l = new TokenBucket({
        redis,
        capacity: 3,
        refillPerSecond: 1,
        prefix: 'broken',
        whenUnavailable: 'allow',
      });
      // Another program wrote a list where the limiter keeps its state.
      const [key] = l.redisKeys('k');
      await redis.lpush(key!, 'not a bucket');
      for (const call of [() => l.consume('k'), () => l.tryAcquire('k'), () => l.stats('k')]) {
        const error = await call().then(
          () => undefined,
          (e) => e,
        );
        expect(error).toBeInstanceOf(Error);
        expect(error).not.toBeInstanceOf(BackendUnavailableError);
        expect(error.message).toMatch(/script atomic-limiter:gcra(-try)? failed: WRONGTYPE/);
      }
    } finally {
      redis.disconnect();
    }
  });
});

describe('Redis persistence', () => {
  it('with appendonly yes and appendfsync always, a kill -9 and restart keep every count', async () => {
    const server = await RedisServer.start(['--appendonly', 'yes', '--appendfsync', 'always']);
    const redis = new Redis(server.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => 50,
    });
    redis.on('error', () => {});
    try {
      const l = new TokenBucket({ redis, capacity: 10, refillPerSecond: 1e-6, prefix: 'aof' });
      for (let i = 0; i < 7; i++) expect(await l.tryAcquire('k')).toBe(true);
      await server.stop(); // SIGKILL
      await server.up();
      const back = await eventually(() => l.stats('k'));
      expect(back).toMatchObject({ available: 3, admitted: 7 });
      expect(await l.tryAcquire('k', 4)).toBe(false);
    } finally {
      redis.disconnect();
      await server.close();
    }
  });
});
