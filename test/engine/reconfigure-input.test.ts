import { describe, expect, it } from 'vitest';
import {
  Concurrency,
  FixedWindow,
  LeakyBucket,
  type Limiter,
  LimiterClosedError,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
  WarmingBucket,
} from '../../src/index.js';

describe('reconfigure() refuses what the constructor would, and what the table cannot hold', () => {
  const clock = new ManualClock();
  const cases: [
    string,
    () => { reconfigure(o: object): void },
    object,
    RegExp,
    ErrorConstructor,
  ][] = [
    [
      'not an object',
      () => new TokenBucket({ capacity: 2, refillPerSecond: 1, clock }),
      null as unknown as object,
      /options must be an object, got null/,
      TypeError,
    ],
    [
      'an option the class does not take',
      () => new LeakyBucket({ capacity: 2, ratePerSecond: 1, clock }),
      { refillPerSecond: 2 },
      /LeakyBucket\.reconfigure: unknown option "refillPerSecond"/,
      TypeError,
    ],
    [
      'an option fixed at creation',
      () => new TokenBucket({ capacity: 2, refillPerSecond: 1, clock }),
      { keys: 10 },
      /TokenBucket\.reconfigure: unknown option "keys"/,
      TypeError,
    ],
    [
      'a capacity out of range',
      () => new TokenBucket({ capacity: 2, refillPerSecond: 1, clock }),
      { capacity: 0 },
      /TokenBucket\.reconfigure: option "capacity" .*got 0/,
      RangeError,
    ],
    [
      'a rate that is not a number',
      () => new TokenBucket({ capacity: 2, refillPerSecond: 1, clock }),
      { refillPerSecond: '5' },
      /option "refillPerSecond" must be a number, got "5"/,
      TypeError,
    ],
    [
      'a capacity a narrow table cannot hold',
      () => new TokenBucket({ capacity: 2, refillPerSecond: 1, clock }),
      { capacity: 2 ** 25 },
      /option "capacity" \(33554432\) needs a wide table/,
      RangeError,
    ],
    [
      'a rate a narrow table cannot hold',
      () => new LeakyBucket({ capacity: 2, ratePerSecond: 1, clock }),
      { ratePerSecond: 1e7 },
      /option "ratePerSecond" \(10000000\) needs a wide table/,
      RangeError,
    ],
    [
      'a window limit a narrow table cannot hold',
      () => new FixedWindow({ limit: 2, windowMs: 1000, clock }),
      { limit: 2 ** 30 },
      /FixedWindow\.reconfigure: option "limit" \(1073741824\) needs a wide table/,
      RangeError,
    ],
    [
      'a window shorter than a wide table counts',
      () => new FixedWindow({ limit: 2 ** 30, windowMs: 1000, clock }),
      { windowMs: 0.5 },
      /option "windowMs" must be at least 1 ms .*got 0\.5/,
      RangeError,
    ],
    [
      'a negative window',
      () => new SlidingWindow({ limit: 2, windowMs: 1000, clock }),
      { windowMs: -1 },
      /SlidingWindow\.reconfigure: option "windowMs" .*got -1/,
      RangeError,
    ],
    [
      'segments on a two-window SlidingWindow',
      () => new SlidingWindow({ limit: 2, windowMs: 1000, clock }),
      { segments: 4 },
      /option "segments" \(4\) needs a ring of counts per key/,
      RangeError,
    ],
    [
      'another segment count',
      () => new SlidingWindow({ limit: 4, windowMs: 1000, segments: 4, clock }),
      { segments: 5 },
      /option "segments" \(5\) cannot change with segments/,
      RangeError,
    ],
    [
      'another window with segments',
      () => new SlidingWindow({ limit: 4, windowMs: 1000, segments: 4, clock }),
      { windowMs: 2000 },
      /option "windowMs" \(2000\) cannot change with segments/,
      RangeError,
    ],
    [
      'a segmented limit past its count fields',
      () => new SlidingWindow({ limit: 4, windowMs: 1000, segments: 4, clock }),
      { limit: 6 },
      /option "limit" \(6\) needs wider count fields .*limits up to 5 with segments/,
      RangeError,
    ],
    [
      'a SlidingLog limit past its ring',
      () => new SlidingLog({ limit: 3, windowMs: 1000, clock }),
      { limit: 5 },
      /SlidingLog\.reconfigure: option "limit" \(5\) needs a longer log .*limits up to 4/,
      RangeError,
    ],
    [
      'a fractional Concurrency limit',
      () => new Concurrency({ limit: 3, clock }),
      { limit: 1.5 },
      /Concurrency\.reconfigure: option "limit" .*got 1\.5/,
      RangeError,
    ],
    [
      'a Concurrency limit a narrow table cannot hold',
      () => new Concurrency({ limit: 3, clock }),
      { limit: 2 ** 28 },
      /option "limit" \(268435456\) needs a wide table/,
      RangeError,
    ],
    [
      'a cold factor of 1',
      () => new WarmingBucket({ ratePerSecond: 10, warmupMs: 1000, clock }),
      { coldFactor: 1 },
      /WarmingBucket\.reconfigure: option "coldFactor" .*above 1.*got 1/,
      RangeError,
    ],
    [
      'no warm-up',
      () => new WarmingBucket({ ratePerSecond: 10, warmupMs: 1000, clock }),
      { warmupMs: 0 },
      /option "warmupMs" .*got 0/,
      RangeError,
    ],
  ];
  for (const [what, make, options, message, type] of cases) {
    it(`${what}: ${type.name}, and nothing changes`, () => {
      const limiter = make() as unknown as Limiter & { reconfigure(o: object): void };
      const before = limiter.limit;
      expect(() => limiter.reconfigure(options)).toThrow(type);
      expect(() => limiter.reconfigure(options)).toThrow(message);
      expect(limiter.limit).toBe(before);
      // The options' lock was let go: a valid change goes through.
      if (limiter instanceof WarmingBucket) {
        limiter.reconfigure({ warmupMs: 500 });
        expect(limiter.warmupMs).toBe(500);
      } else {
        limiter.reconfigure({ ['capacity' in limiter ? 'capacity' : 'limit']: before + 1 });
        expect(limiter.limit).toBe(before + 1);
      }
    });
  }

  it('a closed limiter: LimiterClosedError', () => {
    const limiter = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    limiter.close();
    expect(() => limiter.reconfigure({ limit: 3 })).toThrow(LimiterClosedError);
  });

  it('the same options again change nothing', () => {
    const limiter = new FixedWindow({ limit: 2, windowMs: 1000, clock });
    expect(limiter.tryAcquire('k', 2)).toBe(true);
    limiter.reconfigure({ limit: 2, windowMs: 1000 });
    limiter.reconfigure({});
    expect(limiter.stats('k')).toMatchObject({ available: 0, admitted: 2 });
  });
});
