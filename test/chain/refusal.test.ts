import { describe, expect, it } from 'vitest';
import {
  Concurrency,
  chain,
  FixedWindow,
  LeakyBucket,
  ManualClock,
  SlidingLog,
  TokenBucket,
} from '../../src/index.js';

const DAY = 86_400_000;

describe('a refused chain says when the whole chain admits', () => {
  it('two spent windows: the refusal waits for the later of the two, and retrying then is admitted', () => {
    const clock = new ManualClock();
    const perSecond = new FixedWindow({ limit: 10, windowMs: 1000, clock });
    const perDay = new FixedWindow({ limit: 20, windowMs: DAY, clock });
    const both = chain(perSecond, perDay);
    let granted = 0;
    for (let s = 0; s < 3; s++) {
      for (let i = 0; i < 10; i++) if (both.consume('k').allowed) granted++;
      clock.advance(1000);
    }
    expect(granted).toBe(20);
    for (let i = 0; i < 10; i++) expect(perSecond.tryAcquire('k')).toBe(true);
    const refused = both.consume('k');
    expect(refused).toMatchObject({ allowed: false, reason: 'limited' });
    expect(refused.retryAfterMs).toBe(DAY - 3000);
    expect(refused.decisions.map((d) => d.retryAfterMs)).toEqual([1000, DAY - 3000]);
    clock.advance(refused.retryAfterMs - 1);
    expect(both.consume('k').allowed).toBe(false);
    clock.advance(1);
    expect(both.consume('k').allowed).toBe(true);
  });

  it('members after the refusing one that grant give their permits back', () => {
    const clock = new ManualClock();
    const a = new FixedWindow({ limit: 1, windowMs: 1000, clock });
    const b = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
    const c = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(a.tryAcquire('k')).toBe(true);
    const d = chain(a, b, c).consume('k');
    expect(d).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    expect(d.decisions.map((x) => [x.allowed, x.remaining])).toEqual([
      [false, 0],
      [true, 5],
      [true, 5],
    ]);
    expect([b.stats('k').available, c.stats('k').available]).toEqual([5, 5]);
  });

  it('a member refusing for good (a held Concurrency) ends the asking: nothing after it is touched', () => {
    const clock = new ManualClock();
    const conc = new Concurrency({ limit: 1 });
    const window = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    expect(conc.tryAcquire('k')).toBe(true);
    const d = chain(conc, window).consume('k');
    expect(d).toMatchObject({ allowed: false, retryAfterMs: Number.POSITIVE_INFINITY });
    expect(d.decisions).toHaveLength(1);
    expect(window.stats('k')).toMatchObject({ available: 5, admitted: 0, rejected: 0 });
  });
});

describe('a refused chain reports the members it gave back as after the give-back', () => {
  it('remaining counts the permits given back, in nested chains too', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    const log = new SlidingLog({ limit: 20, windowMs: 1000, clock });
    const window = new FixedWindow({ limit: 3, windowMs: 1000, clock });
    expect(window.tryAcquire('k', 3)).toBe(true);
    const d = chain(chain(bucket, log), window).consume('k', 2);
    expect(d.allowed).toBe(false);
    const [inner] = d.decisions as unknown as [
      { remaining: number; decisions: { remaining: number }[] },
    ];
    expect(inner.remaining).toBe(10);
    expect(inner.decisions.map((x) => x.remaining)).toEqual([10, 20]);
    expect([bucket.stats('k').available, log.stats('k').available]).toEqual([10, 20]);
  });

  it('a bucket given back reports the reset of its state after the give-back', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    const leaky = new LeakyBucket({ capacity: 10, ratePerSecond: 2, clock });
    const window = new FixedWindow({ limit: 1, windowMs: 60_000, clock });
    expect(bucket.tryAcquire('k', 3)).toBe(true);
    expect(leaky.tryAcquire('k', 2)).toBe(true);
    expect(window.tryAcquire('k')).toBe(true);
    const d = chain(bucket, leaky, window).consume('k', 1);
    expect(d.allowed).toBe(false);
    const [b, l] = d.decisions;
    expect([b!.remaining, b!.resetAfterMs]).toEqual([7, 3000]);
    expect([l!.remaining, l!.resetAfterMs]).toEqual([0, 1000]);
    // What each says on its own now.
    expect(bucket.consume('k', 1).resetAfterMs).toBe(4000);
  });

  it('a window given back to its initial state resets at once', () => {
    const clock = new ManualClock();
    const fresh = new FixedWindow({ limit: 5, windowMs: 60_000, clock });
    const spent = new FixedWindow({ limit: 1, windowMs: 1000, clock });
    expect(spent.tryAcquire('k')).toBe(true);
    const d = chain(fresh, spent).consume('k');
    expect(d.decisions[0]).toMatchObject({ allowed: true, remaining: 5, resetAfterMs: 0 });
  });
});

describe('a leaky bucket given back to drained admits its whole capacity again', () => {
  it('reports remaining = capacity and no reset', () => {
    const clock = new ManualClock();
    const leaky = new LeakyBucket({ capacity: 4, ratePerSecond: 2, clock });
    const window = new FixedWindow({ limit: 1, windowMs: 60_000, clock });
    expect(window.tryAcquire('k')).toBe(true);
    const d = chain(leaky, window).consume('k', 1);
    expect(d.decisions[0]).toMatchObject({ allowed: true, remaining: 4, resetAfterMs: 0 });
    expect(leaky.consume('k', 1)).toMatchObject({ allowed: true, remaining: 0 });
  });
});
