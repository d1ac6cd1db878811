import { once } from 'node:events';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import * as memory from '../../src/index.js';
import {
  BackendUnavailableError,
  chain,
  LimiterClosedError,
  ManualClock,
  QueueFullError,
} from '../../src/index.js';
import { Concurrency, FixedWindow, LeakyBucket, TokenBucket } from '../../src/redis/index.js';
import { until } from '../helpers/http.js';
import { holdWarnings, RedisServer, withRedisServer } from '../helpers/redis.js';

// acquire() on Redis, driven by a ManualClock (its time goes to the scripts, and waits
// follow it): bucket reservations in FIFO order, the queue limit, abort giving a
// reservation back, windows retrying at retryAfterMs, close() rejecting waiters.

/** Lets pending promise chains and Redis round trips run. */
async function settle(redis: Redis): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await redis.ping();
    await new Promise((r) => setImmediate(r));
  }
}

function track<T>(p: Promise<T>, log: string[], name: string): Promise<T> {
  return p.then(
    (v) => {
      log.push(name);
      return v;
    },
    (e) => {
      log.push(`${name}:${e.name}`);
      throw e;
    },
  );
}

describe('acquire() on Redis', () => {
  let redis: Redis;
  let n = 0;
  const prefix = () => `acq${n++}`;
  withRedisServer((_server, r) => {
    redis = r;
  });

  it('TokenBucket reserves in FIFO order, refuses past queueLimit, and an abort gives the reservation back', async () => {
    const clock = new ManualClock(0);
    const b = new TokenBucket({
      redis,
      capacity: 2,
      refillPerSecond: 1,
      queueLimit: 3,
      clock,
      prefix: prefix(),
    });
    expect(await b.tryAcquire('k', 2)).toBe(true);
    const log: string[] = [];
    const a1 = track(b.acquire('k'), log, 'a1');
    const ctl = new AbortController();
    const a2 = track(b.acquire('k', 1, { signal: ctl.signal }), log, 'a2');
    const a3 = track(b.acquire('k'), log, 'a3');
    a2.catch(() => {});
    await settle(redis);
    // Three permits owed: a fourth would pass the queue limit.
    await expect(b.acquire('k')).rejects.toBeInstanceOf(QueueFullError);
    // Nobody jumps the line.
    expect(await b.tryAcquire('k')).toBe(false);
    ctl.abort();
    await settle(redis);
    expect(log).toEqual(['a2:AbortError']);
    clock.advance(1000);
    await a1;
    await settle(redis);
    expect(log).toEqual(['a2:AbortError', 'a1']);
    // a3 keeps the time it reserved (3 s); a2's permit went back to the bucket, so at 3 s
    // one newcomer gets in beside a3: 5 permits by 3 s, the rate exactly.
    clock.advance(1500);
    expect(await b.tryAcquire('k')).toBe(false);
    clock.advance(500);
    await a3;
    expect(log).toEqual(['a2:AbortError', 'a1', 'a3']);
    expect(await b.tryAcquire('k')).toBe(true);
    expect(await b.tryAcquire('k')).toBe(false);
    await b.close();
  });

  it('bucket reservations at Unix time, at a rate whose unit is not a µs, owe what memory owes', async () => {
    // 7 per second: a permit is 125 000 units of 8/7 µs. Redis TIME reads about this.
    const clock = new ManualClock(1_700_000_000_000);
    const cases = [
      [
        new TokenBucket({
          redis,
          capacity: 2,
          refillPerSecond: 7,
          queueLimit: 3,
          clock,
          prefix: prefix(),
        }),
        new memory.TokenBucket({ capacity: 2, refillPerSecond: 7, queueLimit: 3, clock }),
      ],
      [
        new LeakyBucket({ redis, capacity: 3, ratePerSecond: 7, clock, prefix: prefix() }),
        new memory.LeakyBucket({ capacity: 3, ratePerSecond: 7, clock }),
      ],
    ] as const;
    for (const [r, m] of cases) {
      const log: string[] = [];
      const name = r.algorithm;
      const ours = [0, 1, 2].map((i) => track(r.acquire('k'), log, `${name} ${i}`));
      const theirs = [0, 1, 2].map(() => m.acquire('k'));
      await settle(redis);
      // A newcomer is told to retry when memory says, a few sevenths of a second on (the
      // reset differs: memory's waiters take their permits when they wake).
      const { allowed, retryAfterMs } = m.consume('k');
      expect(await r.consume('k')).toMatchObject({ allowed, retryAfterMs });
      expect(retryAfterMs).toBeLessThan(1000);
      // A seventh of a second at a time: memory's next waiter wakes when the clock moves.
      for (let i = 0; i < 7; i++) {
        clock.advance(1000 / 7);
        await settle(redis);
      }
      await Promise.all(ours);
      await Promise.all(theirs);
      expect(log).toEqual([0, 1, 2].map((i) => `${name} ${i}`));
      await r.close();
      m.close();
    }
  });

  it('a reservation more than 2^31 ms ahead (Redis TIME) waits for it, never granted at once', async () => {
    // A permit every 10^6 s: the third waiter's time is 3 × 10^9 ms ahead, past setTimeout's
    // longest delay, which fires at once instead.
    const b = new TokenBucket({
      redis,
      capacity: 1,
      refillPerSecond: 1e-6,
      queueLimit: 3,
      prefix: prefix(),
    });
    const log: string[] = [];
    const ctl = new AbortController();
    try {
      expect(await b.tryAcquire('k')).toBe(true);
      const waiters = [1, 2, 3].map((i) =>
        track(b.acquire('k', 1, { signal: ctl.signal }), log, `w${i}`).catch(() => {}),
      );
      await settle(redis);
      expect((await b.stats('k')).available).toBe(0);
      await new Promise((r) => setTimeout(r, 50));
      expect(log).toEqual([]);
      ctl.abort();
      await Promise.all(waiters);
      expect(log).toEqual(['w1:AbortError', 'w2:AbortError', 'w3:AbortError']);
    } finally {
      await b.close();
    }
  });

  it('LeakyBucket lets waiters out at the constant rate, at most capacity waiting', async () => {
    const clock = new ManualClock(0);
    const b = new LeakyBucket({ redis, capacity: 3, ratePerSecond: 2, clock, prefix: prefix() });
    const log: string[] = [];
    const all = [0, 1, 2].map((i) => track(b.acquire('k'), log, `w${i}`));
    await settle(redis);
    expect(log).toEqual(['w0']);
    await expect(b.acquire('k')).rejects.toBeInstanceOf(QueueFullError);
    clock.advance(500);
    await all[1];
    await settle(redis);
    expect(log).toEqual(['w0', 'w1']);
    clock.advance(500);
    await all[2];
    expect(log).toEqual(['w0', 'w1', 'w2']);
    await b.close();
  });

  it('FixedWindow waiters retry at the next window, in arrival order, queueLimit per key', async () => {
    const clock = new ManualClock(0);
    const w = new FixedWindow({
      redis,
      limit: 2,
      windowMs: 1000,
      queueLimit: 2,
      clock,
      prefix: prefix(),
    });
    expect(await w.tryAcquire('k', 2)).toBe(true);
    const log: string[] = [];
    const a = track(w.acquire('k'), log, 'a');
    const b = track(w.acquire('k'), log, 'b');
    // Both are in line once their first tries came back refused (each a round trip, two on
    // a first run: NOSCRIPT, then EVAL): wait for that, not for a guessed number of pings.
    while ((await w.stats('k')).queued < 2) await settle(redis);
    await expect(w.acquire('k')).rejects.toBeInstanceOf(QueueFullError);
    expect((await w.stats('k')).queued).toBe(2);
    clock.advance(1000);
    await Promise.all([a, b]);
    expect(log).toEqual(['a', 'b']);
    expect((await w.stats('k')).available).toBe(0);
    await w.close();
  });

  it('acquire({ timeoutMs: 0 }) takes permits that are there and otherwise times out at once, holding nothing, as in memory', async () => {
    const clock = new ManualClock(0);
    const pairs = [
      [
        new TokenBucket({
          redis,
          capacity: 2,
          refillPerSecond: 1,
          queueLimit: 3,
          clock,
          prefix: prefix(),
        }),
        new memory.TokenBucket({ capacity: 2, refillPerSecond: 1, queueLimit: 3, clock }),
      ],
      [
        new LeakyBucket({ redis, capacity: 2, ratePerSecond: 1, clock, prefix: prefix() }),
        new memory.LeakyBucket({ capacity: 2, ratePerSecond: 1, clock }),
      ],
      [
        new FixedWindow({
          redis,
          limit: 2,
          windowMs: 1000,
          queueLimit: 3,
          clock,
          prefix: prefix(),
        }),
        new memory.FixedWindow({ limit: 2, windowMs: 1000, queueLimit: 3, clock }),
      ],
      [
        new Concurrency({ redis, limit: 2, queueLimit: 3, prefix: prefix() }),
        new memory.Concurrency({ limit: 2, queueLimit: 3 }),
      ],
    ] as const;
    for (const [r, m] of pairs) {
      const outcomes: string[][] = [[], []];
      for (const [i, l] of [r, m].entries()) {
        for (let k = 0; k < 3; k++) {
          outcomes[i]!.push(
            await Promise.resolve(l.acquire('k', 1, { timeoutMs: 0 })).then(
              () => 'lease',
              (e: Error) => e.name,
            ),
          );
        }
      }
      const leaky = r.algorithm === 'LeakyBucket';
      expect([r.algorithm, outcomes[0]]).toEqual([
        r.algorithm,
        ['lease', leaky ? 'TimeoutError' : 'lease', 'TimeoutError'],
      ]);
      expect(outcomes[0]).toEqual(outcomes[1]);
      // The refused calls took nothing: no reservation or grant stays behind them.
      await settle(redis);
      expect((await r.stats('k')).available).toBe(m.stats('k').available);
      clock.advance(1000);
      await settle(redis);
      expect((await r.stats('k')).available).toBe(m.stats('k').available);
      await r.close();
      m.close();
    }
  });

  it('Concurrency: an aborted waiter takes nothing; close() rejects the others', async () => {
    const c = new Concurrency({ redis, limit: 1, queueLimit: 5, prefix: prefix() });
    const held = await c.acquire('k');
    const ctl = new AbortController();
    const aborted = c.acquire('k', 1, { signal: ctl.signal });
    const other = c.acquire('k');
    ctl.abort();
    await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
    await held.release();
    const lease = await other;
    expect((await c.stats('k')).available).toBe(0);
    const last = c.acquire('k');
    await settle(redis);
    const rejected = expect(last).rejects.toBeInstanceOf(LimiterClosedError);
    await c.close();
    await rejected;
    await lease.release().catch(() => {});
  });

  it('Concurrency: release(key) and leases mixed on one key free every permit, as in memory', async () => {
    for (const order of ['key first', 'lease first']) {
      const mem = new memory.Concurrency({ limit: 3 });
      const c = new Concurrency({ redis, limit: 3, prefix: prefix() });
      // A lease (acquire), then two plain grants (tryAcquire, consume), in both limiters.
      const memLease = await mem.acquire('k');
      const lease = await c.acquire('k');
      expect([mem.tryAcquire('k'), await c.tryAcquire('k')]).toEqual([true, true]);
      expect([mem.consume('k').allowed, (await c.consume('k')).allowed]).toEqual([true, true]);
      if (order === 'key first') {
        mem.release('k', 2);
        await c.release('k', 2);
        expect((await c.stats('k')).available).toBe(mem.stats('k').available);
        memLease.release();
        await lease.release();
      } else {
        memLease.release();
        await lease.release();
        expect((await c.stats('k')).available).toBe(mem.stats('k').available);
        mem.release('k', 2);
        await c.release('k', 2);
      }
      expect([order, (await c.stats('k')).available]).toEqual([order, mem.stats('k').available]);
      expect(mem.stats('k').available).toBe(3);
      await c.close();
    }
    // Past the first 32 grants: 40 leases, then a plain grant, which release(key) finds.
    const c = new Concurrency({ redis, limit: 50, prefix: prefix() });
    const leases = [];
    for (let i = 0; i < 40; i++) leases.push(await c.acquire('k'));
    expect(await c.tryAcquire('k', 2)).toBe(true);
    await c.release('k');
    await c.release('k');
    for (const l of leases) await l.release();
    expect((await c.stats('k')).available).toBe(50);
    await c.close();
  });

  it('Concurrency: a release published while the first subscription is being made still wakes its waiter', async () => {
    // Two waiters pause at once: the first asks for the Pub/Sub subscription, the second
    // finds it asked for but not made yet. A release then reaches nobody: the second must
    // wait for the subscription too and try again, not sleep until a lease expires.
    const { port } = redis.options as { port: number };
    const holders = new Redis(port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    const monitor = await new Redis(port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
    }).monitor();
    try {
      const p = prefix();
      const holding = new Concurrency({ redis: holders, limit: 1, prefix: p, leaseMs: 60_000 });
      const waiting = new Concurrency({ redis, limit: 1, prefix: p, queueLimit: 5 });
      // Both script forms loaded: the tries below are one EVALSHA each.
      await Promise.all([waiting.tryAcquire('x'), waiting.tryAcquire('y')]);
      await Promise.all([waiting.release('x'), waiting.release('y')]);
      const leaseA = await holding.acquire('A');
      const leaseB = await holding.acquire('B');
      let triesOfB = 0;
      let released: Promise<void> | undefined;
      monitor.on('monitor', (_time: string, args: string[]) => {
        const waitTry = args[0]?.toUpperCase() === 'EVALSHA' && args.includes('w');
        // B's second refused try: its waiter pauses now, while A's makes the subscription.
        if (waitTry && args.some((a) => a.includes('{B}')) && ++triesOfB === 2) {
          released = leaseB.release();
        }
      });
      // Without the fix B sleeps until A's lease expires: a TimeoutError after 3 s.
      const a = waiting.acquire('A', 1, { timeoutMs: 3000 });
      const b = await waiting.acquire('B', 1, { timeoutMs: 3000 });
      expect(released).toBeDefined();
      await released;
      await b.release();
      await leaseA.release();
      await (await a).release();
      await waiting.close();
      await holding.close();
    } finally {
      holders.disconnect();
      monitor.disconnect();
    }
  });

  it("a chain's lease over a Redis Concurrency reports a release Redis cannot take, never drops it", async () => {
    const own = await RedisServer.start();
    const client = new Redis(own.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      enableOfflineQueue: false,
    });
    client.on('error', () => {});
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'ATOMIC_LIMITER_RELEASE_FAILED') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    const printWarnings = holdWarnings(onWarning);
    try {
      if (client.status !== 'ready') await once(client, 'ready');
      const sem = new Concurrency({ redis: client, limit: 2, timeoutMs: 200, prefix: 'cl' });
      const both = chain(sem, new memory.FixedWindow({ limit: 10, windowMs: 1000 }));
      const awaited = await both.acquire('k');
      const disposed = await both.acquire('k');
      await own.stop();
      // Awaited: the failure is the caller's to see.
      await expect(Promise.resolve(awaited.release())).rejects.toThrow(BackendUnavailableError);
      // Disposed (which cannot report): a process warning, not an unhandled rejection.
      disposed[Symbol.dispose]();
      await until(() => warnings.length === 1, 'the warning');
      expect(warnings[0]).toMatch(/could not be given back/);
    } finally {
      process.off('warning', onWarning);
      printWarnings();
      client.disconnect();
      await own.close();
    }
  });

  it('close() gives back a sleeping reservation and still releases leases', async () => {
    const clock = new ManualClock(0);
    const p = prefix();
    const b = new TokenBucket({
      redis,
      capacity: 1,
      refillPerSecond: 1,
      queueLimit: 1,
      clock,
      prefix: p,
    });
    expect(await b.tryAcquire('k')).toBe(true);
    const waiting = b.acquire('k');
    await settle(redis);
    const closed = expect(waiting).rejects.toBeInstanceOf(LimiterClosedError);
    await b.close();
    await closed;
    await settle(redis);
    clock.advance(1000);
    // The reservation (1 s) went back: at 1 s the bucket holds one token again.
    const same = new TokenBucket({ redis, capacity: 1, refillPerSecond: 1, clock, prefix: p });
    expect((await same.stats('k')).available).toBe(1);

    const c = new Concurrency({ redis, limit: 1, prefix: prefix() });
    const lease = await c.acquire('k');
    await c.close();
    await lease.release();
    const again = new Concurrency({ redis, limit: 1, prefix: c.prefix });
    expect((await again.stats('k')).available).toBe(1);
  });
});
