import { describe, expect, it } from 'vitest';
import { Concurrency, chain, FixedWindow, ManualClock, TokenBucket } from '../src/index.js';
import { admitted } from './helpers/limiters.js';

describe('Concurrency', () => {
  it('holds at most `limit` permits until they are released', () => {
    const c = new Concurrency({ limit: 3 });
    expect(c.tryAcquire('k', 2)).toBe(true);
    expect(c.tryAcquire('k', 2)).toBe(false);
    expect(c.tryAcquire('k')).toBe(true);
    c.release('k', 2);
    expect(c.stats('k').available).toBe(2);
    expect(admitted(c, 'k', 5)).toBe(2);
  });

  it('refuses to release more than the key holds, releasing nothing', () => {
    const c = new Concurrency({ limit: 3 });
    c.tryAcquire('k', 2);
    expect(() => c.release('k', 3)).toThrow(/exceed the permits held for this key \(2\)/);
    expect(c.stats('k').available).toBe(1);
    expect(() => c.release('never-acquired')).toThrow(RangeError);
  });
});

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
});
