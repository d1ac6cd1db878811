import { describe, expect, it } from 'vitest';
import {
  Concurrency,
  chain,
  FixedWindow,
  ManualClock,
  SlidingLog,
  SlidingWindow,
} from '../../src/index.js';

// A chain gives back the permits of earlier members when a later one refuses; a window
// limiter must credit the window those permits were taken in, even once it has passed.

describe('window refunds land in the window the permits came from', () => {
  it('FixedWindow drops a rollback that reaches the next window', () => {
    const clock = new ManualClock(999);
    const perSecond = new FixedWindow({ limit: 20, windowMs: 1000, clock });
    // A second limiter that refuses only after the clock crossed the boundary.
    const closing = new FixedWindow({ limit: 20, windowMs: 1_000_000, clock });
    closing.tryAcquire('k', 20);
    const both = chain(perSecond, {
      limit: 20,
      consume: (key, permits) => {
        clock.set(1000); // the boundary passes between the take and the rollback
        return closing.consume(key, permits);
      },
      refund: (key, permits) => closing.refund(key, permits),
    });
    expect(both.tryAcquire('k', 5)).toBe(false);
    // Window [1000, 2000) was never charged; it must not start with a credit either.
    let admitted = 0;
    for (let i = 0; i < 40; i++) if (perSecond.tryAcquire('k')) admitted++;
    expect(admitted).toBe(20);
  });

  it('SlidingWindow credits the previous window when the permits were taken there', () => {
    const clock = new ManualClock(999);
    const sw = new SlidingWindow({ limit: 10, windowMs: 1000, clock });
    expect(sw.tryAcquire('k', 6)).toBe(true); // window 0 holds 6
    const both = chain(sw, {
      limit: 10,
      consume: () => {
        clock.set(1500); // half of window 1 passes before this member answers…
        expect(sw.tryAcquire('k', 3)).toBe(true); // …and someone takes 3 in it
        return { allowed: false, remaining: 0, limit: 10, retryAfterMs: 1, resetAfterMs: 1 };
      },
      refund: () => {},
    });
    expect(both.tryAcquire('k', 4)).toBe(false); // took 4 in window 0, then rolled back
    // Window 0 is back to 6 (weighing 6 × 0.5 = 3 at 1500) and window 1 keeps its 3:
    // 10 − 3 − 3 = 4 more. Crediting window 1 instead would let 5 through.
    let admitted = 0;
    for (let i = 0; i < 20; i++) if (sw.tryAcquire('k')) admitted++;
    expect(admitted).toBe(4);
  });

  it('a nested chain rolled back after the boundary gives nothing to the next window', async () => {
    for (const depth of [1, 2]) {
      const clock = new ManualClock(999);
      const perSecond = new FixedWindow({ limit: 20, windowMs: 1000, clock });
      const closing = new FixedWindow({ limit: 20, windowMs: 1_000_000, clock });
      closing.tryAcquire('k', 20);
      // An asynchronous member (a Redis limiter, say) that refuses after the boundary.
      const late = {
        limit: 20,
        consume: async (key?: string | number, permits?: number) => {
          clock.set(1000);
          // The new window fills up before this member refuses.
          expect(perSecond.tryAcquire('k', 20)).toBe(true);
          return closing.consume(key, permits);
        },
        refund: (key?: string | number, permits?: number) => closing.refund(key, permits),
      };
      const inner = depth === 1 ? chain(perSecond) : chain(chain(perSecond));
      expect(await chain(inner, late).tryAcquire('k', 5)).toBe(false);
      // Window [1000, 2000) is full; the rollback of window 0's 5 must not open it.
      let admitted = 0;
      for (let i = 0; i < 40; i++) if (perSecond.tryAcquire('k')) admitted++;
      expect([depth, admitted]).toEqual([depth, 0]);
    }
  });

  it('chain() rollbacks never let the log admit more than its limit in a window', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 100, windowMs: 1000, clock });
    const held = new Concurrency({ limit: 1 });
    held.tryAcquire('k');
    const both = chain(log, held);
    for (let i = 0; i < 100; i++) expect(both.tryAcquire('k')).toBe(false);
    clock.set(900);
    let admitted = 0;
    for (let i = 0; i < 200; i++) if (log.tryAcquire('k')) admitted++;
    expect(admitted).toBe(100);
    clock.set(1000);
    for (let i = 0; i < 200; i++) if (log.tryAcquire('k')) admitted++;
    expect(admitted).toBe(100);
    clock.set(1900);
    for (let i = 0; i < 200; i++) if (log.tryAcquire('k')) admitted++;
    expect(admitted).toBe(200);
  });

  it('a refund in the window the permits were taken in still gives them back', () => {
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: 3, windowMs: 1000, clock });
    expect(fw.tryAcquire('k', 3)).toBe(true);
    fw.refund('k', 2);
    expect(fw.stats('k').available).toBe(2);
  });
});
