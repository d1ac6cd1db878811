import { once } from 'node:events';
import { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/index.js';
import { attach, FixedWindow, LeakyBucket, TokenBucket } from '../../src/redis/index.js';
import { until } from '../helpers/http.js';
import { RedisProxy, RedisServer, withRedisServer } from '../helpers/redis.js';
import { scenarioWorker } from '../helpers/threads.js';

// Fleet mode when things go wrong: Redis gone or hung, a refund after a cached refusal,
// options given without the blocks they are for.

let server: RedisServer;
let redis: Redis;

withRedisServer((s, r) => {
  server = s;
  redis = r;
});

/** Counts the scripts `client` is asked to run (EVALSHA, EVAL, or a pipeline of them). */
/**
 * The calls `limiter` makes to Redis, counted where it makes them: a call made while its
 * client reconnects is held back (never reaching the client) until it is ready or the call
 * times out, so counting at the client would miss it.
 */
function countCalls(limiter: object): () => number {
  const spy = vi.spyOn(limiter as { call(...args: unknown[]): unknown }, 'call');
  return () => spy.mock.calls.length;
}

describe('fleet mode faults: the blockTtlMs sweep', () => {
  it('reports a give-back it cannot make as a process warning, never an unhandled rejection', async () => {
    const own = await RedisServer.start();
    const client = new Redis(own.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    client.on('error', () => {});
    // The sweep's failed give-back ends as one or the other (the warning is caught here, so
    // the test's output stays clean).
    const emitWarning = process.emitWarning;
    let onUnhandled: ((reason: unknown) => void) | undefined;
    const reported = new Promise<unknown>((resolve) => {
      process.emitWarning = ((warning: string | Error, options?: { code?: string }) => {
        if (options?.code === 'ATOMIC_LIMITER_REDIS_GIVE_BACK') {
          resolve(Object.assign(new Error(String(warning)), { code: options.code }));
        } else {
          emitWarning.call(process, warning as string, options as object);
        }
      }) as typeof process.emitWarning;
      onUnhandled = (reason) => resolve({ unhandled: reason });
      process.on('unhandledRejection', onUnhandled);
    });
    try {
      const clock = new ManualClock(0);
      const tb = new TokenBucket({
        redis: client,
        capacity: 100,
        refillPerSecond: 10,
        block: 10,
        blockTtlMs: 50,
        timeoutMs: 200,
        whenUnavailable: 'allow',
        clock,
        prefix: 'ff1',
      });
      expect(await tb.consume('k')).toMatchObject({ allowed: true, remaining: 9 });
      await own.stop();
      // The block ages out; nobody calls the limiter again: the sweep gives it back, and
      // cannot reach Redis.
      clock.advance(100);
      const outcome = await reported;
      expect(outcome).toBeInstanceOf(Error);
      expect((outcome as Error).message).toMatch(/permits could not be given back/);
      // The aged-out permits were the sweep's to give back: close() has none left.
      await tb.close();
    } finally {
      process.emitWarning = emitWarning;
      if (onUnhandled) process.off('unhandledRejection', onUnhandled);
      client.disconnect();
      await own.close();
    }
  });
});

describe('fleet mode faults: close() and give-backs under way', () => {
  it('close() waits for the give-back of an aged-out block still out, so the client can be dropped after it', async () => {
    const px = await RedisProxy.start(server.port);
    const client = new Redis(px.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    client.on('error', () => {});
    const clock = new ManualClock(0);
    const options = { capacity: 100, refillPerSecond: 1e-6, clock, prefix: 'ff-close' };
    const tb = new TokenBucket({ ...options, redis: client, block: 10, blockTtlMs: 20 });
    try {
      expect(await tb.consume('k')).toMatchObject({ allowed: true, remaining: 9 });
      const giveBacks = vi.spyOn(tb as unknown as { giveBack(): Promise<void> }, 'giveBack');
      // The block ages out; the sweep gives its 9 permits back, and Redis holds the reply.
      px.hang();
      clock.advance(100);
      await until(() => giveBacks.mock.calls.length > 0, 'the sweep gave the block back');
      const order: string[] = [];
      const closed = tb.close().then(() => order.push('closed'));
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
      order.push('healed');
      px.heal();
      await closed;
      expect(order).toEqual(['healed', 'closed']);
    } finally {
      px.heal();
      await tb.close();
      client.disconnect();
      px.close();
    }
    const check = new TokenBucket({ ...options, redis });
    expect((await check.stats('k')).available).toBe(99);
  });
});

describe('fleet mode faults: Redis unavailable', () => {
  it('calls waiting for a fetch that found Redis unavailable take its answer: one attempt for all', async () => {
    const own = await RedisServer.start();
    // Two ways Redis fails: no answer within timeoutMs (the offline queue), and a refusal
    // at once (no offline queue).
    const clients = [
      new Redis(own.port, '127.0.0.1', { autoResendUnfulfilledCommands: false }),
      new Redis(own.port, '127.0.0.1', {
        autoResendUnfulfilledCommands: false,
        enableOfflineQueue: false,
      }),
    ];
    try {
      for (const client of clients) {
        client.on('error', () => {});
        if (client.status !== 'ready') await once(client, 'ready');
      }
      await own.stop();
      for (const [i, client] of clients.entries()) {
        const tb = new TokenBucket({
          redis: client,
          capacity: 100,
          refillPerSecond: 10,
          block: 5,
          timeoutMs: 200,
          whenUnavailable: 'deny',
          prefix: `ff2-${i}`,
        });
        const calls = countCalls(tb);
        const decisions = await Promise.all(Array.from({ length: 5 }, () => tb.consume('k')));
        expect(decisions).toEqual(
          Array.from({ length: 5 }, () => expect.objectContaining({ reason: 'unavailable' })),
        );
        expect(decisions.every((d) => !d.allowed)).toBe(true);
        // The first call fetched the key's block; the other four waited for that fetch and
        // took its answer, none asking Redis again in turn.
        expect([i, calls()]).toEqual([i, 1]);
        await tb.close();
      }
    } finally {
      for (const client of clients) client.disconnect();
      await own.close();
    }
  });

  it('calls waiting for a lease leased ahead that found Redis unavailable take its answer', async () => {
    const own = await RedisServer.start();
    const client = new Redis(own.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    client.on('error', () => {});
    try {
      await client.ping();
      const tb = new TokenBucket({
        redis: client,
        capacity: 100,
        refillPerSecond: 10,
        block: 8,
        leaseAhead: true,
        timeoutMs: 200,
        whenUnavailable: 'deny',
        prefix: 'ff4',
      });
      expect((await tb.consume('k')).allowed).toBe(true); // a block of 8: 7 left
      await own.stop();
      const calls = countCalls(tb);
      // The block is still spent; with a quarter and an eighth left, a lease goes out
      // ahead each time (held back while the client reconnects: no answer within timeoutMs).
      const spent = [];
      for (let i = 0; i < 7; i++) spent.push((await tb.consume('k')).allowed);
      expect(spent).toEqual(Array.from({ length: 7 }, () => true));
      expect(calls()).toBe(2);
      // Dry: these wait for the leases out, and take their answer when Redis fails them.
      const waited = await Promise.all([tb.consume('k'), tb.consume('k')]);
      expect(waited).toEqual([
        expect.objectContaining({ allowed: false, reason: 'unavailable' }),
        expect.objectContaining({ allowed: false, reason: 'unavailable' }),
      ]);
      expect(calls()).toBe(2); // nobody asked Redis again
      await tb.close().catch(() => {});
    } finally {
      client.disconnect();
      await own.close();
    }
  });

  it('a call waiting for a fetch still out answers within its own timeoutMs', async () => {
    const clock = new ManualClock(0);
    // A thread whose fetch goes to a client that reads no reply (its timeoutMs long), and
    // one over the same blocks with a short timeoutMs and a working client.
    const hung = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    await hung.ping();
    const slow = new TokenBucket({
      redis: hung,
      capacity: 100,
      refillPerSecond: 10,
      block: 5,
      timeoutMs: 2000,
      whenUnavailable: 'deny',
      clock,
      prefix: 'ff3',
    });
    const handle = slow.handle;
    const quick = attach({ ...handle, options: { ...handle.options, timeoutMs: 100 } }, { redis });
    const settled: string[] = [];
    try {
      hung.stream.pause();
      const first = slow.consume('k').then((d) => {
        settled.push('slow');
        return d;
      });
      const second = quick.consume('k').then((d) => {
        settled.push('quick');
        return d;
      });
      // The quick one waits for the slow one's fetch until its own timeoutMs, no longer:
      // it answers first, by its policy.
      expect(await second).toMatchObject({ allowed: false, reason: 'unavailable' });
      expect(await first).toMatchObject({ allowed: false, reason: 'unavailable' });
      expect(settled).toEqual(['quick', 'slow']);
    } finally {
      hung.stream.resume();
      await quick.close();
      await slow.close();
      hung.disconnect();
    }
  });
});

describe('fleet mode faults: refund()', () => {
  it("clears the key's cached refusal, for every thread over the blocks", async () => {
    const clock = new ManualClock(0);
    const fw = new FixedWindow({
      redis,
      limit: 4,
      windowMs: 60_000,
      block: 2,
      clock,
      prefix: 'ff4',
    });
    const other = attach(fw.handle, { redis });
    for (let i = 0; i < 4; i++) expect((await fw.consume('k')).allowed).toBe(true);
    expect(await fw.consume('k')).toMatchObject({ allowed: false, reason: 'limited' });
    // Cached: the other thread is refused too, without asking Redis.
    expect(await other.consume('k')).toMatchObject({ allowed: false, reason: 'limited' });
    await fw.refund('k', 2);
    expect((await fw.stats('k')).available).toBe(2);
    // As in memory: the refunded permits are there to take, from either thread.
    expect(await other.consume('k')).toMatchObject({ allowed: true });
    expect(await fw.consume('k')).toMatchObject({ allowed: true });
    expect(await fw.consume('k')).toMatchObject({ allowed: false, reason: 'limited' });
    await other.close();
    await fw.close();
  });
});

describe('fleet mode faults: options', () => {
  it('refuses blockTtlMs and blockKeys without block, naming them', async () => {
    const base = { redis, capacity: 10, refillPerSecond: 1 };
    expect(() => new TokenBucket({ ...base, blockTtlMs: 5 })).toThrow(RangeError);
    expect(() => new TokenBucket({ ...base, blockTtlMs: 5 })).toThrow(
      /"blockTtlMs" is for fleet mode and needs "block"/,
    );
    expect(() => new TokenBucket({ ...base, blockKeys: 5 })).toThrow(RangeError);
    expect(() => new FixedWindow({ redis, limit: 10, windowMs: 1000, blockKeys: 5 })).toThrow(
      /"blockKeys" is for fleet mode and needs "block"/,
    );
    // With block, both are taken.
    const tb = new TokenBucket({ ...base, block: 2, blockTtlMs: 5, blockKeys: 5 });
    expect(tb.blockTtlMs).toBe(5);
    await tb.close();
  });

  it('refuses maxBlock on a LeakyBucket, even equal to block', () => {
    const base = { redis, capacity: 10, ratePerSecond: 1, block: 5 };
    expect(() => new LeakyBucket({ ...base, maxBlock: 5 })).toThrow(RangeError);
    expect(() => new LeakyBucket({ ...base, maxBlock: 5 })).toThrow(
      /"maxBlock" is not for a LeakyBucket/,
    );
    expect(() => new LeakyBucket({ ...base, maxBlock: 6 })).toThrow(RangeError);
    expect(new LeakyBucket(base).block).toBe(5);
  });
});

describe('fleet mode faults: a thread that stops after claiming a fetch', () => {
  for (const mode of ['computes', 'exits'] as const) {
    it(`a thread that claims a key's fetch and then ${mode} does not make the others' calls unavailable`, async () => {
      const tb = new TokenBucket({
        redis,
        capacity: 100_000,
        refillPerSecond: 1e-6,
        block: 10,
        timeoutMs: 1000,
        whenUnavailable: 'throw',
        prefix: `ff-claim-${mode}`,
      });
      const release = new SharedArrayBuffer(4);
      const worker = scenarioWorker('redis:fleet-claimer', {
        workerData: {
          handle: tb.handle,
          port: server.port,
          mode: mode === 'exits' ? 'exit' : 'compute',
          release,
        },
      });
      const exited = once(worker, 'exit');
      try {
        await once(worker, 'message');
        // 3 000 calls of this thread, 100 at a time, while the claimer holds the claim.
        let allowed = 0;
        const failures: string[] = [];
        for (let round = 0; round < 30; round++) {
          const results = await Promise.allSettled(
            Array.from({ length: 100 }, () => tb.tryAcquire('hot')),
          );
          for (const r of results) {
            if (r.status === 'fulfilled') allowed += r.value ? 1 : 0;
            else failures.push((r.reason as Error).name);
          }
        }
        expect(failures).toEqual([]);
        expect(allowed).toBe(3000);
      } finally {
        Atomics.store(new Int32Array(release), 0, 1);
        Atomics.notify(new Int32Array(release), 0);
        await exited;
        await tb.close();
      }
    }, 30_000);
  }
});
