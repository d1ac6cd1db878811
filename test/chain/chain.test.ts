import { describe, expect, it } from 'vitest';
import { Concurrency, chain, FixedWindow, ManualClock, TokenBucket } from '../../src/index.js';
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
