import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import * as mem from '../../src/index.js';
import * as red from '../../src/redis/index.js';

// Bad input is refused before Redis is touched, with the errors memory gives. The client
// here is lazy and has never connected: any command would make it connect (status moves
// off 'wait'), so an unchanged status proves no call was made.

const lazy = () =>
  new Redis({
    autoResendUnfulfilledCommands: false,
    lazyConnect: true,
    port: 1,
    enableOfflineQueue: false,
  });

function caught(f: () => unknown): unknown {
  try {
    const r = f();
    return r instanceof Promise ? r : undefined;
  } catch (e) {
    return e;
  }
}

async function outcome(f: () => unknown): Promise<string> {
  const r = caught(f);
  const e =
    r instanceof Promise
      ? await r.then(
          () => undefined,
          (x) => x,
        )
      : r;
  if (!(e instanceof Error)) return String(e);
  // The bounds may differ between memory and Redis: the same error, naming the same
  // option, with each side's own bounds.
  return `${e.constructor.name}: ${e.message.replace(/ from [^ ]+ to [^ ,]+/, ' from … to …')}`;
}

const SPECS: [string, Record<string, unknown>][] = [
  ['TokenBucket', { capacity: 5, refillPerSecond: 1 }],
  ['LeakyBucket', { capacity: 5, ratePerSecond: 1 }],
  ['FixedWindow', { limit: 5, windowMs: 1000 }],
  ['SlidingWindow', { limit: 5, windowMs: 1000 }],
  ['SlidingLog', { limit: 5, windowMs: 1000 }],
  ['Concurrency', { limit: 5 }],
];

describe('wide limits', () => {
  const classes = (name: string) => ({
    M: (mem as unknown as Record<string, new (o: unknown) => mem.Concurrency>)[name]!,
    R: (red as unknown as Record<string, new (o: unknown) => red.Concurrency>)[name]!,
  });

  it.each([
    ['TokenBucket', { capacity: 2 ** 31 - 1, refillPerSecond: 1e6 }],
    ['LeakyBucket', { capacity: 2 ** 24 + 1, ratePerSecond: 1 }],
    ['FixedWindow', { limit: 2 ** 31 - 1, windowMs: 2 ** 31 }],
    ['FixedWindow', { limit: 100_000_000, windowMs: 86_400_000 }],
    ['Concurrency', { limit: 2 ** 31 - 1 }],
    ['TokenBucket', { capacity: 5, refillPerSecond: 1e9 }],
    ['LeakyBucket', { capacity: 2 ** 31 - 1, ratePerSecond: 1e8 }],
    ['SlidingWindow', { limit: 10_000, windowMs: 3_600_000 }],
    ['SlidingWindow', { limit: 2 ** 31 - 1, windowMs: 2 ** 31 }],
  ])('%s on Redis takes what a wide in-memory table holds: %o', (name, opts) => {
    const redis = lazy();
    const { M, R } = classes(name);
    expect(() => new M(opts)).not.toThrow();
    expect(new R({ ...opts, redis }).limit).toBe(new M(opts).limit);
    expect(redis.status).toBe('wait');
  });

  it('past the wide ranges, the Redis classes refuse as memory does', () => {
    const redis = lazy();
    for (const [name, opts] of [
      ['TokenBucket', { capacity: 5, refillPerSecond: 1e9 * 1.01 }],
      ['LeakyBucket', { capacity: 2 ** 31, ratePerSecond: 1 }],
      ['SlidingWindow', { limit: 2 ** 31, windowMs: 1000 }],
      ['FixedWindow', { limit: 5, windowMs: 2 ** 31 + 1 }],
    ] as const) {
      const { M, R } = classes(name);
      expect(() => new M(opts)).toThrow(RangeError);
      expect(outcomeOf(() => new R({ ...opts, redis }))).toBe(outcomeOf(() => new M(opts)));
    }
    expect(redis.status).toBe('wait');
  });
});

function outcomeOf(f: () => unknown): string {
  try {
    f();
    return 'no error';
  } catch (e) {
    return `${(e as Error).constructor.name}: ${(e as Error).message}`;
  }
}

describe('bad input is refused before any Redis call, as in memory', () => {
  for (const [name, own] of SPECS) {
    it(`${name}: bad options and bad arguments`, async () => {
      const redis = lazy();
      const M = (mem as unknown as Record<string, new (o: unknown) => mem.Concurrency>)[name]!;
      const R = (red as unknown as Record<string, new (o: unknown) => red.Concurrency>)[name]!;
      const badOptions = [
        ...Object.keys(own).flatMap((k) => [
          { ...own, [k]: -1 },
          { ...own, [k]: 'x' },
          { ...own, [k]: Number.NaN },
          { ...own, [k]: undefined },
        ]),
        { ...own, queueLimit: -1 },
        { ...own, queueLimit: 1.5 },
      ];
      for (const o of badOptions) {
        expect(await outcome(() => new R({ ...o, redis }))).toBe(await outcome(() => new M(o)));
      }
      const m = new M(own);
      const r = new R({ ...own, redis });
      const badCalls: [string, unknown[]][] = [
        ['consume', ['k', 0]],
        ['consume', ['k', 6]],
        ['consume', ['k', 1.5]],
        ['consume', ['k', '1']],
        ['consume', [{}, 1]],
        ['consume', [Number.NaN, 1]],
        ['consume', [null, 1]],
        ['tryAcquire', ['k', -1]],
        ['refund', ['k', 0]],
        ['refund', ['k', 6]],
        ['acquire', ['k', 1, { timeoutMs: -1 }]],
        ['acquire', ['k', 1, { signal: 1 }]],
        ['acquire', ['k', 9]],
      ];
      if (name === 'Concurrency') badCalls.push(['release', ['k', 0]], ['release', ['k', 6]]);
      for (const [method, args] of badCalls) {
        const expected = await outcome(() =>
          (m as never as Record<string, (...a: unknown[]) => unknown>)[method]!(...args),
        );
        const got = await outcome(() =>
          (r as never as Record<string, (...a: unknown[]) => unknown>)[method]!(...args),
        );
        expect([method, args, got]).toEqual([method, args, expected]);
      }
      expect(redis.status).toBe('wait');
      // The Redis-only options are checked as carefully.
      for (const o of [
        { prefix: '' },
        { prefix: 'a{b}' },
        { prefix: 3 },
        { timeoutMs: 0 },
        { timeoutMs: 1.5 },
        { whenUnavailable: 'maybe' },
        { whenUnavailable: {} },
        { clock: {} },
      ]) {
        expect(() => new R({ ...own, redis, ...o })).toThrow(
          /option "(prefix|timeoutMs|whenUnavailable|clock)"/,
        );
      }
      // Unknown options: a TypeError naming the option (the list of known ones differs).
      expect(() => new R({ ...own, redis, keys: 10 })).toThrow(/unknown option "keys"/);
      expect(() => new R({ ...own, redis: {} })).toThrow(TypeError);
      expect(() => new R({ ...own, redis: undefined })).toThrow(/option "redis"/);
      await r.close();
      await expect(r.consume('k')).rejects.toBeInstanceOf(mem.LimiterClosedError);
      expect(redis.status).toBe('wait');
      redis.disconnect();
    });
  }
});
