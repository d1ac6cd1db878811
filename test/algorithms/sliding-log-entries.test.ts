import { describe, expect, it } from 'vitest';
import { stampOf } from '../../src/engine/core.js';
import { enter, run, TRY } from '../../src/engine/decision.js';
import { S_STATE } from '../../src/engine/layout.js';
import { ManualClock, SlidingLog } from '../../src/index.js';

// A SlidingLog keeps one entry per permit, with the time it was taken: a refund and a
// thread that died mid-write must leave every entry its own time, or none that counts for long.

describe('SlidingLog refunds', () => {
  it('a permit taken after a refund carries its own time, not the refunded one', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 2, windowMs: 1000, clock });
    expect(log.tryAcquire('k')).toBe(true); // at 0
    log.refund('k');
    clock.set(900);
    expect(log.tryAcquire('k')).toBe(true);
    expect(log.tryAcquire('k')).toBe(true);
    clock.set(1000);
    // Both permits of the window [900, 1900) are in use: a third is over the limit.
    expect(log.tryAcquire('k')).toBe(false);
    expect(log.consume('k').retryAfterMs).toBe(900);
  });
});

describe('SlidingLog entries a dead thread left unwritten', () => {
  // What a thread terminated at the worst instruction leaves behind, made by hand: the
  // engine's own steps, run up to the point where the thread stopped.
  // biome-ignore lint/suspicious/noExplicitAny: the test reaches the engine's internals
  const internals = (log: SlidingLog): any => log;
  const taken = (log: SlidingLog, key: string, attempts: number) => {
    let n = 0;
    for (let i = 0; i < attempts; i++) if (log.tryAcquire(key)) n++;
    return n;
  };
  /** A grant's CAS, without the entry write that follows it (admitted()). */
  const grantWithoutWrite = (log: SlidingLog, key: string, nowUs: number) => {
    const core = internals(log).core;
    const ref = enter(core, log, key, 1, nowUs);
    expect(run(core, log, internals(log).step, ref, 1, key, TRY)).toBe(true);
    return { before: core.last.prior, after: core.last.state };
  };
  /** A give-back's first attempt (it marks its entries), without the CAS that follows. */
  const giveBackWithoutCas = (log: SlidingLog, key: string, permits: number, nowUs: number) => {
    const w = internals(log).table.find(key) >>> 4;
    const i32: Int32Array = internals(log).i32;
    internals(log).core.last.word = w;
    const state = Atomics.load(i32, w + S_STATE);
    const stamp = stampOf(internals(log).core, w, nowUs);
    expect(internals(log).giveBack(state, stamp, nowUs, permits, nowUs)).not.toBe(state);
    return { w, state: () => Atomics.load(i32, w + S_STATE), before: state };
  };

  it('an admission that died between its CAS and its entry write counts for one window at most', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(taken(log, 'k', 2)).toBe(2);
    // The head moves; admitted(), which writes the entry's time, never runs.
    grantWithoutWrite(log, 'k', clock.nowUs());
    // Until the entry could have expired it counts: exactly 2 more fit now.
    expect(taken(log, 'k', 5)).toBe(2);
    // The key then idles. Its entries, the unwritten one too, have all expired.
    clock.advance(10_000);
    expect(taken(log, 'k', 10)).toBe(5);
  });

  it('a refund that died between marking its entries and its CAS takes nothing away once idle', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(taken(log, 'k', 3)).toBe(3);
    // giveBack() marks the two newest entries unwritten, then the thread stops: no CAS.
    const refund = giveBackWithoutCas(log, 'k', 2, clock.nowUs());
    expect(refund.state()).toBe(refund.before);
    expect(taken(log, 'k', 5)).toBe(2);
    clock.advance(10_000);
    expect(taken(log, 'k', 10)).toBe(5);
  });

  it('a refund whose CAS lost to a grant leaves the permits it did not give back their own times', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(taken(log, 'k', 3)).toBe(3); // at 0
    clock.set(500);
    const now = clock.nowUs();
    // A refund's first attempt marks the newest entry (taken at 0)...
    const refund = giveBackWithoutCas(log, 'k', 1, now);
    // ...and its CAS loses to a grant on another thread, at 500.
    const { before, after } = grantWithoutWrite(log, 'k', now);
    // The refund tries again and gives back the newest permit, the one taken at 500.
    log.refund('k');
    internals(log).admitted(refund.w, before, now, 1); // the grant's writer, lagging
    expect(refund.state()).toBe(before);
    expect(after).not.toBe(before);
    // The three permits taken at 0 expire at 1000: all 5 are free then, not 4.
    clock.set(1000);
    expect(taken(log, 'k', 10)).toBe(5);
  });
});
