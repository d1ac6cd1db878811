import { Redis } from 'ioredis';
import IoRedis6 from 'ioredis-v6';
import * as nodeRedis5 from 'redis';
import * as nodeRedis6 from 'redis-v6';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AcquireOptions, Decision } from '../../src/index.js';
import { LimiterClosedError, TokenBucket as MemoryBucket } from '../../src/index.js';
import { Concurrency, TokenBucket } from '../../src/redis/index.js';
import { cli, RedisCluster, RedisProxy, RedisServer } from '../helpers/redis.js';

/** EVALSHA and EVAL calls a server has run since its last CONFIG RESETSTAT. */
async function scriptCalls(port: number): Promise<number> {
  const info = await cli(port, 'INFO', 'commandstats');
  let n = 0;
  for (const m of info.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)) n += Number(m[1]);
  return n;
}

type Connect = (port: number) => Promise<{ client: unknown; close(): void }>;

const CLIENTS: [string, Connect][] = [
  [
    'ioredis 5',
    async (port) => {
      const c = new Redis(port, '127.0.0.1', {
        autoResendUnfulfilledCommands: false,
        retryStrategy: () => 20,
      });
      c.on('error', () => {});
      return { client: c, close: () => c.disconnect() };
    },
  ],
  [
    'ioredis 6',
    async (port) => {
      const c = new IoRedis6.Redis(port, '127.0.0.1', {
        autoResendUnfulfilledCommands: false,
        retryStrategy: () => 20,
      });
      c.on('error', () => {});
      return { client: c, close: () => c.disconnect() };
    },
  ],
  [
    'node-redis 5',
    async (port) => {
      const c = nodeRedis5.createClient({
        url: `redis://127.0.0.1:${port}`,
        socket: { reconnectStrategy: () => 20 },
      });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => void c.destroy() };
    },
  ],
  [
    'node-redis 6',
    async (port) => {
      const c = nodeRedis6.createClient({
        url: `redis://127.0.0.1:${port}`,
        socket: { reconnectStrategy: () => 20 },
      });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => void c.destroy() };
    },
  ],
];

/** Calls `f` until `until` holds of its result, at most `tries` times, 20 ms apart. */
async function poll<T>(f: () => Promise<T>, until: (x: T) => boolean, tries = 250): Promise<T> {
  let x = await f();
  for (let i = 1; i < tries && !until(x); i++) {
    await new Promise((r) => setTimeout(r, 20));
    x = await f();
  }
  return x;
}

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
      // Redis is known to be down now: the next call fails fast, its deadline whole.
      (await bucket.acquire('k', 1, { timeoutMs: 100 })).release();
      expect(given).toHaveLength(2);
      expect(given[1]).toBeLessThanOrEqual(100);
    } finally {
      px.heal();
      await bucket.close();
      c.disconnect();
      px.close();
    }
  });
  it("close() rejects an acquire() waiting in the fallback limiter's place with LimiterClosedError, and takes it out of the fallback's queue", async () => {
    const px = await RedisProxy.start(server.port);
    const c = new Redis(px.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    c.on('error', () => {});
    // A fallback whose one permit is spent: an acquire() there waits about ten minutes.
    const local = new MemoryBucket({ capacity: 1, refillPerSecond: 1 / 600, queueLimit: 5 });
    local.consume('k');
    let asked!: () => void;
    const reached = new Promise<void>((resolve) => (asked = resolve));
    const fallback = {
      consume: (key?: string, permits?: number) => local.consume(key, permits),
      acquire: (key?: string, permits?: number, options?: AcquireOptions) => {
        const lease = local.acquire(key, permits, options);
        asked();
        return lease;
      },
    };
    const bucket = new TokenBucket({
      redis: c,
      capacity: 5,
      refillPerSecond: 1,
      timeoutMs: 100,
      whenUnavailable: fallback,
      prefix: 'closing',
    });
    try {
      await bucket.consume('warm');
      px.hang();
      const waiting = bucket.acquire('k', 1, { signal: new AbortController().signal });
      waiting.catch(() => {});
      await reached;
      expect(local.stats('k').queued).toBe(1);
      await bucket.close();
      await expect(waiting).rejects.toBeInstanceOf(LimiterClosedError);
      expect(local.stats('k').queued).toBe(0);
    } finally {
      px.heal();
      await bucket.close();
      local.close();
      c.disconnect();
      px.close();
    }
  });
});

describe('fail fast while Redis is down', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });

  for (const [name, connect] of CLIENTS) {
    it(`${name}: after one call finds Redis silent, the others apply the policy without going to it; back on Redis once it answers`, async () => {
      const px = await RedisProxy.start(server.port);
      const { client, close } = await connect(px.port);
      const prefix = `fast-${name}`;
      const bucket = new TokenBucket({
        redis: client,
        capacity: 100,
        refillPerSecond: 1e-6,
        timeoutMs: 300,
        whenUnavailable: 'allow',
        prefix,
      });
      try {
        expect((await bucket.consume('k')).reason).toBeUndefined();
        await cli(server.port, 'CONFIG', 'RESETSTAT');
        // Connections up, nothing answered: what is sent waits, and runs once healed.
        px.hang();
        const during: (string | undefined)[] = [];
        for (let i = 0; i < 20; i++) during.push((await bucket.consume('k')).reason);
        expect(during).toEqual(Array(20).fill('unavailable'));
        px.heal();
        let decided = 0;
        const back = await poll(
          () =>
            bucket.consume('k').then((d) => {
              if (d.reason === undefined) decided++;
              return d;
            }),
          (d: Decision) => d.reason === undefined,
        );
        expect(back.reason).toBeUndefined();
        const ran = await scriptCalls(server.port);
        // Only the first of the 20 went to Redis (and ran when the network healed); the
        // probes are no scripts.
        const view = new TokenBucket({
          redis: new Redis(server.port, '127.0.0.1', {
            lazyConnect: true,
            autoResendUnfulfilledCommands: false,
          }),
          capacity: 100,
          refillPerSecond: 1e-6,
          prefix,
        });
        const admitted = (await view.stats('k')).admitted;
        expect(admitted - 1 - decided).toBe(1);
        expect(ran).toBe(1 + decided);
        await view.close();
      } finally {
        px.heal();
        await bucket.close();
        close();
        px.close();
      }
    }, 30_000);

    it(`${name}: a real redis-server killed: calls after the first do not wait timeoutMs, and a restart is in use again`, async () => {
      const own = await RedisServer.start();
      const { client, close } = await connect(own.port);
      const local = new MemoryBucket({ capacity: 5, refillPerSecond: 1e-6 });
      const bucket = new TokenBucket({
        redis: client,
        capacity: 100,
        refillPerSecond: 1e-6,
        timeoutMs: 3000,
        whenUnavailable: local,
        prefix: 'killed',
      });
      try {
        expect((await bucket.consume('k')).remaining).toBe(99);
        await own.stop();
        const started = performance.now();
        const during: Decision[] = [];
        for (let i = 0; i < 8; i++) during.push(await bucket.consume('k'));
        // A generous bound: the first may wait its 3 s; eight calls waiting 3 s each would
        // take 24 s.
        expect(performance.now() - started).toBeLessThan(6000);
        // The local limiter decided in Redis's place: its 5, then refusals.
        expect(during.map((d) => d.allowed)).toEqual([
          true,
          true,
          true,
          true,
          true,
          false,
          false,
          false,
        ]);
        await own.up();
        const back = await poll(
          () => bucket.consume('k'),
          (d: Decision) => d.remaining === 99,
          500,
        );
        // The restarted Redis (no persistence) starts afresh; nothing the local limiter
        // granted was charged to it.
        expect(back).toMatchObject({ allowed: true, remaining: 99 });
      } finally {
        await bucket.close();
        close();
        await own.close();
      }
    }, 30_000);
  }

  it('a flapping Redis (cut every 100 ms) never admits past the limit under deny, and every call settles; close() settles the rest', async () => {
    const px = await RedisProxy.start(server.port);
    const c = new Redis(px.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      retryStrategy: () => 10,
    });
    c.on('error', () => {});
    const bucket = new TokenBucket({
      redis: c,
      capacity: 30,
      refillPerSecond: 1e-6,
      timeoutMs: 200,
      whenUnavailable: 'deny',
      prefix: 'flap',
    });
    const sem = new Concurrency({
      redis: c,
      limit: 3,
      timeoutMs: 200,
      whenUnavailable: 'deny',
      prefix: 'flap',
    });
    let flip = false;
    const flapper = setInterval(() => {
      flip = !flip;
      if (flip) px.partition();
      else px.heal();
    }, 100);
    try {
      let admitted = 0;
      let held = 0;
      let most = 0;
      const calls: Promise<unknown>[] = [];
      const until = performance.now() + 2000;
      while (performance.now() < until) {
        const round = [
          bucket.consume('k').then((d) => {
            if (d.allowed) admitted++;
          }),
          sem.consume('k').then(async (d) => {
            if (!d.allowed) return;
            held++;
            most = Math.max(most, held);
            await new Promise((r) => setTimeout(r, 5));
            held--;
            await sem.release('k').catch(() => {});
          }),
        ];
        calls.push(...round);
        await Promise.all(round);
      }
      // Calls made just before close(): they settle too.
      const last = [bucket.consume('k'), sem.acquire('k').catch((e) => e)];
      await Promise.all([bucket.close(), sem.close()]);
      const settled = await Promise.allSettled([...calls, ...last]);
      expect(settled.every((x) => x.status === 'fulfilled')).toBe(true);
      expect(admitted).toBeLessThanOrEqual(30);
      expect(most).toBeLessThanOrEqual(3);
    } finally {
      clearInterval(flapper);
      c.disconnect();
      px.close();
    }
  }, 30_000);

  it('a Cluster with one master killed: its slots fail fast, the other masters still decide', async () => {
    const cluster = await RedisCluster.start();
    const { Cluster } = await import('ioredis');
    const c = new Cluster(
      cluster.ports.map((port) => ({ host: '127.0.0.1', port })),
      {
        redisOptions: { autoResendUnfulfilledCommands: false },
        retryDelayOnFailover: 0,
        clusterRetryStrategy: () => 50,
      },
    );
    c.on('error', () => {});
    const bucket = new TokenBucket({
      redis: c,
      capacity: 100,
      refillPerSecond: 1e-6,
      timeoutMs: 1000,
      whenUnavailable: 'allow',
      prefix: 'cl',
    });
    try {
      // Keys spread over the three masters.
      const keys = Array.from({ length: 30 }, (_, i) => `u${i}`);
      for (const k of keys) expect((await bucket.consume(k)).reason).toBeUndefined();
      await cluster.nodes[0]!.stop();
      // Each key once (its slot finds out), then each key again, one at a time.
      await Promise.all(keys.map((k) => bucket.consume(k)));
      const started = performance.now();
      const second: Decision[] = [];
      for (const k of keys) second.push(await bucket.consume(k));
      // A generous bound: each key of the dead master waiting its 1 s would take ~10 s.
      expect(performance.now() - started).toBeLessThan(1000);
      const fromRedis = second.filter((d) => d.reason === undefined).length;
      const unavailable = second.filter((d) => d.reason === 'unavailable').length;
      expect(fromRedis).toBeGreaterThan(0);
      expect(unavailable).toBeGreaterThan(0);
      expect(fromRedis + unavailable).toBe(keys.length);
    } finally {
      await bucket.close();
      c.disconnect();
      await cluster.close();
    }
  }, 60_000);
});
