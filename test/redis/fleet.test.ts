import { execFileSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/index.js';
import {
  attach,
  Concurrency,
  FixedWindow,
  LeakyBucket,
  SlidingLog,
  TokenBucket,
} from '../../src/redis/index.js';
import { cli, RedisServer, withRedisServer } from '../helpers/redis.js';

// Fleet mode in one process: blocks leased from a real redis-server, spent locally.

let server: RedisServer;
let redis: Redis;

/** EVALSHA calls the server has run since the last CONFIG RESETSTAT. */
async function evalCalls(): Promise<number> {
  const info = await cli(server.port, 'INFO', 'commandstats');
  const m = /cmdstat_evalsha:calls=(\d+)/.exec(info);
  return m ? Number(m[1]) : 0;
}

/**
 * Refuses `tb`'s key 'k' once from Redis while a script ahead of it on the connection keeps
 * Redis busy for 30 ms (so Redis decides 30 ms after sending), then calls until a call is
 * allowed. Returns the EVALSHA calls that took (from CONFIG RESETSTAT).
 */
async function callsForOneRefusal(tb: TokenBucket): Promise<number> {
  await cli(server.port, 'CONFIG', 'RESETSTAT');
  const busy = redis.eval(
    `local s = redis.call('TIME')
     local n
     repeat n = redis.call('TIME') until (n[1] - s[1]) * 1e6 + (n[2] - s[2]) >= 30000
     return 1`,
    0,
  );
  let refused = 0;
  for (let d = await tb.consume('k'); !d.allowed; d = await tb.consume('k')) refused++;
  await busy;
  expect(refused).toBeGreaterThan(1); // answered locally while cached
  return evalCalls();
}

/**
 * Keeps this thread busy until 300 ms after `t0` (a refusal that came meanwhile is read only
 * then), then checks that Redis has a permit for key 'k' again and that `tb` grants it.
 */
async function afterBusyAllowed(t0: number, plain: TokenBucket, tb: TokenBucket): Promise<void> {
  while (Date.now() - t0 < 300) {}
  expect((await plain.stats('k')).available).toBeGreaterThanOrEqual(1);
  expect((await tb.consume('k')).allowed).toBe(true);
}

withRedisServer((s, r) => {
  server = s;
  redis = r;
});

describe('fleet mode: blocks', () => {
  /** 100 decisions on key 'k' of a FixedWindow of 100 a minute in blocks of 10, counted. */
  async function hundredInBlocks(prefix: string, ahead: { leaseAhead?: boolean } = {}) {
    const clock = new ManualClock(1_000_000);
    const fw = new FixedWindow({
      redis,
      limit: 100,
      windowMs: 60_000,
      block: 10,
      clock,
      prefix,
      ...ahead,
    });
    await fw.consume('warm'); // the script loaded: no NOSCRIPT to count below
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    const decisions = [];
    for (let i = 0; i < 100; i++) decisions.push(await fw.consume('k'));
    expect(decisions.every((d) => d.allowed)).toBe(true);
    return { fw, decisions, calls: await evalCalls() };
  }
  const REFUSED = { allowed: false, reason: 'limited', remaining: 0 };
  const RETRY_AFTER_MS = 60_000 - (1_000_000 % 60_000);

  it('leases a block per round trip and spends it locally', async () => {
    const { fw, decisions, calls } = await hundredInBlocks('f1');
    // remaining is what this process may still spend without asking Redis.
    expect(decisions.slice(0, 8).map((d) => d.remaining)).toEqual([9, 8, 7, 6, 5, 4, 3, 2]);
    // One lease of 10 each time the block was empty (none ahead by default): ten.
    expect(calls).toBe(100 / 10);
    // The block is empty: Redis is asked, refuses, and the refusal is cached.
    expect(await fw.consume('k')).toMatchObject({ ...REFUSED, retryAfterMs: RETRY_AFTER_MS });
    expect(await evalCalls()).toBe(calls + 1);
    expect(await fw.consume('k')).toMatchObject(REFUSED);
    expect(await evalCalls()).toBe(calls + 1);
    await fw.close();
  });

  it('with leaseAhead, leases a block or two per round trip, and caches the last refusal', async () => {
    const { fw, calls } = await hundredInBlocks('f1a', { leaseAhead: true });
    // Asks granted a block of 10 each, or 20 once the key needed a second lease ahead (its
    // two leases ahead then go in one round trip): at least five; past the limit, at most
    // three more that Redis refused (the leases ahead of the last block): that refusal is
    // now cached. A lease taken ahead goes out as its own command, at once.
    expect(calls).toBeGreaterThanOrEqual(100 / 20);
    expect(calls).toBeLessThanOrEqual(13);
    expect(await fw.consume('k')).toMatchObject({ ...REFUSED, retryAfterMs: RETRY_AFTER_MS });
    expect(await evalCalls()).toBe(calls);
    await fw.close();
  });

  it('takes up to a block, at least what is asked, and never more than the limit', async () => {
    const clock = new ManualClock(0);
    const tb = new TokenBucket({
      redis,
      capacity: 25,
      refillPerSecond: 1e-6,
      block: 10,
      clock,
      prefix: 'f2',
    });
    let admitted = 0;
    for (let i = 0; i < 40; i++) if (await tb.tryAcquire('k')) admitted++;
    expect(admitted).toBe(25);
    await tb.close();
  });

  it('gives unspent permits back on close(), in the window they were taken in', async () => {
    const clock = new ManualClock(0);
    const a = new FixedWindow({ redis, limit: 20, windowMs: 1000, block: 8, clock, prefix: 'f3' });
    expect((await a.consume('k')).allowed).toBe(true);
    expect((await a.stats('k')).available).toBe(12);
    await a.close();
    const check = new FixedWindow({ redis, limit: 20, windowMs: 1000, clock, prefix: 'f3' });
    expect((await check.stats('k')).available).toBe(19);
    // A block taken in a window that has passed goes nowhere.
    const b = new FixedWindow({ redis, limit: 20, windowMs: 1000, block: 8, clock, prefix: 'f3' });
    await b.reset('k');
    expect((await b.consume('k')).allowed).toBe(true);
    clock.advance(1000);
    await b.close();
    expect((await check.stats('k')).available).toBe(20);
  });

  it('close() waits for the leases still out: a lease taken ahead lands, then goes back', async () => {
    const clock = new ManualClock(0);
    const options = { redis, capacity: 100, refillPerSecond: 1e-6, clock, prefix: 'f3b' };
    const tb = new TokenBucket({ ...options, block: 8, leaseAhead: true });
    // A block of 8; the sixth permit leaves a quarter of it, and the next block is leased
    // ahead in the background: Redis takes its 8 before this thread has them.
    for (let i = 0; i < 6; i++) expect(await tb.tryAcquire('k')).toBe(true);
    await tb.close(); // called while that lease is out
    const check = new TokenBucket(options);
    expect((await check.stats('k')).available).toBe(100 - 6);
  });

  it('a lease taken ahead reaches Redis while the thread goes on spending, before it yields', async () => {
    const clock = new ManualClock(0);
    const options = { redis, capacity: 100, refillPerSecond: 1e-6, clock, prefix: 'f3c' };
    const tb = new TokenBucket({ ...options, block: 8, leaseAhead: true });
    expect(await tb.tryAcquire('k')).toBe(true); // the first block: a round trip
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    // Spent from the block: promises already settled, so this thread never reaches its
    // event loop from here on. The sixth permit leaves a quarter: the next block is leased.
    for (let i = 0; i < 5; i++) expect(await tb.tryAcquire('k')).toBe(true);
    // Asked from another process, this thread still not yielding: the lease is at Redis
    // (sent when taken, not when the thread next turns its event loop or runs dry).
    const ask = ['-h', '127.0.0.1', '-p', String(server.port), 'INFO', 'commandstats'];
    let calls = 0;
    for (let tries = 0; tries < 100 && calls === 0; tries++) {
      const info = execFileSync('redis-cli', ask);
      calls = Number(/cmdstat_evalsha:calls=(\d+)/.exec(String(info))?.[1] ?? 0);
    }
    expect(calls).toBe(1);
    await tb.close();
    const check = new TokenBucket(options);
    expect((await check.stats('k')).available).toBe(100 - 6);
  });

  it('gives back an aged-out block before leasing a new one', async () => {
    const clock = new ManualClock(0);
    const log = new SlidingLog({
      redis,
      limit: 10,
      windowMs: 3_600_000,
      block: 4,
      blockTtlMs: 100,
      clock,
      prefix: 'f4',
    });
    expect((await log.consume('k')).remaining).toBe(3);
    clock.advance(100);
    const d = await log.consume('k');
    expect(d).toMatchObject({ allowed: true, remaining: 3 });
    // 1 + 1 spent, 3 in hand: the 3 aged-out permits went back (sent before the new lease,
    // on the same connection).
    expect((await log.stats('k')).available).toBe(10 - 2 - 3);
    await log.close();
    const check = new SlidingLog({ redis, limit: 10, windowMs: 3_600_000, clock, prefix: 'f4' });
    expect((await check.stats('k')).available).toBe(8);
  });
});

describe('fleet mode: blockKeys slots are reused', () => {
  it('a new key takes over the slot of a key whose block aged out, giving its permits back', async () => {
    const clock = new ManualClock(1_000_000);
    const tb = new TokenBucket({
      redis,
      capacity: 1000,
      refillPerSecond: 1e-6,
      block: 10,
      blockKeys: 4,
      blockTtlMs: 1000,
      clock,
      prefix: 'f-reuse',
    });
    // Every slot taken: four keys, one call each, 9 permits of each still in hand.
    for (let i = 0; i < 4; i++) expect((await tb.consume(`old${i}`)).remaining).toBe(9);
    clock.advance(1000); // their blocks age out
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    const decisions = [];
    for (let i = 0; i < 100; i++) decisions.push(await tb.consume('hot'));
    expect(decisions.every((d) => d.allowed)).toBe(true);
    // The hot key is spent from blocks: one lease per 10 decisions (the give-back of the
    // aged-out block whose slot it took goes in the first one's batch).
    expect(await evalCalls()).toBe(10);
    // The slot's old key got its 9 unspent permits back; the three others still hold theirs.
    const check = new TokenBucket({
      redis,
      capacity: 1000,
      refillPerSecond: 1e-6,
      clock,
      prefix: 'f-reuse',
    });
    const available = [];
    for (let i = 0; i < 4; i++) available.push((await check.stats(`old${i}`)).available);
    expect(available.sort()).toEqual([990, 990, 990, 999]);
    await tb.close();
  });

  it('a slot whose block still counts is never taken over: the new key goes to Redis directly', async () => {
    const clock = new ManualClock(1_000_000);
    const tb = new TokenBucket({
      redis,
      capacity: 1000,
      refillPerSecond: 1e-6,
      block: 10,
      blockKeys: 2,
      clock,
      prefix: 'f-reuse2',
    });
    for (let i = 0; i < 2; i++) expect((await tb.consume(`old${i}`)).remaining).toBe(9);
    // Their blocks are fresh: both keys keep their slots, and the new key's call is Redis's
    // own decision (no block: what Redis has left, not a block's).
    expect((await tb.consume('new')).remaining).toBe(999);
    expect((await tb.consume('old0')).remaining).toBe(8);
    expect((await tb.consume('old1')).remaining).toBe(8);
    await tb.close();
  });
});

describe('fleet mode: lease sizes', () => {
  it('with maxBlock, a key spent faster than a round trip gets leases up to it; none is lost', async () => {
    const clock = new ManualClock(0);
    const opts = { redis, capacity: 1_000_000, refillPerSecond: 1e-6, clock, prefix: 'f7' };
    const tb = new TokenBucket({ ...opts, block: 16, maxBlock: 128, leaseAhead: true });
    const check = new TokenBucket(opts);
    // The most a process may hold: two leases out on a quarter of one in hand, a lease
    // being at most maxBlock (128).
    const most = 2 * 128 + 128 / 4;
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    let admitted = 0;
    for (let i = 0; i < 2000; i++) {
      if (await tb.tryAcquire('k')) admitted++;
      if (i % 250 === 249) {
        const held = opts.capacity - admitted - (await check.stats('k')).available;
        expect([i, held >= 0 && held <= most]).toEqual([i, true]);
      }
    }
    expect(admitted).toBe(2000);
    // Blocks of 16 would take 125 leases; grown ones (each doubling when the caller ran dry
    // waiting for a lease) take a few to grow, then one per 128. The stats calls count too.
    const calls = (await evalCalls()) - 8;
    expect(calls).toBeGreaterThanOrEqual(Math.ceil(2000 / most));
    expect(calls).toBeLessThanOrEqual(40);
    await tb.close();
    expect((await check.stats('k')).available).toBe(opts.capacity - 2000);
  });

  it('leases fall back to one block once the key cools (its block aged out)', async () => {
    const clock = new ManualClock(0);
    const opts = { redis, capacity: 1_000_000, refillPerSecond: 1e-6, clock, prefix: 'f8' };
    const tb = new TokenBucket({
      ...opts,
      block: 16,
      maxBlock: 128,
      blockTtlMs: 500,
      leaseAhead: true,
    });
    const check = new TokenBucket(opts);
    for (let i = 0; i < 1000; i++) expect(await tb.tryAcquire('k')).toBe(true);
    // The last calls may have leased ahead; its reply, if it landed after the block aged
    // out, would fill the block again (a key still busy). A call on the same connection
    // returns after it: the lease is in the block before time moves.
    await check.stats('k');
    clock.advance(500);
    // The aged-out permits go back, then one block of 16 is leased (15 left: no lease ahead).
    expect(await tb.consume('k')).toMatchObject({ allowed: true, remaining: 15 });
    expect((await check.stats('k')).available).toBe(opts.capacity - 1001 - 15);
    await tb.close();
    expect((await check.stats('k')).available).toBe(opts.capacity - 1001);
  });

  it("a LeakyBucket's leases stay one block (a lease is a burst)", async () => {
    const clock = new ManualClock(0);
    const lb = new LeakyBucket({
      redis,
      capacity: 4000,
      ratePerSecond: 1000,
      block: 8,
      leaseAhead: true,
      clock,
      prefix: 'f10',
    });
    // Spent as fast as it leaks, by one caller that never yields: it runs dry with a lease
    // out (a token bucket's leases would grow), and each lease comes when the bucket is empty.
    let allowed = 0;
    let most = 0;
    for (let i = 0; i < 300; i++) {
      clock.advance(1);
      const d = await lb.consume('k');
      if (d.allowed) {
        allowed++;
        most = Math.max(most, d.remaining);
      }
    }
    expect(allowed).toBeGreaterThan(200);
    expect(most).toBe(7);
    await lb.close();
    expect(
      () => new LeakyBucket({ redis, capacity: 4000, ratePerSecond: 1000, block: 8, maxBlock: 16 }),
    ).toThrow(/"maxBlock" is not for a LeakyBucket \(its lease is a burst/);
  });

  it("a hot LeakyBucket key's leases ahead stay one block each: no burst past block", async () => {
    const clock = new ManualClock(0);
    const opts = { redis, capacity: 8, ratePerSecond: 1, clock, prefix: 'f10b' };
    const lb = new LeakyBucket({ ...opts, block: 8, blockTtlMs: 1e6, leaseAhead: true });
    const plain = new LeakyBucket(opts); // on the same connection: answered after lb's leases
    // A block of 8; the leases ahead at 2 and 1 left are refused (the bucket is full): the
    // second one made the key hot.
    for (let i = 0; i < 7; i++) expect(await lb.tryAcquire('k')).toBe(true);
    await plain.stats('k');
    clock.advance(9000); // the bucket empty again
    let burst = 0;
    for (let i = 0; i < 40; i++) {
      if (await lb.tryAcquire('k')) burst++;
      await plain.stats('x'); // lets every lease land
    }
    // The permit left, and one lease of a block — not two leases' worth at once.
    expect(burst).toBe(1 + 8);
    await lb.close();
  });

  it('maxBlock: checked against block and the limit', () => {
    const opts = { redis, capacity: 1000, refillPerSecond: 1 };
    expect(() => new TokenBucket({ ...opts, maxBlock: 64 })).toThrow(
      /"maxBlock" must be an integer from "block"/,
    );
    expect(() => new TokenBucket({ ...opts, block: 64, maxBlock: 32 })).toThrow(RangeError);
    expect(() => new TokenBucket({ ...opts, block: 64, maxBlock: 2000 })).toThrow(
      /"maxBlock" must be from "block" to the limit \(1000\)/,
    );
    expect(() => new TokenBucket({ ...opts, block: 64, maxBlock: 1.5 })).toThrow(/"maxBlock"/);
  });

  it('two leases out at most, on an eighth of one in hand, whichever thread reads its reply late', async () => {
    const clock = new ManualClock(0);
    const opts = { redis, capacity: 100, refillPerSecond: 1e-6, clock, prefix: 'f9b' };
    const x = new TokenBucket({ ...opts, block: 8, leaseAhead: true });
    // A second thread's limiter over the same blocks, whose client reads nothing: its
    // lease's reply waits unread, as a thread busy spending leaves it.
    const slow = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    const y = attach(x.handle, { redis: slow });
    const check = new TokenBucket(opts);
    let admitted = 0;
    const held = async () => opts.capacity - admitted - (await check.stats('k')).available;
    const spend = async (limiter: { tryAcquire(key: string): Promise<boolean> }, n: number) => {
      for (let i = 0; i < n; i++) {
        expect(await limiter.tryAcquire('k')).toBe(true);
        admitted++;
      }
    };
    const slowId = String(await slow.client('ID'));
    // A limiter's first call reads the options record first (docs/redis.md, "Changing a
    // limit"): done now, so that no read stands between the calls below and their replies.
    await x.stats('other');
    await y.stats('other');
    slow.stream.pause();
    // From here until held() asks Redis, no event-loop turn: x's replies wait too.
    await spend(x, 6); // a block of 8; 2 left: x leases the next ahead
    await spend(y, 1); // 1 left with a lease out: y leases a second
    // y's lease came on another connection: counted once Redis has run it.
    while (!(await cli(server.port, 'CLIENT', 'LIST', 'ID', slowId)).includes('cmd=evalsha')) {}
    expect(await held()).toBe(1 + 2 * 8);
    // x's lease lands (stats() is answered after it, on x's connection): 9 in hand.
    await spend(x, 7); // 2 left, y's lease still out: not a third lease yet
    expect(await held()).toBe(2 + 8);
    await spend(x, 1); // an eighth left with one out: the second
    expect(await held()).toBe(1 + 2 * 8);
    slow.stream.resume();
    await y.close();
    await x.close();
    slow.disconnect();
    expect(await check.stats('k')).toMatchObject({ available: opts.capacity - admitted });
  });

  it("a hot key's two leases ahead go in one round trip, and never a third beside them", async () => {
    const clock = new ManualClock(0);
    const opts = { redis, capacity: 100, refillPerSecond: 1e-6, clock, prefix: 'f9c' };
    const tb = new TokenBucket({ ...opts, block: 8, leaseAhead: true });
    const check = new TokenBucket(opts); // on the same connection: answered after tb's leases
    let admitted = 0;
    const held = async () => opts.capacity - admitted - (await check.stats('k')).available;
    const spend = async (n: number) => {
      for (let i = 0; i < n; i++) {
        expect(await tb.tryAcquire('k')).toBe(true);
        admitted++;
      }
    };
    // From here until held() asks Redis, no event-loop turn: no reply is read.
    await spend(6); // a block of 8; 2 left: the next is leased ahead
    await spend(1); // an eighth left with it out: a second one (the key is now hot)
    expect(await held()).toBe(1 + 2 * 8);
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    await spend(15); // 2 left, no lease out: both leases ahead, in one call
    await spend(1); // an eighth left: both are out already, so no other
    expect(await held()).toBe(1 + 2 * 8);
    // The lease of two blocks, and stats().
    expect(await evalCalls()).toBe(2);
    await tb.close();
    expect(await check.stats('k')).toMatchObject({ available: opts.capacity - admitted });
  });

  it("with leaseAhead, without maxBlock, a hot key's leases stay one block (its bound holds)", async () => {
    const clock = new ManualClock(0);
    const opts = { redis, capacity: 100, refillPerSecond: 1e-6, clock, prefix: 'f9' };
    const tb = new TokenBucket({ ...opts, block: 8, leaseAhead: true });
    const check = new TokenBucket(opts);
    let admitted = 0;
    for (let i = 0; i < 60; i++) {
      if (await tb.tryAcquire('k')) admitted++;
      // Held: at most two blocks out on a quarter of one in hand.
      const held = opts.capacity - admitted - (await check.stats('k')).available;
      expect([i, held >= 0 && held <= 2 * 8 + 2]).toEqual([i, true]);
    }
    expect(admitted).toBe(60);
    await tb.close();
  });
});

describe('fleet mode: without leaseAhead (the default)', () => {
  it.for([
    { name: 'by default', ahead: {} },
    { name: 'leaseAhead: false', ahead: { leaseAhead: false } },
  ])(
    '$name, leases a block only when one is empty: a process holds at most block − 1',
    async ({ ahead }) => {
      const clock = new ManualClock(0);
      const prefix = 'leaseAhead' in ahead ? 'f10s' : 'f10d';
      const opts = { redis, capacity: 100, refillPerSecond: 1e-6, clock, prefix };
      const tb = new TokenBucket({ ...opts, block: 8, ...ahead });
      const check = new TokenBucket(opts);
      await cli(server.port, 'CONFIG', 'RESETSTAT');
      let admitted = 0;
      let most = 0;
      for (let i = 0; i < 60; i++) {
        if (await tb.tryAcquire('k')) admitted++;
        const held = opts.capacity - admitted - (await check.stats('k')).available;
        expect([i, held >= 0 && held <= 8 - 1]).toEqual([i, true]);
        most = Math.max(most, held);
      }
      expect(admitted).toBe(60);
      expect(most).toBe(7); // a block, less the permit that fetched it
      // One round trip per block (the stats calls aside: one each, 60 in all).
      expect((await evalCalls()) - 60).toBe(Math.ceil(60 / 8));
      await tb.close();
      expect((await check.stats('k')).available).toBe(opts.capacity - 60);
    },
  );
});

describe('fleet mode: cached refusals', () => {
  it('answers a refused key locally until retryAfterMs, counted down exactly', async () => {
    const clock = new ManualClock(0);
    const fw = new FixedWindow({ redis, limit: 5, windowMs: 1000, block: 5, clock, prefix: 'f5' });
    for (let i = 0; i < 5; i++) expect((await fw.consume('k')).allowed).toBe(true);
    // The block is spent: the next call asks Redis, which refuses; the refusal is cached.
    const first = await fw.consume('k');
    expect(first).toMatchObject({ allowed: false, reason: 'limited', retryAfterMs: 1000 });
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    clock.advance(250);
    for (let i = 0; i < 100; i++) {
      expect(await fw.consume('k')).toMatchObject({ allowed: false, retryAfterMs: 750 });
    }
    expect(await evalCalls()).toBe(0);
    clock.advance(750);
    expect((await fw.consume('k')).allowed).toBe(true);
    expect(await evalCalls()).toBe(1);
    await fw.close();
  });

  it('on Redis TIME, keeps a refusal until Redis would admit: one round trip per retryAfterMs', async () => {
    // 1 permit, 5 a second: a refusal says ~200 ms from when Redis ran the script, which
    // may be well after sending: here a script ahead of it on the connection keeps Redis
    // busy for 30 ms. Counted from sending, the cached refusal would end 30 ms early, and
    // the next call would meet a second refusal from Redis.
    const tb = new TokenBucket({ redis, capacity: 1, refillPerSecond: 5, block: 1, prefix: 'rt' });
    expect((await tb.consume('k')).allowed).toBe(true);
    // One call refused (then cached), one admitted.
    expect(await callsForOneRefusal(tb)).toBe(2);
    await tb.close();
  });
});

describe('fleet mode: a refusal read late', () => {
  it('on Redis TIME, a thread busy when the refusal came does not stretch it', async () => {
    // 4 permits, 5 a second; blocks of 4. The lease taken ahead at 1 left is refused (~200
    // ms), and its reply waits unread while the thread spends 300 ms without yielding.
    const opts = { redis, capacity: 4, refillPerSecond: 5, prefix: 'late' };
    const tb = new TokenBucket({ ...opts, block: 4 });
    const plain = new TokenBucket(opts);
    for (let i = 0; i < 3; i++) expect((await tb.consume('k')).allowed).toBe(true);
    const t0 = Date.now();
    expect((await tb.consume('k')).allowed).toBe(true); // the last permit; the lease goes out
    // Redis has a permit again (it refilled at ~200 ms), and so does this process.
    await afterBusyAllowed(t0, plain, tb); // the refusal is read only after 300 ms
    await tb.close();
  });

  it('with no earlier reply on its thread side, a refusal read late counts from sending', async () => {
    const opts = { redis, capacity: 4, refillPerSecond: 5, prefix: 'late1' };
    const tb = new TokenBucket({ ...opts, block: 4 });
    // Another thread's side of the blocks (attach(), as in a worker): no reply of its own yet.
    const other = attach(tb.handle, { redis });
    const plain = new TokenBucket(opts);
    for (let i = 0; i < 2; i++) expect((await tb.consume('k')).allowed).toBe(true);
    const t0 = Date.now();
    // 1 left: other's lease ahead goes out (refused, ~200 ms); then the last permit.
    expect((await other.consume('k')).allowed).toBe(true);
    expect((await other.consume('k')).allowed).toBe(true);
    await afterBusyAllowed(t0, plain, tb); // the refusal is read only after 300 ms
    await other.close();
    await tb.close();
  });

  it('after the clocks move apart, a reply bounds the offset afresh: still one round trip per retryAfterMs', async () => {
    // As 'on Redis TIME, keeps a refusal…' above, with the local clock stepped 1 s ahead
    // (Redis's, seen from here, 1 s back) after the first reply.
    const tb = new TokenBucket({ redis, capacity: 2, refillPerSecond: 5, block: 1, prefix: 'rs' });
    expect((await tb.consume('k')).allowed).toBe(true);
    const now = performance.now.bind(performance);
    const stepped = vi.spyOn(performance, 'now').mockImplementation(() => now() + 1000);
    try {
      expect((await tb.consume('k')).allowed).toBe(true); // a quick reply after the step
      expect(await callsForOneRefusal(tb)).toBe(2);
    } finally {
      stepped.mockRestore();
    }
    await tb.close();
  });
});

describe('fleet mode: a refusal read late, after the clocks moved apart', () => {
  it("Redis's clock ahead: the refusal counts from sending, not from reading", async () => {
    // As 'a thread busy when the refusal came…', with Redis's clock, seen from here, 1 s
    // ahead after the first replies (the local one stepped back).
    const opts = { redis, capacity: 4, refillPerSecond: 5, prefix: 'late2' };
    const tb = new TokenBucket({ ...opts, block: 4 });
    const plain = new TokenBucket(opts);
    for (let i = 0; i < 2; i++) expect((await tb.consume('k')).allowed).toBe(true);
    const now = performance.now.bind(performance);
    const stepped = vi.spyOn(performance, 'now').mockImplementation(() => now() - 1000);
    try {
      const t0 = Date.now();
      expect((await tb.consume('k')).allowed).toBe(true); // 1 left: the lease ahead, refused
      expect((await tb.consume('k')).allowed).toBe(true);
      await afterBusyAllowed(t0, plain, tb); // the refusal is read only after 300 ms
    } finally {
      stepped.mockRestore();
    }
    await tb.close();
  });
});

describe('fleet mode: bad input', () => {
  it('refuses a block larger than the limit or not a positive integer, naming it', () => {
    const base = { redis, limit: 10, windowMs: 1000 };
    expect(() => new FixedWindow({ ...base, block: 11 })).toThrow(RangeError);
    expect(() => new FixedWindow({ ...base, block: 11 })).toThrow(/"block"/);
    expect(() => new FixedWindow({ ...base, block: 0 })).toThrow(RangeError);
    expect(() => new FixedWindow({ ...base, block: 1.5 })).toThrow(/"block"/);
    expect(() => new FixedWindow({ ...base, block: '4' as never })).toThrow(TypeError);
    expect(() => new FixedWindow({ ...base, block: 4, blockTtlMs: 0 })).toThrow(/"blockTtlMs"/);
    expect(() => new Concurrency({ redis, limit: 10, block: 2 })).toThrow(TypeError);
    expect(() => new Concurrency({ redis, limit: 10, block: 2 })).toThrow(/"block"/);
    expect(() => new FixedWindow({ ...base, block: 4, leaseAhead: 'no' as never })).toThrow(
      /option "leaseAhead" must be a boolean/,
    );
    expect(() => new FixedWindow({ ...base, leaseAhead: false })).toThrow(RangeError);
    expect(() => new FixedWindow({ ...base, leaseAhead: false })).toThrow(/needs "block"/);
    expect(() => new Concurrency({ redis, limit: 10, leaseAhead: false } as never)).toThrow(
      /"leaseAhead"/,
    );
  });

  it('attach() refuses what is not a Redis rate limiter handle', () => {
    expect(() => attach({} as never, { redis })).toThrow(TypeError);
    const fw = new FixedWindow({ redis, limit: 10, windowMs: 1000, block: 2 });
    expect(() => attach(fw.handle, { redis, colour: 1 } as never)).toThrow(/"colour"/);
    // The handle is structured-cloneable: it survives the trip to a thread.
    const copy = structuredClone(fw.handle);
    expect(attach(copy, { redis }).block).toBe(2);
  });
});

describe('fleet mode: Redis unavailable', () => {
  it('spends permits in hand, then applies whenUnavailable', async () => {
    const own = await RedisServer.start();
    const client = new Redis(own.port, '127.0.0.1', {
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
    });
    // While the server is down the client reports its failed reconnects: those, and only those.
    const errors: Error[] = [];
    client.on('error', (e: Error) => errors.push(e));
    try {
      const clock = new ManualClock(0);
      const fw = new FixedWindow({
        redis: client,
        limit: 100,
        windowMs: 60_000,
        block: 5,
        clock,
        timeoutMs: 200,
        whenUnavailable: 'deny',
        prefix: 'f6',
      });
      expect((await fw.consume('k')).allowed).toBe(true);
      await own.stop();
      for (let i = 0; i < 4; i++) expect((await fw.consume('k')).allowed).toBe(true);
      expect(await fw.consume('k')).toMatchObject({ allowed: false, reason: 'unavailable' });
      await fw.close().catch(() => {});
      for (const e of errors) expect(e.message).toMatch(/ECONNREFUSED|Connection is closed/);
    } finally {
      client.disconnect();
      await own.close();
    }
  });
});
