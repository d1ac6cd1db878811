import { Redis } from 'ioredis';
import * as nodeRedis5 from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Concurrency } from '../../src/redis/index.js';
import { freePort, RedisProxy, RedisServer } from '../helpers/redis.js';

// A Redis Concurrency whose calls meet faults gives back what nobody holds, and its waiters
// never sleep on a message that will not come.

/** Polls `f` until it holds, at most `tries` times, 20 ms apart (Redis round trips). */
async function until(f: () => Promise<boolean>, tries = 250): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await f()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

describe('Redis Concurrency under faults', () => {
  let server: RedisServer;
  let admin: Redis;
  beforeAll(async () => {
    server = await RedisServer.start();
    admin = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.close();
  });

  async function viaProxy() {
    const px = await RedisProxy.start(server.port);
    const c = new Redis(px.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => 20,
    });
    c.on('error', () => {});
    return { px, c };
  }

  for (const [policy, call] of [
    ['throw', 'tryAcquire'],
    ['deny', 'consume'],
    ['allow', 'acquire'],
  ] as const) {
    it(`a grant whose reply was lost (${call}, '${policy}') is freed by its id once Redis answers, not at leaseMs`, async () => {
      const { px, c } = await viaProxy();
      const prefix = `lost-${call}`;
      const sem = new Concurrency({
        redis: c,
        limit: 2,
        leaseMs: 60_000,
        timeoutMs: 500,
        whenUnavailable: policy,
        prefix,
      });
      const view = new Concurrency({ redis: admin, limit: 2, prefix });
      try {
        expect(await sem.tryAcquire('warm')).toBe(true); // loaded: one EVALSHA per call
        px.cutReplyOf('{k}');
        const answer =
          call === 'tryAcquire'
            ? await sem.tryAcquire('k').catch((e) => e.name)
            : call === 'consume'
              ? (await sem.consume('k')).reason
              : await sem.acquire('k').then(() => 'a lease');
        expect(answer).toBe(
          call === 'tryAcquire'
            ? 'BackendUnavailableError'
            : call === 'consume'
              ? 'unavailable'
              : 'a lease',
        );
        // Redis granted it (the reply went missing, not the command): held, then freed.
        expect(await until(async () => (await view.stats('k')).available === 2)).toBe(true);
      } finally {
        await sem.close();
        c.disconnect();
        px.close();
      }
    });
  }

  it('a lease whose release() failed once can be released again', async () => {
    const { px, c } = await viaProxy();
    const sem = new Concurrency({ redis: c, limit: 1, timeoutMs: 300, prefix: 'again' });
    try {
      const lease = await sem.acquire('k');
      px.partition();
      await expect(lease.release()).rejects.toMatchObject({ name: 'BackendUnavailableError' });
      px.heal();
      expect(
        await until(() =>
          lease.release().then(
            () => true,
            () => false,
          ),
        ),
      ).toBe(true);
      expect((await sem.stats('k')).available).toBe(1);
      await lease.release(); // done: the same answer again
    } finally {
      await sem.close();
      c.disconnect();
      px.close();
    }
  });

  it('a waiter whose key was wiped without a release message gets it long before the lease expires', async () => {
    const c = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    const sem = new Concurrency({
      redis: c,
      limit: 1,
      leaseMs: 60_000,
      queueLimit: 1,
      prefix: 'wiped',
    });
    try {
      expect(await sem.tryAcquire('k')).toBe(true);
      const waiting = sem.acquire('k', 1, { timeoutMs: 20_000 });
      expect(await until(async () => (await sem.stats('k')).queued === 1)).toBe(true);
      // A restart without persistence, or FLUSHALL: the key is gone, and nobody publishes.
      await admin.flushall();
      const lease = await waiting;
      expect((await sem.stats('k')).available).toBe(0);
      await lease.release();
      expect((await sem.stats('k')).available).toBe(1);
    } finally {
      await sem.close();
      c.disconnect();
    }
  }, 30_000);

  for (const kind of ['ioredis', 'node-redis'] as const) {
    it(`${kind}: close() while the Pub/Sub connection cannot reach Redis closes it, and settles`, async () => {
      // The subscriber's own connection finds Redis down (here: a port nobody listens on)
      // and keeps trying, its SUBSCRIBE waiting.
      const dead = await freePort();
      let connects = 0;
      let subscriber: { disconnect(): unknown } | undefined;
      let redis: unknown;
      let client: { disconnect(): unknown };
      if (kind === 'ioredis') {
        const c = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
        (c as unknown as { duplicate(): Redis }).duplicate = () => {
          const sub = new Redis(dead, '127.0.0.1', {
            retryStrategy: () => 20,
            maxRetriesPerRequest: null,
          });
          sub.on('error', () => {});
          sub.on('reconnecting', () => connects++);
          subscriber = sub;
          return sub;
        };
        redis = c;
        client = c;
      } else {
        const c = nodeRedis5.createClient({ url: `redis://127.0.0.1:${server.port}` });
        await c.connect();
        (c as unknown as { duplicate(): unknown }).duplicate = () => {
          const sub = nodeRedis5.createClient({
            url: `redis://127.0.0.1:${dead}`,
            socket: { reconnectStrategy: () => 20 },
          });
          sub.on('error', () => {});
          sub.on('reconnecting', () => connects++);
          // (Destroyed by the limiter already when it closed it.)
          subscriber = { disconnect: () => sub.isOpen && sub.destroy() };
          return sub;
        };
        redis = c;
        client = { disconnect: () => c.destroy() };
      }
      const sem = new Concurrency({
        redis,
        limit: 1,
        queueLimit: 1,
        prefix: `sub-${kind}`,
      });
      try {
        expect(await sem.tryAcquire('k')).toBe(true);
        const waiting = sem.acquire('k').catch((e: Error) => e.name);
        expect(await until(async () => connects >= 2)).toBe(true);
        await sem.close();
        expect(await waiting).toBe('LimiterClosedError');
        // Closed: it tries no more (a connection trying for good keeps the process alive).
        await new Promise((r) => setTimeout(r, 50)); // a try under way when it closed
        const seen = connects;
        await new Promise((r) => setTimeout(r, 200)); // ten retry delays
        expect(connects).toBe(seen);
      } finally {
        subscriber?.disconnect();
        client.disconnect();
      }
    });
  }

  it('a waiter tries again after its Pub/Sub connection comes back', async () => {
    const c = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    const sem = new Concurrency({
      redis: c,
      limit: 1,
      leaseMs: 60_000,
      queueLimit: 1,
      prefix: 'resub',
    });
    try {
      expect(await sem.tryAcquire('k')).toBe(true);
      const waiting = sem.acquire('k', 1, { timeoutMs: 20_000 });
      expect(await until(async () => (await sem.stats('k')).queued === 1)).toBe(true);
      // The key freed while the subscriber is gone: its message reaches nobody.
      await admin.client('KILL', 'TYPE', 'pubsub');
      await sem.release('k');
      const lease = await waiting;
      await lease.release();
      expect((await sem.stats('k')).available).toBe(1);
    } finally {
      await sem.close();
      c.disconnect();
    }
  }, 30_000);
});
