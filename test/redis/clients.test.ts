import { Cluster as IoCluster5, Redis as IoRedis5 } from 'ioredis';
import IoRedis6 from 'ioredis-v6';
import * as nodeRedis5 from 'redis';
import * as nodeRedis6 from 'redis-v6';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS_TIME_SLACK_MS } from '../../src/redis/base.js';
import { Concurrency, SlidingLog, TokenBucket } from '../../src/redis/index.js';
import { cli, holdWarnings, RedisCluster, RedisServer } from '../helpers/redis.js';

// Every supported client, standalone and cluster, against real servers: the same limits,
// keys with `{`, `}`, `:` and non-ASCII on the cluster (never CROSSSLOT), a TTL on every
// key, SCRIPT FLUSH in the middle of a run, and acquire() woken by a release.

interface Client {
  client: unknown;
  close(): Promise<void>;
}

type Factory = (ports: number[]) => Promise<Client>;

const STANDALONE: [string, Factory][] = [
  [
    'ioredis 5 Redis',
    async ([port]) => {
      const c = new IoRedis5(port!, '127.0.0.1', { autoResendUnfulfilledCommands: false });
      return { client: c, close: async () => void c.disconnect() };
    },
  ],
  [
    'ioredis 6 Redis',
    async ([port]) => {
      const c = new IoRedis6.Redis(port!, '127.0.0.1', { autoResendUnfulfilledCommands: false });
      return { client: c, close: async () => void c.disconnect() };
    },
  ],
  [
    'node-redis 5 createClient',
    async ([port]) => {
      const c = nodeRedis5.createClient({ url: `redis://127.0.0.1:${port}` });
      await c.connect();
      return { client: c, close: async () => void c.destroy() };
    },
  ],
  [
    'node-redis 6 createClient',
    async ([port]) => {
      const c = nodeRedis6.createClient({ url: `redis://127.0.0.1:${port}` });
      await c.connect();
      return { client: c, close: async () => void c.destroy() };
    },
  ],
];

const CLUSTER: [string, Factory][] = [
  [
    'ioredis 5 Cluster',
    async (ports) => {
      const c = new IoCluster5(
        ports.map((port) => ({ host: '127.0.0.1', port })),
        { redisOptions: { autoResendUnfulfilledCommands: false }, retryDelayOnFailover: 0 },
      );
      return { client: c, close: async () => void c.disconnect() };
    },
  ],
  [
    'ioredis 6 Cluster',
    async (ports) => {
      const c = new IoRedis6.Cluster(
        ports.map((port) => ({ host: '127.0.0.1', port })),
        { redisOptions: { autoResendUnfulfilledCommands: false }, retryDelayOnFailover: 0 },
      );
      return { client: c, close: async () => void c.disconnect() };
    },
  ],
  [
    'node-redis 5 createCluster',
    async (ports) => {
      const c = nodeRedis5.createCluster({
        rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
      });
      await c.connect();
      return { client: c, close: async () => void c.destroy() };
    },
  ],
  [
    'node-redis 6 createCluster',
    async (ports) => {
      const c = nodeRedis6.createCluster({
        rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
      });
      await c.connect();
      return { client: c, close: async () => void c.destroy() };
    },
  ],
];

const KEYS = ['plain', 'user:{42}', '}{', '{', 'üñí©ødé:✓', 7, ''];

/** Every key on these servers, with its PTTL. */
async function allKeys(ports: number[]): Promise<[string, number][]> {
  const out: [string, number][] = [];
  for (const port of ports) {
    const c = new IoRedis5(port, '127.0.0.1');
    try {
      const keys = await c.keys('*');
      for (const k of keys) out.push([k, await c.pttl(k)]);
    } finally {
      c.disconnect();
    }
  }
  return out;
}

async function scenario(client: unknown, ports: number[], prefix: string): Promise<void> {
  const bucket = new TokenBucket({ redis: client, capacity: 5, refillPerSecond: 1e-3, prefix });
  const log = new SlidingLog({ redis: client, limit: 3, windowMs: 60_000, prefix });
  const conc = new Concurrency({ redis: client, limit: 2, queueLimit: 4, prefix });
  for (const key of KEYS) {
    // 8 calls in one tick (one batch): exactly the capacity admitted.
    const got = await Promise.all(Array.from({ length: 8 }, () => bucket.tryAcquire(key)));
    expect(got.filter(Boolean).length).toBe(5);
    if (key === 'plain') {
      // The scripts vanish from every node in the middle of the run: nobody notices.
      for (const port of ports) await cli(port, 'SCRIPT', 'FLUSH');
    }
    const logged = await Promise.all(Array.from({ length: 5 }, () => log.tryAcquire(key)));
    expect(logged.filter(Boolean).length).toBe(3);
    // Concurrency: two held; a third acquire() waits until one is released.
    const a = await conc.acquire(key);
    const b = await conc.acquire(key);
    expect(await conc.tryAcquire(key)).toBe(false);
    let third = false;
    const waiting = conc.acquire(key).then((lease) => {
      third = true;
      return lease;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(third).toBe(false);
    await a.release();
    const c = await waiting;
    expect(third).toBe(true);
    expect((await conc.stats(key)).available).toBe(0);
    await b.release();
    await c.release();
    expect((await conc.stats(key)).available).toBe(2);
  }
  // Every key written has a TTL no longer than its state needs: the bucket's time to refill
  // rounded up to its step (an eighth of that, at most 1 s), the log's window; each + 2 ms
  // (the TTL counts from the whole ms, plus one) + REDIS_TIME_SLACK_MS.
  const keys = (await allKeys(ports)).filter(([k]) => k.startsWith(`${prefix}:`));
  expect(keys.length).toBeGreaterThan(0);
  for (const [k, ttl] of keys) {
    expect([k, ttl > 0]).toEqual([k, true]);
    const slack = 2 + REDIS_TIME_SLACK_MS;
    const bound = k.includes(':TokenBucket:') ? (5 / 1e-3) * 1000 + 1000 + slack : 60_000 + slack;
    expect([k, ttl <= bound]).toEqual([k, true]);
  }
  await conc.close();
}

describe('every client against a standalone redis-server', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });
  for (const [name, factory] of STANDALONE) {
    it(`${name}: limits hold, odd keys work, keys expire, SCRIPT FLUSH is invisible`, async () => {
      const c = await factory([server.port]);
      try {
        await scenario(c.client, [server.port], `t-${name.replace(/\W/g, '')}`);
      } finally {
        await c.close();
      }
    });
  }
});

describe('every cluster client against a three-master Redis Cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await RedisCluster.start();
  });
  afterAll(async () => {
    await cluster?.close();
  });
  for (const [name, factory] of CLUSTER) {
    it(`${name}: limits hold, odd keys work, keys expire, SCRIPT FLUSH is invisible`, async () => {
      const c = await factory(cluster.ports);
      try {
        await scenario(c.client, cluster.ports, `t-${name.replace(/\W/g, '')}`);
      } finally {
        await c.close();
      }
    });
  }
});

describe('an ioredis Cluster that would send a command again', () => {
  it('is warned about once: retryDelayOnFailover above 0 replays after "Connection is closed"', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'ATOMIC_LIMITER_REDIS_RESEND') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    const printWarnings = holdWarnings(onWarning);
    const nodes = [{ host: '127.0.0.1', port: 1 }];
    const safe = new IoCluster5(nodes, {
      lazyConnect: true,
      redisOptions: { autoResendUnfulfilledCommands: false },
      retryDelayOnFailover: 0,
    });
    const replaying = new IoCluster5(nodes, {
      lazyConnect: true,
      redisOptions: { autoResendUnfulfilledCommands: false },
    });
    try {
      new TokenBucket({ redis: safe, capacity: 1, refillPerSecond: 1 });
      await new Promise((r) => setImmediate(r));
      expect(warnings).toEqual([]);
      new TokenBucket({ redis: replaying, capacity: 1, refillPerSecond: 1 });
      new TokenBucket({ redis: replaying, capacity: 1, refillPerSecond: 1 });
      await new Promise((r) => setImmediate(r));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(/retryDelayOnFailover: 0/);
    } finally {
      process.off('warning', onWarning);
      printWarnings();
      safe.disconnect();
      replaying.disconnect();
    }
  });
});
