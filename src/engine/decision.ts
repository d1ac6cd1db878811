import type { Clock } from '../clock.js';
import { LimiterClosedError } from '../errors.js';
import { permitsError } from '../validate.js';
import {
  GEN_MASK,
  GEN_SHIFT,
  H_CONTROL,
  PAYLOAD_MASK,
  QUEUED_FLAG,
  REJECT,
  RESERVED,
  S_ADMITTED,
  S_REJECTED,
  S_STAMP,
  S_STATE,
  STAMP_MASK,
  STAMP_PER_US,
  WIDE_LOW,
  wideRejectedWord,
} from './layout.js';
import type { WaitQueues } from './queue.js';
import { GEN_SAFE_SPAN, type Key, NO_SLOT, type SlotPolicy, type SlotTable } from './table.js';
import { cas64, storeWide, widePayload } from './wide.js';

/** How decide() was called: a plain try, acquire()'s first try, or the head waiter. */
export type AttemptMode = 0 | 1 | 2;
export const TRY: AttemptMode = 0;
export const ENQUEUE: AttemptMode = 1;
export const HEAD: AttemptMode = 2;

/**
 * An algorithm's transition: the state after granting `permits` at `nowUs`, or REJECT.
 * Called with the algorithm (the limiter) as `this`.
 */
export type StepFn<A> = (
  this: A,
  state: number,
  stamp: number,
  nowUs: number,
  permits: number,
) => number;

/** What decide() needs of the algorithm besides its step. */
export interface Algorithm extends SlotPolicy {
  /** After a grant: SlidingLog writes its entries, Concurrency its holder record. */
  admitted(w: number, before: number, nowUs: number, permits: number): void;
  /** A new key found no slot: reports it; true when `whenFull` allows it anyway. */
  tableFull(key: Key | undefined): boolean;
  /**
   * Takes back a grant whose CAS moved slot word `w` from state `s` (ext `x`) to `next` (a
   * wide table's payload) when the slot turned out to hold another key (see stands()).
   */
  takeBack(w: number, s: number, x: number, next: number, permits: number): void;
  /**
   * Limiter.syncConfig() after a decision that met a moved control word: true when the options
   * changed and the decision may have used the old ones on a state the reconfigure() did
   * not convert (see Limiter.convertsStates), so it must be taken back and made again.
   */
  decidedOnOldOptions(): boolean;
}

/**
 * The fields every decision reads and writes, in one object whose shape is the same for
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
  /** A wide table (64-bit states): decisions go through runWide(). */
  readonly wide: boolean;
  // Written by decide() for consume() and acquire(): the word, state and stamp the
  // decision used. Plain fields on a per-thread object: nothing allocated per call.
  /** The slot's hot word index of the last decision (NO_SLOT: the table was full). */
  lastWord = 0;
  /** The state after the decision: the one a grant wrote, or the one a refusal read. */
  lastState = 0;
  lastStamp = 0;
  /**
   * The state word the decision read: the one a grant replaced (for the algorithms'
   * `admitted()` hooks), and the slot's generation for stands() and acquire().
   */
  priorState = 0;
  /** The time of the last decision (SlidingLog reads it while probing future times). */
  decisionUs = 0;
  /** `decisionUs` as a stamp (see layout.ts). */
  stampNow = 0;
  /** True while retryAfterUs() evaluates step() at future times. */
  probing = false;
  /** For stepQueued(): when the head waiter being served was refused and queued. */
  queuedSinceUs = 0;
  /** The limiter's syncConfig() (Algorithm.syncConfig), for enter()'s refusals. */
  syncConfig: () => boolean = noSync;

  constructor(
    /** Replaced when the buffer is mapped again after the table grew (Limiter.remap). */
    public i32: Int32Array,
    /** The same as 64-bit words (runWide()'s CAS); replaced with `i32`. */
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

/**
 * A decision, in two calls: `enter()` checks the call and finds the key's slot, `run()`
 * takes `permits` from it if `step` allows, by one CAS on the key's state word. Neither
 * waits or allocates. tryAcquire() goes through decide(), which is enter() and run()'s
 * first pass written out small (see there); acquire()'s attempts call the two directly.
 *
 * Returns the slot reference to pass to run(), NO_SLOT when the table has none for the
 * key; sets `core.decisionUs` and `core.stampNow`.
 */
export function enter(
  core: Core,
  algo: Algorithm,
  key: Key | undefined,
  permits: number,
  nowUs: number,
): number {
  // One read of the control word serves the closed check and the cache's epoch check.
  const control = core.i32[H_CONTROL]!;
  // Closed, or `permits` not an integer from 1 to the limit (≤ 2^31 − 1), in few bytes of
  // bytecode (see decide()): an int32 below 1 turns into 2^31 or more by `- 1 >>> 0`,
  // and anything that is not an int32 fails `| 0`.
  if (control & 1 || (permits - 1) >>> 0 >= core.limit || (permits | 0) !== permits) {
    checkCall(core, permits);
  }
  core.decisionUs = nowUs;
  // Stamps are 2^20 µs: multiplying by 2^-20 is exact.
  core.stampNow = Math.floor((nowUs - core.epochUs) * STAMP_PER_US);
  return key === undefined ? core.table.defaultSlot : core.table.slotOf(key, control, nowUs, algo);
}

/**
 * A whole tryAcquire() decision: enter() and the first pass of run()'s loop. It serves
 * every algorithm, and each limiter class calls it from a method of its own with its own
 * `step` (tryAcquire, e.g. in algorithms/gcra.ts): V8 inlines it into that method, where
 * `step` is a constant, and inlines the step in turn, so every class gets a decision
 * specialised for it and no call site in it ever sees another class.
 *
 * That only holds while it all fits: V8 (Node 20) inlines a function of at most 460 bytes
 * of bytecode, and at most ~920 bytes in all into one optimised function, counting the
 * clock read (~90 bytes for CoarseClock, ~180 for performance.now()) and the step. So the
 * common case (the slot is the key's, nobody queued ahead, the CAS won) is one straight
 * run, written for few bytes of bytecode; anything else — no slot, a slot moved, waiters
 * queued, a grant that must first raise the slot's stamp, a lost CAS, a reference to look
 * up again — is a call of run(), which starts its loop from the slot's words again. The
 * algorithms' after-grant hooks run in the callers. (When it does not all fit, V8 leaves
 * out whatever it meets last, often the clock's validation wrapper.)
 */
export function decide<A extends Algorithm>(
  core: Core,
  algo: A,
  step: StepFn<A>,
  key: Key | undefined,
  permits: number,
  nowUs: number,
): boolean {
  let ref = enter(core, algo, key, permits, nowUs);
  if (ref !== NO_SLOT) {
    // Read after enter(): a lookup that met a newer segment has mapped the buffer again.
    const i32 = core.i32;
    const w = ref >>> 4;
    // `i32[w]` is the state word: S_STATE is 0 (and `w + 0` costs bytecode, see above).
    const s = i32[w]!;
    const raw = i32[w + S_STAMP]!;
    // The slot is the key's and not being rebuilt ((s & PAYLOAD_MASK) !== RESERVED in fewer
    // bytes of bytecode: the payload's 28 bits shifted to the top of the word).
    if (s >>> GEN_SHIFT === (ref & 15) && s << 4 !== RESERVED << 4) {
      // unwrapStamp(), written out.
      const stampNow = core.stampNow;
      const stamp = stampNow + (((raw - stampNow) << 1) >> 1);
      core.lastWord = w;
      core.lastStamp = stamp;
      core.priorState = s;
      const next = step.call(algo, s, stamp, nowUs, permits);
      const refused = next === REJECT;
      // A grant is made here only on a stamp word that reads exactly `stampNow`: no
      // waiters queued (its sign bit, the queued flag, is clear) and the stamp current.
      // Otherwise it is run()'s to make: waiters queued ahead (in FIFO order nobody takes
      // permits before them), or a stamp to raise first (once a stamp period per key at
      // most). A refusal stands either way: run() would refuse as well. Then, while no
      // other thread can reach the buffer (see Core.shared), nothing can change the word
      // between the read above and this write: a plain store, where the CAS is a call
      // into a builtin. `(x = next) === next` is that store.
      if (
        refused ||
        (raw === stampNow && (core.shared ? casWord(i32, w, s, next) : (i32[w] = next) === next))
      ) {
        if (
          i32[H_CONTROL]! - core.table.epoch < GEN_SAFE_SPAN ||
          stands(core, algo, next, permits, key)
        ) {
          core.lastState = refused ? s : next;
          // count(), written out.
          const index = w + (refused ? S_REJECTED : S_ADMITTED);
          if (core.shared) addWord(i32, index, permits);
          else i32[index]! += permits;
          return !refused;
        }
        ref = LOOK_UP_AGAIN;
      }
    }
  }
  return run(core, algo, step, ref, permits, key, TRY);
}

function noSync(): boolean {
  return false;
}

/** A reference run() looks up again before its first pass (see stands()). */
const LOOK_UP_AGAIN = -2;

/**
 * The decision loop after enter(); true when the permits were granted. The caller runs
 * the algorithm's `admitted()` hook after a grant (`core.priorState` is the state it
 * replaced), unless `core.lastWord` is NO_SLOT: a key with no slot allowed by `whenFull`.
 */
export function run<A extends Algorithm>(
  core: Core,
  algo: A,
  step: StepFn<A>,
  ref: number,
  permits: number,
  key: Key | undefined,
  mode: AttemptMode,
): boolean {
  if (ref === LOOK_UP_AGAIN) ref = core.table.refresh(key, core.decisionUs, algo);
  let i32 = core.i32;
  for (;;) {
    if (ref === NO_SLOT) {
      core.lastWord = NO_SLOT;
      return algo.tableFull(key);
    }
    const w = ref >>> 4;
    // A plain read is enough: the CAS below validates it.
    const s = i32[w + S_STATE]!;
    if (!slotMoved(s, ref)) {
      // Read after the state: a stamp is stored before its state's CAS, so this stamp is
      // as new as the write that produced `s`, or (reordered) older by nanoseconds; the
      // decode tolerates a stamp minutes old.
      const raw = i32[w + S_STAMP]!;
      const stamp = unwrapStamp(raw, core.stampNow);
      core.lastWord = w;
      core.lastState = s;
      core.lastStamp = stamp;
      core.priorState = s;
      let next = REJECT;
      // Waiters queued (the flag is the stamp word's sign bit): in FIFO order nobody takes
      // permits ahead of them but the head waiter itself.
      if (raw >= 0 || mode === HEAD || !core.fifo) {
        next = step.call(algo, s, stamp, core.decisionUs, permits);
      } else if (core.queues.sweep(w)) continue; // only dead threads waited
      if (next !== REJECT) {
        if (core.stampNow > stamp) raiseStamp(core, w, raw);
        if (Atomics.compareExchange(i32, w + S_STATE, s, next) !== s) continue;
      }
      // Is the reference still to be trusted? Asked after the decision: see stands().
      if (
        i32[H_CONTROL]! - core.table.epoch < GEN_SAFE_SPAN ||
        stands(core, algo, next, permits, key)
      ) {
        if (next !== REJECT) {
          core.lastState = next;
        } else if (mode !== TRY) {
          return false; // a caller about to wait (or waiting) is not refused
        }
        count(core, w + (next === REJECT ? S_REJECTED : S_ADMITTED), permits);
        return next !== REJECT;
      }
    }
    // The slot is not (or no longer) the key's: look it up again.
    ref = core.table.refresh(key, core.decisionUs, algo);
    i32 = core.i32; // a lookup that met a newer segment has mapped the buffer again
  }
}

/**
 * A wide algorithm's transition: the payload after granting `permits` at `nowUs`, or
 * REJECT. `p` is the slot's payload (W_FRESH for a fresh slot; see WIDE_LOW_BITS).
 */
export type WideStepFn<A> = (
  this: A,
  p: number,
  stamp: number,
  nowUs: number,
  permits: number,
) => number;

/**
 * run() for a wide table: the state is the 64-bit word [ext, state], changed by one 64-bit
 * CAS; the step sees and returns payloads. `core.lastState` is then the payload and
 * `core.priorState` the state word the decision read (the one a grant replaced; its
 * generation).
 */
export function runWide<A extends Algorithm>(
  core: Core,
  algo: A,
  step: WideStepFn<A>,
  ref: number,
  permits: number,
  key: Key | undefined,
  mode: AttemptMode,
): boolean {
  if (ref === LOOK_UP_AGAIN) ref = core.table.refresh(key, core.decisionUs, algo);
  let i32 = core.i32;
  for (;;) {
    if (ref === NO_SLOT) {
      core.lastWord = NO_SLOT;
      return algo.tableFull(key);
    }
    const w = ref >>> 4;
    const s = i32[w + S_STATE]!;
    if (!slotMoved(s, ref)) {
      // Two plain reads: the 64-bit CAS below validates the pair, and a refusal reads both
      // again (a pair torn by a concurrent CAS must not refuse).
      const x = i32[w - 1]!;
      const raw = i32[w + S_STAMP]!;
      const stamp = unwrapStamp(raw, core.stampNow);
      const p = widePayload(s, x);
      core.lastWord = w;
      core.lastState = p;
      core.lastStamp = stamp;
      core.priorState = s;
      let next = REJECT;
      if (raw >= 0 || mode === HEAD || !core.fifo) {
        next = step.call(algo, p, stamp, core.decisionUs, permits);
      } else if (core.queues.sweep(w)) continue;
      // (The rare and the long paths are calls: runWide() must stay small enough for V8 to
      // inline it into each class's tryAcquireWide(), see run().)
      if (next !== REJECT) {
        if (!grantWide(core, w, s, x, raw, stamp, next)) continue;
      } else if (torn(i32, w, s, x)) {
        continue;
      }
      if (
        i32[H_CONTROL]! - core.table.epoch < GEN_SAFE_SPAN ||
        stands(core, algo, next, permits, key, x)
      ) {
        if (next === REJECT && mode !== TRY) return false;
        countWide(core, w, next, permits);
        return next !== REJECT;
      }
    }
    ref = core.table.refresh(key, core.decisionUs, algo);
    i32 = core.i32;
  }
}

/** decide() for a wide table: enter() and the first pass of runWide()'s loop. */
export function decideWide<A extends Algorithm>(
  core: Core,
  algo: A,
  step: WideStepFn<A>,
  key: Key | undefined,
  permits: number,
  nowUs: number,
): boolean {
  let ref = enter(core, algo, key, permits, nowUs);
  if (ref !== NO_SLOT) {
    const i32 = core.i32;
    const w = ref >>> 4;
    const s = i32[w + S_STATE]!;
    const x = i32[w - 1]!;
    const raw = i32[w + S_STAMP]!;
    // As in decide(): the slot is the key's, not being rebuilt, and nobody queued ahead.
    if (s >>> GEN_SHIFT === (ref & 15) && s << 4 !== RESERVED << 4 && (raw >= 0 || !core.fifo)) {
      const stamp = unwrapStamp(raw, core.stampNow);
      const p = widePayload(s, x);
      core.lastWord = w;
      core.lastState = p;
      core.lastStamp = stamp;
      core.priorState = s;
      const next = step.call(algo, p, stamp, nowUs, permits);
      // A refusal stands only on a pair that was not torn by a concurrent CAS.
      if (next !== REJECT ? grantWide(core, w, s, x, raw, stamp, next) : !torn(i32, w, s, x)) {
        if (
          i32[H_CONTROL]! - core.table.epoch < GEN_SAFE_SPAN ||
          stands(core, algo, next, permits, key, x)
        ) {
          countWide(core, w, next, permits);
          return next !== REJECT;
        }
        ref = LOOK_UP_AGAIN;
      }
    }
  }
  return runWide(core, algo, step, ref, permits, key, TRY);
}

/**
 * True when state word `s` no longer belongs to `ref`: the slot went to another key (or is
 * being rebuilt). The caller looks the key up again. A slot reassigned round to the same
 * generation passes: see stands().
 */
function slotMoved(s: number, ref: number): boolean {
  return s >>> GEN_SHIFT !== (ref & 15) || (s & PAYLOAD_MASK) === RESERVED;
}

/**
 * Whether the decision just made on slot word `w` (a grant, CAS done, or a refusal) stands,
 * asked when the control word moved GEN_SAFE_SPAN or more since the reference was derived.
 * A 4-bit generation proves that the slot still holds the key only while fewer than 16
 * reassignments happened: a cached reference that old, or a thread descheduled between
 * its read and its CAS while its slot was reassigned 16 times round to the same generation,
 * decides on another key's state. The check comes after the decision, so that it covers
 * the time up to the CAS; before it, it would leave that window open. The slot's
 * fingerprint tells: if it is the key's, the decision stands (and the thread's cache starts
 * a new epoch); if not, a grant is taken back and the caller looks the key up again.
 */
function stands<A extends Algorithm>(
  core: Core,
  algo: A,
  next: number,
  permits: number,
  key: Key | undefined,
  /** A wide table's ext word as the decision read it (a grant's CAS replaced it). */
  x = 0,
): boolean {
  // The slot and the state word the decision read.
  const w = core.lastWord;
  const s = core.priorState;
  // A reconfigure() moves the control word by GEN_SAFE_SPAN, so every thread's next decision
  // asks here: one made with the options it replaced is taken back and made again.
  if (algo.decidedOnOldOptions()) {
    if (next !== REJECT) algo.takeBack(w, s, x, next, permits);
    return false;
  }
  // The default key's slot is never reassigned.
  if (key === undefined || core.table.trusted() || core.table.holds(w, s >>> GEN_SHIFT, key)) {
    core.table.renewEpoch();
    return true;
  }
  if (next !== REJECT) algo.takeBack(w, s, x, next, permits);
  return false;
}

/**
 * A wide grant: raises the stamp, then the 64-bit CAS from (`s`, `x`) to `next` — or, while
 * no other thread can reach the buffer (Core.shared), two plain stores, as decide() does.
 */
function grantWide(
  core: Core,
  w: number,
  s: number,
  x: number,
  raw: number,
  stamp: number,
  next: number,
): boolean {
  if (core.stampNow > stamp) raiseStamp(core, w, raw);
  // wideExt() and wideState() in one: a step never returns W_FRESH.
  const nx = Math.floor(next / WIDE_LOW); // exact: a power of two
  const ns = (s & GEN_MASK) | (next - nx * WIDE_LOW);
  if (!core.shared) {
    storeWide(core.i32, w, ns, nx);
  } else if (!cas64(core.b64, w, s, x, ns, nx)) {
    return false;
  }
  core.lastState = next;
  return true;
}

/** True when the wide slot's words are no longer (`s`, `x`): read again before refusing. */
function torn(i32: Int32Array, w: number, s: number, x: number): boolean {
  return i32[w + S_STATE] !== s || i32[w - 1] !== x;
}

// decide()'s shared path's two atomics, as calls: a call takes fewer bytes of bytecode than
// the Atomics call written in, and a limiter that is not shared never makes it, so V8
// spends none of its inlining budget on it there (a shared one inlines both: they are small).

/** The CAS of state word `w` from `s` to `next`; true when it took. */
function casWord(i32: Int32Array, w: number, s: number, next: number): boolean {
  return Atomics.compareExchange(i32, w, s, next) === s;
}

function addWord(i32: Int32Array, index: number, n: number): void {
  Atomics.add(i32, index, n);
}

/** Adds to a per-key counter: a plain add while no other thread can write it. */
function count(core: Core, index: number, permits: number): void {
  if (core.shared) Atomics.add(core.i32, index, permits);
  else core.i32[index]! += permits;
}

/** count() for a wide table's decision on hot word `w` (see rejectedWord() in layout.ts). */
function countWide(core: Core, w: number, next: number, permits: number): void {
  if (next !== REJECT) count(core, w + S_ADMITTED, permits);
  else count(core, wideRejectedWord(w), permits);
}

/**
 * Moves the slot's stamp up to `stampNow` (once a second per active key at most), keeping
 * the queued flag. Done before the grant's CAS and never left behind: a granted state's
 * stamp is at least its grant's, which SlidingLog relies on to bound an entry whose
 * writer died (algorithms/sliding-log.ts).
 */
function raiseStamp(core: Core, w: number, raw: number): void {
  const stampNow = core.stampNow;
  const next = (stampNow & STAMP_MASK) | (raw & QUEUED_FLAG);
  const seen = Atomics.compareExchange(core.i32, w + S_STAMP, raw, next);
  if (seen !== raw) raiseStampAgain(core, w, seen);
  core.lastStamp = stampNow;
}

/** raiseStamp() after a lost CAS: to a queue flipping its flag (try again) or to another raise. */
function raiseStampAgain(core: Core, w: number, raw: number): void {
  const stampNow = core.stampNow;
  while (unwrapStamp(raw, stampNow) < stampNow) {
    const seen = Atomics.compareExchange(
      core.i32,
      w + S_STAMP,
      raw,
      (stampNow & STAMP_MASK) | (raw & QUEUED_FLAG),
    );
    if (seen === raw) return;
    raw = seen;
  }
}

/**
 * A call enter() would refuse before deciding: throws for a closed limiter or bad permits.
 * Returns when the permits are within a limit that another thread's reconfigure() raised
 * since this thread last read the options (it reads them again here, off the fast path).
 */
function checkCall(core: Core, permits: number): void {
  if ((Atomics.load(core.i32, H_CONTROL) & 1) !== 0) throw new LimiterClosedError();
  if (!core.syncConfig() || (permits - 1) >>> 0 >= core.limit || (permits | 0) !== permits) {
    throw permitsError(core.owner, permits, core.limit);
  }
}

/**
 * A stamp word's stamp (its low 31 bits, a count of 2^20 µs modulo 2^31) as the nearest
 * whole stamp to `stampNow`: exact for any gap under 2^30 stamps (34 years).
 */
export function unwrapStamp(raw: number, stampNow: number): number {
  // `raw & STAMP_MASK` would clear the queued flag (bit 31); `<< 1` drops it anyway.
  return stampNow + (((raw - stampNow) << 1) >> 1);
}
