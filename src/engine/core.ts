import { type Clock, ManualClock } from '../clock.js';
import { S_STAMP, STAMP_PER_US } from './layout.js';
import type { WaitQueues } from './queue.js';
import type { SlotTable } from './table.js';

/**
 * What this thread's last decision on a limiter saw, and the context of the step it is
 * making: one record per limiter per thread, allocated with it, so that no decision
 * allocates and its shape is the same for every class. The algorithms' hooks keep the
 * signature `(state, stamp, nowUs, permits)` that V8 inlines; what else a hook or a caller
 * needs of the decision is read here.
 *
 * Writers: enter(), decide(), decideWide(), run(), grant() and grantWide() (decision.ts)
 * on every decision; the give-back CAS (update(), decision.ts) and anything that calls an
 * algorithm's hooks for a slot outside a decision (isIdle(), stats(), tableFullRetryUs(),
 * convertAll()) set `word` first. Readers are named on each field.
 */
export class LastDecision {
  /**
   * The slot's hot word index (NO_SLOT: the table had none for the key). Read by each
   * class's consume(), explain(), acquire() (the slot to queue on), stands(), the
   * `admitted()` hook's callers, and hooks that keep per-slot memory while they step
   * (SlidingLog's ring, SlidingWindow's segments).
   */
  word = 0;
  /**
   * The state after the decision (a wide table's payload): the one a grant wrote, or the
   * one a refusal read. Read by consume() and explain(), and by a head waiter's retry.
   */
  state = 0;
  /** The slot's stamp, unwrapped (see unwrapStamp()), as the decision used it. Read with `state`. */
  stamp = 0;
  /**
   * The state word the decision read: the one a grant replaced (for `admitted()`, and
   * Concurrency's holder records) and the slot's generation (stands(), acquire()).
   */
  prior = 0;
  /**
   * The clock time of the decision, µs. Read by consume(), explain(), takeBack(), the
   * chain's rollback and the cluster's blocks (Limiter.lastDecisionUs), and SlidingLog
   * while probing future times.
   */
  atUs = 0;
  /** `atUs` as a stamp (see layout.ts): read by the CAS loops to raise the slot's stamp. */
  stampNow = 0;
  /**
   * True while the exact retry search (explain.ts) evaluates step() at future times: steps
   * with side effects (SlidingWindow's segments) make none. Written and cleared there.
   */
  probing = false;
  /**
   * When the head waiter being served was refused and queued: written by the waiting line
   * before its turn, read by `stepQueuedWide()` (WarmingBucket).
   */
  queuedSinceUs = 0;
}

/**
 * What every decision of one limiter reads, in one object whose shape is the same for
 * every algorithm. A limiter keeps one per thread. Each limiter class has its own, so a
 * decision of any class reads these fields through inline caches that only ever see one
 * shape, however many classes a program uses (the classes themselves differ in shape).
 */
export class Core {
  /**
   * False while this thread alone can reach the buffer (the limiter was built here and its
   * `handle` never read): the per-key counters are then written with plain adds, exact
   * because there is no other writer, instead of a locked `Atomics.add`; and a grant by
   * decide() or a wide one (grantWide()) with plain stores instead of the CAS (run()'s
   * loop, give-backs and the stamp keep theirs); Concurrency's release() stores too, and
   * its holder records wait until the limiter becomes shared (holders.ts).
   */
  shared: boolean;
  /** A wide table (64-bit states): decisions go through decideWide() and grantWide(). */
  readonly wide: boolean;
  /** The last decision's record (see LastDecision). */
  readonly last = new LastDecision();
  /** The limiter's syncConfig(), for enter()'s refusals (see Limiter.syncConfig). */
  syncConfig: () => boolean = noSync;

  constructor(
    /** Replaced when the buffer is mapped again after the table grew (Limiter.remap). */
    public i32: Int32Array,
    /** The same as 64-bit words (grantWide()'s CAS); replaced with `i32`. */
    public b64: BigInt64Array,
    readonly clock: Clock,
    readonly epochUs: number,
    /** Largest permits one call may ask for (reconfigure() changes it). */
    public limit: number,
    readonly table: SlotTable,
    readonly queues: WaitQueues,
    readonly fifo: boolean,
    readonly owner: string,
    shared: boolean,
  ) {
    this.shared = shared;
    this.wide = table.layout.wide;
  }
}

function noSync(): boolean {
  return false;
}

/**
 * A stamp word's stamp (its low 31 bits, a count of 2^20 µs modulo 2^31) as the nearest
 * whole stamp to `stampNow`: exact for any gap under 2^30 stamps (34 years).
 */
export function unwrapStamp(raw: number, stampNow: number): number {
  // `raw & STAMP_MASK` would clear the queued flag (bit 31); `<< 1` drops it anyway.
  return stampNow + (((raw - stampNow) << 1) >> 1);
}

/** Slot word `w`'s stamp, unwrapped relative to `nowUs` (see STAMP_US). */
export function stampOf(core: Core, w: number, nowUs: number): number {
  const stampNow = Math.floor((nowUs - core.epochUs) * STAMP_PER_US);
  return unwrapStamp(core.i32[w + S_STAMP]!, stampNow);
}

/** After permits came back to slot `w`: wakes its head waiter, if it has waiters. */
export function wakeWaiters(core: Core, w: number): void {
  if (core.i32[w + S_STAMP]! >= 0) return; // nobody waits: no notify (a call into a builtin)
  core.queues.wakeHead(w);
  if (core.clock instanceof ManualClock) core.clock.tick();
}

/** Decodes a time-like payload field of `bits` bits relative to `ref` (any integer). */
export function near(field: number, ref: number, bits: number): number {
  const shift = 32 - bits;
  return ref + (((field - ref) << shift) >> shift);
}
