import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { diff31 } from '../../src/clock.js';
import { DeadlineTimer, due } from '../../src/deadlines.js';

// The one timer both transports (cluster channel, Redis runner) arm for their calls.

describe('DeadlineTimer', () => {
  it('expires calls in deadline order with one timer, re-armed for the earliest left', async () => {
    const start = performance.now();
    const deadlines = new Map([
      ['c', start + 30],
      ['a', start + 5],
      ['b', start + 15],
    ]);
    const expired: string[] = [];
    let fired = 0;
    let done: () => void = () => {};
    const all = new Promise<void>((resolve) => {
      done = resolve;
    });
    const timer = new DeadlineTimer((now) => {
      fired++;
      let next = Number.POSITIVE_INFINITY;
      for (const [name, at] of deadlines) {
        if (due(at, now)) {
          expired.push(name);
          deadlines.delete(name);
        } else next = Math.min(next, at);
      }
      if (deadlines.size === 0) done();
      return next;
    });
    // Armed out of order: a later deadline never pushes back an earlier one.
    for (const at of deadlines.values()) timer.armFor(at);
    await all;
    expect(expired).toEqual(['a', 'b', 'c']);
    // Never more firings than deadlines (a timer that fired early re-arms, counted too).
    expect(fired).toBeGreaterThanOrEqual(3);
    expect(fired).toBeLessThanOrEqual(6);
  });

  it('a deadline past setTimeout’s range arms at its longest delay instead of overflowing', async () => {
    let fired = 0;
    const timer = new DeadlineTimer(() => {
      fired++;
      return Number.POSITIVE_INFINITY;
    });
    // Node turns a delay past 2^31−1 ms into 1 ms: that would fire at once.
    timer.armFor(performance.now() + 2 ** 40);
    await new Promise((resolve) => setTimeout(resolve, 20));
    timer.clear();
    expect(fired).toBe(0);
  });

  it('due() is true from the deadline on', () => {
    expect(due(10, 9.999)).toBe(false);
    expect(due(10, 10)).toBe(true);
    expect(due(10, 11)).toBe(true);
  });
});

describe('diff31: times kept modulo 2^31 ms (lock and fetch-claim deadlines)', () => {
  it('is the signed difference across the wrap, where (a − b) | 0 is not', () => {
    const wrap = 0x80000000;
    // A deadline 10 ms before the wrap, the clock 5 ms after it: lapsed 15 ms ago.
    expect(diff31(5, wrap - 10)).toBe(15);
    expect((5 - (wrap - 10)) | 0).toBeLessThan(0); // what the lock read before: not lapsed
    // A deadline 5 ms after the wrap, the clock 10 ms before it: 15 ms to go.
    expect(diff31(wrap - 10, 5)).toBe(-15);
    expect(diff31(1000, 400)).toBe(600);
    expect(diff31(400, 1000)).toBe(-600);
  });
});
