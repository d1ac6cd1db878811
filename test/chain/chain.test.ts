import { describe, expect, it } from 'vitest';
import {
  type ChainMember,
  Concurrency,
  chain,
  FixedWindow,
  ManualClock,
  SlidingLog,
  TokenBucket,
} from '../../src/index.js';
import { admitted } from '../helpers/limiters.js';

// chain(): one decision over several limiters, all or nothing.

describe('chain()', () => {
  it('grants from all limiters or from none', () => {
    const clock = new ManualClock();
    const perSecond = new TokenBucket({ capacity: 5, refillPerSecond: 5, clock });
    const perMinute = new FixedWindow({ limit: 3, windowMs: 60_000, clock });
    const both = chain(perSecond, perMinute);
    expect(admitted(both, 'k', 10)).toBe(3);
    // The refused attempts took nothing from the first limiter.
    expect(perSecond.stats('k').available).toBe(2);
    const d = both.consume('k');
    expect(d).toMatchObject({ allowed: false, limit: 3, reason: 'limited' });
    expect(d.retryAfterMs).toBe(60_000);
  });

  it('refunds the earlier limiters when a later one throws', () => {
    const a = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock: new ManualClock() });
    const b = new Concurrency({ limit: 5 });
    b.close();
    expect(() => chain(a, b).tryAcquire('k')).toThrow();
    expect(a.stats('k').available).toBe(5);
    expect(() => chain()).toThrow(TypeError);
  });

  it('chain() names an argument that is not a limiter', () => {
    const a = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    // @ts-expect-error: 5 is not a limiter
    expect(() => chain(a, 5)).toThrow(/argument 1 must be a limiter.*got 5/);
    // @ts-expect-error: nor is an array
    expect(() => chain([a])).toThrow(TypeError);
  });
});

/** A chain's answer that must be synchronous (every member answered synchronously). */
function sync<T>(answer: T | Promise<T>): T {
  expect(answer).not.toBeInstanceOf(Promise);
  return answer as T;
}

/** A member that logs each call to `log`, then passes it to `l`. */
function logged(name: string, l: ChainMember, log: string[]): ChainMember {
  return {
    limit: l.limit,
    consume(key, permits) {
      log.push(`${name}.consume(${key}, ${permits})`);
      return l.consume(key, permits);
    },
    refund(key, permits) {
      log.push(`${name}.refund(${key}, ${permits})`);
      return l.refund(key, permits);
    },
  };
}

/** A member whose consume() throws `error`, counting its calls. */
function failing(error: Error): ChainMember & { calls: number } {
  return {
    limit: 100,
    calls: 0,
    consume() {
      this.calls++;
      throw error;
    },
    refund() {},
  };
}

describe('chain(): the order of asking', () => {
  it('asks every member in the order given, with the same key and permits', () => {
    const clock = new ManualClock();
    const log: string[] = [];
    const a = logged('a', new TokenBucket({ capacity: 5, refillPerSecond: 1, clock }), log);
    const b = logged('b', new FixedWindow({ limit: 3, windowMs: 1000, clock }), log);
    const c = logged('c', new SlidingLog({ limit: 10, windowMs: 1000, clock }), log);
    expect(sync(chain(a, b, c).consume('k', 2)).allowed).toBe(true);
    expect(log).toEqual(['a.consume(k, 2)', 'b.consume(k, 2)', 'c.consume(k, 2)']);
  });

  it('on a refusal asks the members after it too, then gives back what was granted, latest first', () => {
    const clock = new ManualClock();
    const log: string[] = [];
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const window = new FixedWindow({ limit: 3, windowMs: 1000, clock });
    const sliding = new SlidingLog({ limit: 10, windowMs: 1000, clock });
    expect(window.tryAcquire('k', 3)).toBe(true);
    const both = chain(
      logged('a', bucket, log),
      logged('b', window, log),
      logged('c', sliding, log),
    );
    expect(sync(both.consume('k', 2))).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    expect(log).toEqual([
      'a.consume(k, 2)',
      'b.consume(k, 2)',
      'c.consume(k, 2)',
      'c.refund(k, 2)',
      'a.refund(k, 2)',
    ]);
    expect([bucket.stats('k').available, sliding.stats('k').available]).toEqual([5, 10]);
  });

  it('a member that throws before any refusal: its error reaches the caller, the earlier members get their permits back, the later ones are never asked', () => {
    const clock = new ManualClock();
    const first = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const last = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const error = new Error('member down');
    const broken = failing(error);
    expect(() => chain(first, broken, last).consume('k', 2)).toThrow(error);
    expect(broken.calls).toBe(1);
    expect(first.stats('k').available).toBe(5);
    expect(last.stats('k')).toMatchObject({ available: 5, admitted: 0, rejected: 0 });
  });

  it('a member that throws while asked past a refusal ends the asking: the refusal stands and nothing stays taken', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const window = new FixedWindow({ limit: 1, windowMs: 1000, clock });
    const after = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    expect(window.tryAcquire('k')).toBe(true);
    const broken = failing(new Error('member down'));
    const d = sync(chain(bucket, window, broken, after).consume('k'));
    expect(d).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    expect(d.decisions.map((x) => x.allowed)).toEqual([true, false]);
    expect(broken.calls).toBe(1);
    expect(bucket.stats('k').available).toBe(5);
    expect(after.stats('k')).toMatchObject({ available: 5, admitted: 0, rejected: 0 });
  });
});

describe('the Decision of a chain', () => {
  it('granted: the fewest remaining, the longest reset and the smallest limit of its members, and each member’s own Decision in order', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    const window = new FixedWindow({ limit: 5, windowMs: 2000, clock });
    const d = chain(bucket, window).consume('k', 3);
    expect(d).toMatchObject({
      allowed: true,
      remaining: 2,
      limit: 5,
      retryAfterMs: 0,
      resetAfterMs: 3000,
    });
    expect(d.decisions.map((x) => [x.remaining, x.limit, x.resetAfterMs])).toEqual([
      [7, 10, 3000],
      [2, 5, 2000],
    ]);
  });

  it('refused by two members due at the same time: the first refusing member’s Decision', () => {
    const clock = new ManualClock();
    const two = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    const three = new FixedWindow({ limit: 3, windowMs: 1000, clock });
    expect(two.tryAcquire('k', 2) && three.tryAcquire('k', 3)).toBe(true);
    expect(chain(two, three).consume('k')).toMatchObject({
      allowed: false,
      limit: 2,
      retryAfterMs: 1000,
    });
    expect(chain(three, two).consume('k')).toMatchObject({ limit: 3, retryAfterMs: 1000 });
  });
});

describe('chain(): limits and bad input', () => {
  it('its limit is the smallest its members know; a request above it is a RangeError that takes nothing', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    const window = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    const unknown: ChainMember = {
      limit: undefined, // not known yet (a cluster client before its first answer)
      consume: (key, permits) => window.consume(key, permits),
      refund: (key, permits) => window.refund(key, permits),
    };
    expect(chain(unknown).limit).toBe(Number.POSITIVE_INFINITY);
    const both = chain(bucket, unknown, window);
    expect(both.limit).toBe(5);
    expect(() => both.consume('k', 6)).toThrow(RangeError);
    expect(() => both.tryAcquire('k', 6)).toThrow(/chain: permits \(6\) exceed the limit \(5\)/);
    expect([bucket.stats('k').admitted, window.stats('k').admitted]).toEqual([0, 0]);
  });

  it('refuses permits that are not an integer from 1, naming the value, before asking any member', () => {
    const log: string[] = [];
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1 });
    const both = chain(logged('a', bucket, log));
    for (const permits of [0, -1, 1.5, Number.NaN]) {
      expect(() => both.consume('k', permits)).toThrow(RangeError);
      expect(() => both.refund('k', permits)).toThrow(RangeError);
    }
    // @ts-expect-error: permits are a number
    expect(() => both.consume('k', '2')).toThrow(/chain: permits must be an integer, got "2"/);
    expect(() => both.consume('k', 1.5)).toThrow(/from 1 to 10, got 1\.5/);
    expect(log).toEqual([]);
  });

  it('refuses a member with a limit below 1 or without refund(), naming the argument', () => {
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1 });
    const noRefund = { limit: 5, consume: () => bucket.consume() };
    const zero = { limit: 0, consume: () => bucket.consume(), refund: () => {} };
    // @ts-expect-error: no refund()
    expect(() => chain(bucket, noRefund)).toThrow(/chain: argument 1 must be a limiter/);
    expect(() => chain(zero, bucket)).toThrow(TypeError);
    expect(() => chain(zero, bucket)).toThrow(/argument 0/);
  });
});

describe('chain(): refund() and release()', () => {
  it('refund() gives the permits back to every member', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    const window = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    const both = chain(bucket, chain(window));
    expect(both.tryAcquire('k', 3)).toBe(true);
    both.refund('k', 2);
    expect([bucket.stats('k').available, window.stats('k').available]).toEqual([9, 4]);
  });

  it('release() gives held permits back to the Concurrency members, nested ones too; rate limiters keep theirs', () => {
    const clock = new ManualClock();
    const outer = new Concurrency({ limit: 2 });
    const inner = new Concurrency({ limit: 3 });
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const all = chain(outer, bucket, chain(inner));
    expect(all.tryAcquire('k', 2)).toBe(true);
    all.release('k', 2);
    expect([outer.stats('k').available, inner.stats('k').available]).toEqual([2, 3]);
    expect(bucket.stats('k').available).toBe(3);
  });
});

describe('chain(): synchronous and asynchronous members', () => {
  /** A member answering with promises, over `l`. */
  const later = (l: ChainMember): ChainMember => ({
    limit: l.limit,
    consume: async (key, permits) => l.consume(key, permits),
    refund: async (key, permits) => l.refund(key, permits),
  });

  it('answers synchronously while every member does, and with a promise once one answers with one', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const window = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    const now = chain(bucket, window).consume('k');
    expect(now).not.toBeInstanceOf(Promise);
    expect(now.allowed).toBe(true);
    const promised = chain(bucket, later(window)).consume('k');
    expect(promised).toBeInstanceOf(Promise);
    expect(await promised).toMatchObject({ allowed: true, remaining: 3 });
  });

  it('an asynchronous member refusing: the earlier members have their permits back when the promise settles', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const window = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    expect(window.tryAcquire('k', 2)).toBe(true);
    const d = await chain(bucket, later(window)).consume('k', 2);
    expect(d).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    expect(bucket.stats('k').available).toBe(5);
  });

  it('an asynchronous member rejecting: the promise rejects with its error, the earlier members given back', async () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const error = new Error('Redis went away');
    const rejecting: ChainMember = {
      limit: 5,
      consume: () => Promise.reject(error),
      refund: () => {},
    };
    await expect(chain(bucket, rejecting).consume('k', 2)).rejects.toBe(error);
    expect(bucket.stats('k').available).toBe(5);
  });

  it('past an asynchronous refusal the later members are asked too, asynchronous ones included, and give back what they grant', async () => {
    const clock = new ManualClock();
    const log: string[] = [];
    const window = new FixedWindow({ limit: 1, windowMs: 1000, clock });
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const longer = new FixedWindow({ limit: 1, windowMs: 5000, clock });
    expect(window.tryAcquire('k')).toBe(true);
    expect(longer.tryAcquire('k')).toBe(true);
    const d = await chain(
      logged('a', later(window), log),
      logged('b', bucket, log),
      logged('c', later(longer), log),
    ).consume('k');
    // The latest retry of the members asked: the longer window's.
    expect(d).toMatchObject({ allowed: false, retryAfterMs: 5000 });
    expect(d.decisions.map((x) => x.allowed)).toEqual([false, true, false]);
    expect(log).toEqual([
      'a.consume(k, 1)',
      'b.consume(k, 1)',
      'c.consume(k, 1)',
      'b.refund(k, 1)',
    ]);
    expect(bucket.stats('k').available).toBe(5);
  });

  it('an asynchronous member rejecting past a refusal ends the asking: the refusal stands, nothing stays taken', async () => {
    const clock = new ManualClock();
    const window = new FixedWindow({ limit: 1, windowMs: 1000, clock });
    const bucket = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const after = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    expect(window.tryAcquire('k')).toBe(true);
    const rejecting: ChainMember = {
      limit: 5,
      consume: () => Promise.reject(new Error('Redis went away')),
      refund: () => {},
    };
    const d = await chain(later(window), bucket, rejecting, after).consume('k');
    expect(d).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    expect(d.decisions.map((x) => x.allowed)).toEqual([false, true]);
    expect(bucket.stats('k').available).toBe(5);
    expect(after.stats('k')).toMatchObject({ available: 5, admitted: 0, rejected: 0 });
  });

  it('an asynchronous member refusing for good ends the asking: nothing after it is touched', async () => {
    const clock = new ManualClock();
    const conc = new Concurrency({ limit: 1 });
    const window = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    expect(conc.tryAcquire('k')).toBe(true);
    const d = await chain(later(conc), window).consume('k');
    expect(d).toMatchObject({ allowed: false, retryAfterMs: Number.POSITIVE_INFINITY });
    expect(d.decisions).toHaveLength(1);
    expect(window.stats('k')).toMatchObject({ available: 5, admitted: 0, rejected: 0 });
  });
});
