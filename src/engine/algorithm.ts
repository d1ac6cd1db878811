import type { Core } from './core.js';
import { FRESH, W_FRESH } from './layout.js';
import type { Key } from './table.js';

// The plug-in interface: what the engine calls on a limiter. Each algorithm class
// implements the first part (abstract here, or a default it overrides); `Limiter`
// implements the second part once for every class.
//
// "state" below is the slot's state word, or in a wide table (`core.wide`) its payload:
// an integer below 2^53, or W_FRESH (see WIDE_LOW_BITS in layout.ts). Wide tables decide
// with stepWide() (and stepQueuedWide()); every other hook serves both kinds. "stamp" is
// the slot's stamp, unwrapped (see layout.ts); times are µs on the limiter's clock. What a
// hook needs of the decision beyond its arguments (the slot's word, the time of the
// decision, whether the retry search is probing) it reads in `core.last` (core.ts). The
// table's part (isIdle, initSlot, rebuilding) is its SlotPolicy (table.ts).

/** What the engine calls on a limiter; every member is internal. */
export abstract class Algorithm {
  /** @internal The limiter's engine state for this thread (core.ts). */
  abstract readonly core: Core;

  // ---- implemented by each algorithm ------------------------------------------------

  /**
   * @internal The state after granting `permits` at `nowUs`, or REJECT. Pure: reads only the
   * state (decoded relative to `stamp`) and memory it owns; keeps the generation bits.
   */
  abstract step(state: number, stamp: number, nowUs: number, permits: number): number;

  /** @internal step() for a wide table: the payload after the grant, or REJECT. */
  stepWide(_p: number, _stamp: number, _nowUs: number, _permits: number): number {
    throw new Error(`${this.core.owner}: no wide table`);
  }

  /**
   * @internal step() for the head waiter (`core.last.queuedSinceUs` tells when it queued);
   * every algorithm here grants the head as any caller, at the time it wakes.
   */
  stepQueued(state: number, stamp: number, nowUs: number, permits: number): number {
    return this.step(state, stamp, nowUs, permits);
  }

  /** @internal stepQueued() for a wide table. */
  stepQueuedWide(p: number, stamp: number, nowUs: number, permits: number): number {
    return this.stepWide(p, stamp, nowUs, permits);
  }

  /**
   * @internal The state after giving back `permits` taken at `takenUs` (never above the
   * limit), or `state` itself; a window drops a give-back whose window has passed.
   */
  abstract giveBack(
    state: number,
    stamp: number,
    nowUs: number,
    permits: number,
    takenUs: number,
  ): number;

  /** @internal Permits grantable now from `state`. */
  abstract available(state: number, stamp: number, nowUs: number): number;

  /** @internal µs until `state` is equivalent to a fresh one (0 if it is). */
  abstract untilFreshUs(state: number, stamp: number, nowUs: number): number;

  /** @internal A first guess, µs from `nowUs`, of when `permits` could be granted; refined exactly. */
  abstract retryEstimateUs(state: number, stamp: number, nowUs: number, permits: number): number;

  /**
   * @internal Exact wait in whole µs for `permits` behind `queued` permits waiting ahead;
   * absent, the engine searches for the time `queued + permits` fit in one grant.
   */
  retryBehindUs?(
    state: number,
    stamp: number,
    nowUs: number,
    queued: number,
    permits: number,
  ): number;

  /** @internal After a grant's CAS on slot word `w` (replacing state word `before`), by its caller. */
  admitted(_w: number, _before: number, _nowUs: number, _permits: number): void {}

  /** @internal After every give-back or take-back attempt, whatever its outcome. */
  gaveBack(): void {}

  /**
   * @internal Replaces the engine's give-back to a key (refunds, give-backs of acquire()
   * and of leases); Concurrency records its holders around it.
   */
  giveBackKey?(key: Key | undefined, permits: number, takenUs: number): void;

  /** @internal Present when a Lease gives its permits back on release (Concurrency). */
  releaseLease?(key: Key | undefined, permits: number): void;

  /** @internal The queue limit in permits now, when not the `queueLimit` option (LeakyBucket). */
  effectiveQueueLimit?(): number;

  /**
   * @internal True when the head waiter for `permits` must wake at its due time to the µs
   * (a late wake-up would lose rate for good), not the ms.
   */
  punctual(_permits: number): boolean {
    return false;
  }

  /**
   * @internal Until when permits taken at `takenUs` count where they were counted (a
   * window's end); Infinity where no such time exists. The cluster's blocks expire by it.
   */
  countsUntilUs(_takenUs: number): number {
    return Number.POSITIVE_INFINITY;
  }

  /** @internal See SlotPolicy (table.ts): prepares slot `s`'s own memory (SlidingLog's ring). */
  initSlot(_s: number): void {}

  /** @internal See SlotPolicy (table.ts): reset() rebuilds slot word `w`. */
  rebuilding(_w: number): void {}

  /** @internal On each heartbeat of a thread with waiters (Concurrency looks for dead holders). */
  onHeartbeat(): void {}

  /** @internal After the buffer was mapped again (views an algorithm keeps of its own). */
  remapped(): void {}

  /** @internal When another thread may first reach the buffer: plain fields go where it sees them. */
  becameShared(): void {}

  /** @internal Recomputes what the class derives from its options (after any reconfigure()). */
  configure(): void {}

  /** @internal The options reconfigure() takes. */
  reconfigurable(): readonly string[] {
    return [];
  }

  /**
   * @internal The stored options after `opts` (names checked) replace some: validated as the
   * constructor does; options left out keep their values.
   */
  reconfigured(_name: string, _opts: Record<string, unknown>): number[] {
    return [];
  }

  /**
   * @internal Whether a state means something else under other options, so that
   * reconfigure() rewrites every slot's state by describe() and restate().
   */
  get convertsStates(): boolean {
    return true;
  }

  /** @internal `state` in terms the options do not change; undefined when as good as fresh. */
  describe(_state: number, _stamp: number, _nowUs: number): number[] | undefined {
    return undefined;
  }

  /** @internal The state carrying `d` (from describe()) under the new options. */
  restate(_d: number[], _nowUs: number): number {
    return this.core.wide ? W_FRESH : FRESH;
  }

  /**
   * @internal The time (µs, the limiter's clock) the slot of restate()'s state is stamped
   * with: now, or later for a state that the new options would take for stale too early.
   */
  restampUs(_d: number[], nowUs: number): number {
    return nowUs;
  }

  // ---- implemented by Limiter for every class ------------------------------------------

  /** @internal See SlotPolicy (table.ts): the slot's state is as good as fresh and nobody waits. */
  abstract isIdle(state: number, w: number, nowUs: number): boolean;

  /** @internal A new key found no slot: reports it; true when `whenFull` allows it anyway. */
  abstract tableFull(key: Key | undefined): boolean;

  /**
   * @internal After a decision that met a moved control word: true when the options
   * changed and the decision may have used the old ones on a state reconfigure() did not
   * convert (or converted so many times that the state word came round to the one the
   * decision read), so that it must be taken back and made again.
   */
  abstract decidedOnOldOptions(): boolean;
}
