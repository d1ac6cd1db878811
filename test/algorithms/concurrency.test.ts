import { describe, expect, it } from 'vitest';
import { Concurrency } from '../../src/index.js';
import { admitted } from '../helpers/limiters.js';

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
