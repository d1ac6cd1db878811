import {
  type AnyLimiter,
  Concurrency,
  FixedWindow,
  LeakyBucket,
  type ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
  WarmingBucket,
} from '../../src/index.js';

/** One entry of the contract suite: how to build a limiter whose limit is 5. */
export interface LimiterCase {
  name: string;
  make: (clock: ManualClock, extra?: { keys?: number }) => AnyLimiter;
  /** Permits a fresh key grants while time stands still. */
  burst: number;
  /** Whether waiting (time) alone can free permits. */
  timed: boolean;
}

export const LIMIT = 5;

export const cases: LimiterCase[] = [
  {
    name: 'TokenBucket',
    make: (clock, extra) =>
      new TokenBucket({ capacity: LIMIT, refillPerSecond: 2, clock, ...extra }),
    burst: LIMIT,
    timed: true,
  },
  {
    name: 'LeakyBucket',
    make: (clock, extra) => new LeakyBucket({ capacity: LIMIT, ratePerSecond: 4, clock, ...extra }),
    burst: 1,
    timed: true,
  },
  {
    name: 'FixedWindow',
    make: (clock, extra) => new FixedWindow({ limit: LIMIT, windowMs: 1000, clock, ...extra }),
    burst: LIMIT,
    timed: true,
  },
  {
    name: 'SlidingWindow',
    make: (clock, extra) => new SlidingWindow({ limit: LIMIT, windowMs: 1000, clock, ...extra }),
    burst: LIMIT,
    timed: true,
  },
  {
    name: 'SlidingLog',
    make: (clock, extra) => new SlidingLog({ limit: LIMIT, windowMs: 1000, clock, ...extra }),
    burst: LIMIT,
    timed: true,
  },
  {
    name: 'Concurrency',
    make: (clock, extra) => new Concurrency({ limit: LIMIT, clock, ...extra }),
    burst: LIMIT,
    timed: false,
  },
  {
    // maxPermits = warmup × rate = 5 (cold factor 3). Pays later: a fresh key admits one
    // request, then waits for its debt.
    name: 'WarmingBucket',
    make: (clock, extra) =>
      new WarmingBucket({ ratePerSecond: 2, warmupMs: 2500, clock, ...extra }),
    burst: 1,
    timed: true,
  },
];

/** Calls tryAcquire `times` times and returns how many were granted. */
export function admitted(
  limiter: { tryAcquire(key?: string | number): boolean },
  key: string | number | undefined,
  times: number,
): number {
  let n = 0;
  for (let i = 0; i < times; i++) if (limiter.tryAcquire(key)) n++;
  return n;
}
