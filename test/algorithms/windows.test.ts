import { describe, expect, it } from 'vitest';
import { FixedWindow, ManualClock, SlidingLog, SlidingWindow } from '../../src/index.js';
import { admitted } from '../helpers/limiters.js';

describe('FixedWindow', () => {
  it('counts per aligned window and allows the documented 2× burst across a boundary', () => {
    const clock = new ManualClock(999);
    const fw = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    expect(admitted(fw, 'k', 10)).toBe(5);
    expect(fw.consume('k')).toMatchObject({ retryAfterMs: 1, resetAfterMs: 1 });
    clock.advance(1); // a new window at t = 1000
    expect(admitted(fw, 'k', 10)).toBe(5);
    clock.advance(999);
    expect(admitted(fw, 'k', 10)).toBe(0);
  });

  it('refunds only into the current window', () => {
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: 3, windowMs: 100, clock });
    admitted(fw, 'k', 3);
    fw.refund('k', 2);
    expect(admitted(fw, 'k', 10)).toBe(2);
    clock.advance(100);
    fw.refund('k', 3); // nothing counted in this window yet
    expect(admitted(fw, 'k', 10)).toBe(3);
  });

  it('rejects a limit too large for its window with a RangeError naming both', () => {
    // Under 1 ms a window keeps the 32-bit word's range; from 1 ms, up to 2^31 − 1.
    expect(() => new FixedWindow({ limit: 2 ** 25, windowMs: 0.5 })).toThrow(RangeError);
    expect(() => new FixedWindow({ limit: 2 ** 25, windowMs: 0.5 })).toThrow(/"limit"/);
    expect(() => new FixedWindow({ limit: 2 ** 31, windowMs: 1 })).toThrow(/"limit"/);
  });
});

describe('SlidingWindow', () => {
  it('weights the previous window: prev × (1 − elapsed/window) + curr + permits ≤ limit', () => {
    const clock = new ManualClock();
    const sw = new SlidingWindow({ limit: 10, windowMs: 1000, clock });
    expect(admitted(sw, 'k', 8)).toBe(8);
    clock.set(1250); // previous window 8, elapsed 250: weight 8 × 0.75 = 6
    expect(sw.stats('k').available).toBe(4);
    expect(admitted(sw, 'k', 10)).toBe(4);
    clock.set(1500); // 8 × 0.5 + 4 = 8
    expect(admitted(sw, 'k', 10)).toBe(2);
    clock.set(2000); // previous is now 6 (this window's), weight 1: 6 + 0
    expect(admitted(sw, 'k', 10)).toBe(4);
    clock.set(4000); // two windows later everything has decayed
    expect(admitted(sw, 'k', 20)).toBe(10);
  });

  it('gives exact retry times inside the window and into the next one', () => {
    const clock = new ManualClock();
    const sw = new SlidingWindow({ limit: 4, windowMs: 1000, clock });
    admitted(sw, 'k', 4);
    // All 4 in the current window: at 1000 + e, 4 × (1 − e/1000) + 1 ≤ 4 ⇔ e ≥ 250.
    expect(sw.consume('k').retryAfterMs).toBe(1250);
    clock.set(1100);
    // prev 4, elapsed 100: 3.6 + 0 + 1 > 4; need e ≥ 250, i.e. 150 ms more.
    expect(sw.consume('k').retryAfterMs).toBe(150);
  });

  it('smooths the boundary burst that FixedWindow allows', () => {
    const clock = new ManualClock(999);
    const sw = new SlidingWindow({ limit: 5, windowMs: 1000, clock });
    expect(admitted(sw, 'k', 10)).toBe(5);
    clock.advance(1);
    expect(admitted(sw, 'k', 10)).toBe(0);
  });
});

describe('SlidingLog', () => {
  it('allows at most `limit` permits in any trailing window, exactly', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(log.tryAcquire('k', 2)).toBe(true);
    clock.set(500);
    expect(admitted(log, 'k', 10)).toBe(3);
    clock.set(999);
    expect(log.stats('k').available).toBe(0);
    expect(log.consume('k').retryAfterMs).toBe(1);
    clock.set(1000); // the two granted at 0 leave the window
    expect(log.stats('k').available).toBe(2);
    expect(admitted(log, 'k', 10)).toBe(2);
    clock.set(1500);
    expect(admitted(log, 'k', 10)).toBe(3);
    // In the window now: 2 granted at 1000 and 3 at 1500. Two more need the pair from
    // 1000 to leave (at 2000); three need one from 1500 to leave too (at 2500).
    expect(log.consume('k', 2).retryAfterMs).toBe(500);
    expect(log.consume('k', 3).retryAfterMs).toBe(1000);
  });

  it('has no boundary burst: any 1000 ms span holds at most `limit`', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 7, windowMs: 1000, clock });
    const grants: number[] = [];
    for (let t = 0; t < 5000; t += 13) {
      clock.set(t);
      if (log.tryAcquire('k')) grants.push(t);
    }
    for (let i = 7; i < grants.length; i++) {
      expect(grants[i]! - grants[i - 7]!).toBeGreaterThanOrEqual(1000);
    }
    expect(grants.length).toBeGreaterThan(30);
  });

  it('refunds only permits still inside the window', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 3, windowMs: 100, clock });
    admitted(log, 'k', 3);
    log.refund('k', 1);
    expect(admitted(log, 'k', 10)).toBe(1);
    clock.advance(100);
    log.refund('k', 3); // all expired already: nothing to give back
    expect(admitted(log, 'k', 10)).toBe(3);
  });
});
