import { Redis } from 'ioredis';
import * as nodeRedis from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Concurrency, TokenBucket } from '../../src/redis/index.js';
import { holdWarnings, RedisProxy, RedisServer } from '../helpers/redis.js';

// A call answered "unavailable" must not run on Redis later: a client that is connecting or
// reconnecting would keep it in its offline queue and send it when Redis is back, after its
// caller was answered (a bucket drained by calls that were all told "unavailable"). And a
// reply lost with its connection is charged once: never sent again.

/**
 * Between tries: while Redis is known to be down, a call fails at once (in microtasks
 * alone), and a loop that never yields would starve the probe that brings it back.
 */
const pause = () => new Promise((r) => setTimeout(r, 10));

/** `f()` once Redis answers it (calls fail fast until a probe finds Redis back). */
async function answered<T>(f: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (error) {
      if (i > 200) throw error;
      await pause();
    }
  }
}

/** The permits available once the late grant is given back (polled: it is retried). */
async function freed(stats: () => Promise<{ available: number }>): Promise<number> {
  let n = (await stats()).available;
  for (let i = 0; i < 100 && n !== 1; i++) {
    await pause();
    n = (await stats()).available;
  }
  return n;
}

type Client = Redis | ReturnType<typeof nodeRedis.createClient>;

async function client(kind: string, port: number): Promise<Client> {
  if (kind === 'ioredis') {
    const c = new Redis(port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    c.on('error', () => {});
    return c;
  }
  const c = nodeRedis.createClient({ url: `redis://127.0.0.1:${port}` });
  c.on('error', () => {});
  await c.connect();
  return c;
}

function close(c: Client): void {
  if (c instanceof Redis) c.disconnect();
  else c.destroy();
}

describe('Redis out of reach', () => {
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

  for (const kind of ['ioredis', 'node-redis']) {
    it(`${kind}: calls answered "unavailable" while the client reconnects never run on Redis`, async () => {
      const px = await RedisProxy.start(server.port);
      const c = await client(kind, px.port);
      try {
        const prefix = `part-${kind}`;
        const bucket = new TokenBucket({
          redis: c as never,
          capacity: 20,
          refillPerSecond: 1e-6,
          prefix,
          timeoutMs: 100,
          whenUnavailable: 'allow',
        });
        expect((await bucket.consume('k')).allowed).toBe(true);
        px.partition();
        const during: (string | undefined)[] = [];
        for (let i = 0; i < 10; i++) during.push((await bucket.consume('k')).reason);
        expect(during).toEqual(Array(10).fill('unavailable'));
        px.heal();
        // Once a call goes through again, whatever the client had held back went before it
        // on the same connection.
        while ((await bucket.consume('probe')).reason === 'unavailable') await pause();
        const view = new TokenBucket({ redis: admin, capacity: 20, refillPerSecond: 1e-6, prefix });
        expect((await view.stats('k')).admitted).toBe(1);
      } finally {
        close(c);
        px.close();
      }
    });

    it(`${kind}: a reply lost with its connection is charged once, its caller told "unavailable"`, async () => {
      const px = await RedisProxy.start(server.port);
      const c = await client(kind, px.port);
      try {
        const prefix = `cut-${kind}`;
        const bucket = new TokenBucket({
          redis: c as never,
          capacity: 10,
          refillPerSecond: 1e-6,
          prefix,
          timeoutMs: 500,
        });
        await bucket.consume('warm'); // its script loaded: the next call is one EVALSHA
        px.cutReplyOf(`{${'k'}}`);
        await expect(bucket.consume('k')).rejects.toMatchObject({
          name: 'BackendUnavailableError',
        });
        while ((await bucket.consume('probe').catch(() => undefined)) === undefined) await pause();
        const view = new TokenBucket({ redis: admin, capacity: 10, refillPerSecond: 1e-6, prefix });
        expect((await view.stats('k')).admitted).toBe(1);
      } finally {
        close(c);
        px.close();
      }
    });
  }

  it('ioredis lazyConnect: first calls made while Redis is out of reach never run later', async () => {
    const px = await RedisProxy.start(server.port);
    px.partition();
    const c = new Redis(px.port, '127.0.0.1', {
      lazyConnect: true,
      autoResendUnfulfilledCommands: false,
    });
    c.on('error', () => {});
    try {
      const prefix = 'part-lazy';
      const bucket = new TokenBucket({
        redis: c,
        capacity: 20,
        refillPerSecond: 1e-6,
        prefix,
        timeoutMs: 100,
        whenUnavailable: 'allow',
      });
      const during: (string | undefined)[] = [];
      for (let i = 0; i < 4; i++) during.push((await bucket.consume('k')).reason);
      expect(during).toEqual(Array(4).fill('unavailable'));
      px.heal();
      while ((await bucket.consume('probe')).reason === 'unavailable') await pause();
      const view = new TokenBucket({ redis: admin, capacity: 20, refillPerSecond: 1e-6, prefix });
      expect((await view.stats('k')).admitted).toBe(0);
    } finally {
      c.disconnect();
      px.close();
    }
  });

  it('limiters sharing a client wait for it with one listener, and all go on when it is ready', async () => {
    const px = await RedisProxy.start(server.port);
    const c = new Redis(px.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    c.on('error', () => {});
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    const printWarnings = holdWarnings(onWarning);
    try {
      const buckets = Array.from(
        { length: 12 },
        (_, i) =>
          new TokenBucket({
            redis: c,
            capacity: 5,
            refillPerSecond: 1e-6,
            prefix: `share-${i}`,
            timeoutMs: 5000,
          }),
      );
      await Promise.all(buckets.map((b) => b.consume('k')));
      px.partition();
      // Twelve limiters, each with a call held back while the client reconnects.
      // The client has seen its connection go: calls made now are held back.
      while (c.status === 'ready') await new Promise((r) => setImmediate(r));
      const held = buckets.map((b) => b.consume('k'));
      await new Promise((r) => setImmediate(r));
      expect(c.listenerCount('ready')).toBeLessThanOrEqual(2); // ioredis's own, and ours
      px.heal();
      const answers = await Promise.all(held);
      expect(answers.map((d) => d.allowed)).toEqual(Array(12).fill(true));
      expect(warnings).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
      printWarnings();
      c.disconnect();
      px.close();
    }
  });

  it('a Concurrency grant whose call timed out, then ran, is given back at once', async () => {
    const c = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    try {
      const sem = new Concurrency({ redis: c, limit: 1, timeoutMs: 200, prefix: 'late' });
      await sem.tryAcquire('warm'); // the script loaded: the next call is one EVALSHA
      await sem.release('warm');
      // Redis busy for longer than timeoutMs (a slow command, a fork, a failover pause).
      await admin.call('CLIENT', 'PAUSE', '600', 'ALL');
      await expect(sem.tryAcquire('k')).rejects.toMatchObject({ name: 'BackendUnavailableError' });
      // Behind the paused call on its connection: once this answers, the call has run and
      // its reply came (a grant its caller never got), and what followed it went out.
      await c.ping();
      expect(await freed(() => answered(() => sem.stats('k')))).toBe(1);
      // An acquire()'s try the same way: its grant, a lease nobody holds, goes back too.
      await admin.call('CLIENT', 'PAUSE', '600', 'ALL');
      await expect(sem.acquire('k')).rejects.toMatchObject({ name: 'BackendUnavailableError' });
      await c.ping();
      expect(await freed(() => answered(() => sem.stats('k')))).toBe(1);
      await sem.close();
    } finally {
      c.disconnect();
    }
  });

  it('an ioredis client that sends unanswered commands again is warned about, once', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'ATOMIC_LIMITER_REDIS_RESEND') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    const printWarnings = holdWarnings(onWarning);
    const resending = new Redis(server.port, '127.0.0.1', { lazyConnect: true });
    try {
      // Created above with the option off: no warning for those.
      new TokenBucket({ redis: admin, capacity: 1, refillPerSecond: 1 });
      await new Promise((r) => setImmediate(r));
      expect(warnings).toEqual([]);
      new TokenBucket({ redis: resending, capacity: 1, refillPerSecond: 1 });
      new TokenBucket({ redis: resending, capacity: 1, refillPerSecond: 1 });
      await new Promise((r) => setImmediate(r));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(
        /charged twice; create it with \{ autoResendUnfulfilledCommands: false \}/,
      );
    } finally {
      process.off('warning', onWarning);
      printWarnings();
      resending.disconnect();
    }
  });
});
