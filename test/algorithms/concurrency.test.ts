import { describe, expect, it } from 'vitest';
import { diff31 } from '../../src/clock.js';
import {
  attach,
  Concurrency,
  chain,
  FixedWindow,
  ManualClock,
  MonotonicClock,
  TokenBucket,
} from '../../src/index.js';
import { heartbeatStale } from '../../src/queue.js';
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

describe('heartbeats read across threads (the 3000-keys thread test once admitted 4 of 3)', () => {
  // Each thread reads the shared clock through its own calibration, about a microsecond
  // apart: another thread's heartbeat, written just after a millisecond turned, can read
  // one millisecond ahead of this thread's clock. That is a live thread, not a dead one.
  it('a holder whose heartbeat reads a few milliseconds ahead keeps its permits when others reap', () => {
    const limiter = new Concurrency({ limit: 3 });
    const other = attach<Concurrency>(limiter.handle); // a second thread's view, in effect
    for (let i = 0; i < 3; i++) expect(limiter.tryAcquire('k')).toBe(true);
    // This thread's entry in the thread table, its heartbeat set a few milliseconds ahead
    // of the clock (as a skew of a microsecond makes one millisecond at a turn).
    const queues = (limiter as unknown as { queues: Queues }).queues;
    const e = queues.layout.threadBase + queues.threadEntry * 2 + 1; // T_HEARTBEAT
    const nowMs = Math.floor(new MonotonicClock().nowUs() / 1000);
    Atomics.store(queues.i32, e, (nowMs + 5) & 0x7fffffff);
    // A reap by the other view finds every holder alive: nothing comes back.
    const holders = (other as unknown as { holders: { reap(): boolean } }).holders;
    expect(holders.reap()).toBe(false);
    expect(other.tryAcquire('k')).toBe(false);
    expect(limiter.stats('k')).toMatchObject({ available: 0, admitted: 3 });
  });

  it('heartbeatStale: a little ahead is fresh, older than the limit is stale, across the wrap', () => {
    const wrap = 0x80000000;
    expect(heartbeatStale(1001, 1000, 10_000)).toBe(false); // 1 ms ahead
    expect(heartbeatStale(2000, 1000, 10_000)).toBe(false); // 1 s ahead
    expect(heartbeatStale(0, 10_000, 10_000)).toBe(false); // exactly the limit
    expect(heartbeatStale(0, 10_001, 10_000)).toBe(true);
    expect(heartbeatStale(wrap - 5, 10_000, 10_000)).toBe(true); // 10 005 ms old, wrapped
    expect(heartbeatStale(5, wrap - 1, 10_000)).toBe(false); // 6 ms ahead, wrapped
    expect(heartbeatStale(0, wrap - 2000, 10_000)).toBe(true); // 2 s ahead: not a skew
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

interface Queues {
  i32: Int32Array;
  layout: { threadBase: number };
  threadEntry: number;
}
