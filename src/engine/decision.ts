import { LimiterClosedError } from '../errors.js';
import { checkPermits, permitsError } from '../validate.js';
import type { Algorithm } from './algorithm.js';
import { type Core, stampOf, unwrapStamp, wakeWaiters } from './core.js';
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
import { GEN_SAFE_SPAN, type Key, NO_SLOT } from './table.js';
import { withSlotLocked } from './table-walk.js';
import { cas64, storeWide, wideExt, widePayload, wideState } from './wide.js';

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

/**
 * A decision, in two calls: `enter()` checks the call and finds the key's slot, `run()`
 * takes `permits` from it if `step` allows, by one CAS on the key's state word. Neither
 * waits or allocates. tryAcquire() goes through decide(), which is enter() and run()'s
 * first pass written out small (see there); acquire()'s attempts call the two directly.
 *
 * Returns the slot reference to pass to run(), NO_SLOT when the table has none for the
 * key; sets `core.last.atUs` and `core.last.stampNow`.
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
  // Closed, or `permits` not an integer from 1 to the limit (≤ 2^31 − 1): isPermits()
  // (validate.ts) in few bytes of bytecode (see decide()): an int32 below 1 turns into 2^31 or more by `- 1 >>> 0`,
  // and anything that is not an int32 fails `| 0`.
  if (control & 1 || (permits - 1) >>> 0 >= core.limit || (permits | 0) !== permits) {
    checkCall(core, permits);
  }
  const last = core.last;
  last.atUs = nowUs;
  // Stamps are 2^20 µs: multiplying by 2^-20 is exact.
  last.stampNow = Math.floor((nowUs - core.epochUs) * STAMP_PER_US);
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
 * clock read and the step. So the
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
      const last = core.last;
      const stampNow = last.stampNow;
      const stamp = stampNow + (((raw - stampNow) << 1) >> 1);
      last.word = w;
      last.stamp = stamp;
      last.prior = s;
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
          last.state = refused ? s : next;
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

/** A reference run() looks up again before its first pass (see stands()). */
const LOOK_UP_AGAIN = -2;

/**
 * The decision loop after enter(); true when the permits were granted. The caller runs
 * the algorithm's `admitted()` hook after a grant (`core.last.prior` is the state it
 * replaced), unless `core.last.word` is NO_SLOT: a key with no slot allowed by `whenFull`.
 *
 * It serves both tables. A wide one's state is the 64-bit word [ext, state], changed by one
 * 64-bit CAS (grantWide()); `step` (a wide step: see WideStepFn) sees and returns payloads,
 * `core.last.state` is then the payload and `core.last.prior` the state word the decision
 * read (the one a grant replaced; its generation).
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
  const last = core.last;
  const wide = core.wide;
  if (ref === LOOK_UP_AGAIN) ref = core.table.refresh(key, last.atUs, algo);
  let i32 = core.i32;
  for (;;) {
    if (ref === NO_SLOT) {
      last.word = NO_SLOT;
      return algo.tableFull(key);
    }
    const w = ref >>> 4;
    // Plain reads are enough: the CAS below validates them (a wide table's pair too, and
    // a refusal reads both words again: a pair torn by a concurrent CAS must not refuse).
    const s = i32[w + S_STATE]!;
    if (!slotMoved(s, ref)) {
      const x = wide ? i32[w - 1]! : 0;
      // Read after the state: a stamp is stored before its state's CAS, so this stamp is
      // as new as the write that produced `s`, or (reordered) older by nanoseconds; the
      // decode tolerates a stamp minutes old.
      const raw = i32[w + S_STAMP]!;
      const stamp = unwrapStamp(raw, last.stampNow);
      const p = wide ? widePayload(s, x) : s;
      last.word = w;
      last.state = p;
      last.stamp = stamp;
      last.prior = s;
      let next = REJECT;
      // Waiters queued (the flag is the stamp word's sign bit): in FIFO order nobody takes
      // permits ahead of them but the head waiter itself.
      if (raw >= 0 || mode === HEAD || !core.fifo) {
        next = step.call(algo, p, stamp, last.atUs, permits);
      } else if (core.queues.sweep(w)) continue; // only dead threads waited
      if (next !== REJECT) {
        const took = wide
          ? grantWide(core, w, s, x, raw, stamp, next)
          : grant(core, w, s, raw, stamp, next);
        if (!took) continue;
      } else if (wide && torn(i32, w, s, x)) {
        continue;
      }
      // Is the reference still to be trusted? Asked after the decision: see stands().
      if (
        i32[H_CONTROL]! - core.table.epoch < GEN_SAFE_SPAN ||
        stands(core, algo, next, permits, key, x)
      ) {
        // A caller about to wait (or waiting) is not refused.
        if (next === REJECT && mode !== TRY) return false;
        if (wide) countWide(core, w, next, permits);
        else count(core, w + (next === REJECT ? S_REJECTED : S_ADMITTED), permits);
        return next !== REJECT;
      }
    }
    // The slot is not (or no longer) the key's: look it up again.
    ref = core.table.refresh(key, last.atUs, algo);
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

/** decide() for a wide table: enter() and the first pass of run()'s loop. */
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
      const last = core.last;
      const stamp = unwrapStamp(raw, last.stampNow);
      const p = widePayload(s, x);
      last.word = w;
      last.state = p;
      last.stamp = stamp;
      last.prior = s;
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
  return run(core, algo, step, ref, permits, key, TRY);
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
  const w = core.last.word;
  const s = core.last.prior;
  // A reconfigure() moves the control word by GEN_SAFE_SPAN, so every thread's next decision
  // asks here: one made with the options it replaced is taken back and made again.
  if (algo.decidedOnOldOptions()) {
    if (next !== REJECT) takeBack(core, algo, w, s, x, next, permits, key);
    return false;
  }
  // The default key's slot is never reassigned.
  if (key === undefined || core.table.trusted() || core.table.holds(w, s >>> GEN_SHIFT, key)) {
    core.table.renewEpoch();
    return true;
  }
  if (next !== REJECT) takeBack(core, algo, w, s, x, next, permits, key);
  return false;
}

/** A grant in run(): raises the stamp, then the CAS of state word `w` from `s` to `next`. */
function grant(
  core: Core,
  w: number,
  s: number,
  raw: number,
  stamp: number,
  next: number,
): boolean {
  if (core.last.stampNow > stamp) raiseStamp(core, w, raw);
  if (Atomics.compareExchange(core.i32, w + S_STATE, s, next) !== s) return false;
  core.last.state = next;
  return true;
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
  if (core.last.stampNow > stamp) raiseStamp(core, w, raw);
  // wideExt() and wideState() in one: a step never returns W_FRESH.
  const nx = Math.floor(next / WIDE_LOW); // exact: a power of two
  const ns = (s & GEN_MASK) | (next - nx * WIDE_LOW);
  if (!core.shared) {
    storeWide(core.i32, w, ns, nx);
  } else if (!cas64(core.b64, w, s, x, ns, nx)) {
    return false;
  }
  core.last.state = next;
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
  const stampNow = core.last.stampNow;
  const next = (stampNow & STAMP_MASK) | (raw & QUEUED_FLAG);
  const seen = Atomics.compareExchange(core.i32, w + S_STAMP, raw, next);
  if (seen !== raw) raiseStampAgain(core, w, seen);
  core.last.stamp = stampNow;
}

/** raiseStamp() after a lost CAS: to a queue flipping its flag (try again) or to another raise. */
function raiseStampAgain(core: Core, w: number, raw: number): void {
  const stampNow = core.last.stampNow;
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
  if (!core.syncConfig()) throw permitsError(core.owner, permits, core.limit);
  checkPermits(core.owner, permits, core.limit);
}

// ---- give-backs: the same one-word CAS, outside a decision ------------------------------

/** updateSlot(): the slot is not the key's (no int32 state or wide payload equals it). */
const SLOT_GONE = -(2 ** 32);

/**
 * Gives `permits` taken at `takenUs` (NaN: now) back to `key`, as refund() does: by the
 * algorithm's `giveBackKey()` where it has one, by the algorithm's `giveBack()` step
 * otherwise. No closed check: a waiter settling during close() still returns what it took.
 */
export function giveBackToKey(
  core: Core,
  algo: Algorithm,
  key: Key | undefined,
  permits: number,
  takenUs: number,
): void {
  if (algo.giveBackKey !== undefined) {
    algo.giveBackKey(key, permits, takenUs);
    return;
  }
  const nowUs = core.clock.nowUs();
  const at = Number.isNaN(takenUs) ? nowUs : takenUs;
  try {
    update(core, key, nowUs, (s, stamp) => algo.giveBack(s, stamp, nowUs, permits, at));
  } finally {
    algo.gaveBack();
  }
}

/**
 * Applies `f` to the key's state (a wide table's payload) by CAS until it sticks; no-op
 * for unknown keys. Returns the state written, or NO_SLOT. `core.last.word` and
 * `core.last.prior` tell the slot and the state word replaced.
 */
export function update(
  core: Core,
  key: Key | undefined,
  nowUs: number,
  f: (state: number, stamp: number) => number,
): number {
  for (let ref = core.table.find(key); ref !== NO_SLOT; ref = core.table.find(key)) {
    const next = updateSlot(core, ref >>> 4, ref & 15, nowUs, f, key);
    if (next !== SLOT_GONE) return next;
  }
  return NO_SLOT;
}

/**
 * update() on slot word `w` while it holds generation `gen` (and, for a `key`, while the
 * reference is trusted; see GEN_SAFE_SPAN). SLOT_GONE when the slot went to another key
 * before the CAS, or (undone then) at it.
 */
function updateSlot(
  core: Core,
  w: number,
  gen: number,
  nowUs: number,
  f: (state: number, stamp: number) => number,
  key: Key | undefined,
): number {
  const wide = core.wide;
  const table = core.table;
  // Not shared (see Core.shared): plain reads, and swap() stores.
  const shared = core.shared;
  for (;;) {
    const i32 = core.i32;
    const s = shared ? Atomics.load(i32, w + S_STATE) : i32[w + S_STATE]!;
    if (
      s >>> GEN_SHIFT !== gen ||
      (s & PAYLOAD_MASK) === RESERVED ||
      (key !== undefined && i32[H_CONTROL]! - table.epoch >= GEN_SAFE_SPAN)
    ) {
      return SLOT_GONE;
    }
    core.last.word = w;
    const x = wide ? (shared ? Atomics.load(i32, w - 1) : i32[w - 1]!) : 0;
    const p = wide ? widePayload(s, x) : s;
    const next = f(p, stampOf(core, w, nowUs));
    if (next === p) return next;
    if (!swap(core, w, s, x, next)) continue;
    // As in run(): a thread descheduled between the check and the CAS may have met the
    // slot reassigned round to its generation. Undone while nobody decided on it since
    // (if somebody did, the key holding the slot keeps what `f` gave it).
    if (
      key !== undefined &&
      Atomics.load(core.i32, H_CONTROL) - table.epoch >= GEN_SAFE_SPAN &&
      !table.holds(w, gen, key) &&
      unswap(core, w, s, x, next)
    ) {
      return SLOT_GONE;
    }
    core.last.prior = s;
    wakeWaiters(core, w);
    return next;
  }
}

/**
 * One CAS of slot word `w` from state `s` (ext `x`) to `next` (a wide table's payload);
 * plain stores while no other thread can reach the buffer (see Core.shared). True when it
 * took.
 */
export function swap(core: Core, w: number, s: number, x: number, next: number): boolean {
  if (core.wide) {
    const ns = wideState(s, next);
    const nx = wideExt(next);
    if (core.shared) return cas64(core.b64, w, s, x, ns, nx);
    storeWide(core.i32, w, ns, nx);
    return true;
  }
  if (core.shared) return Atomics.compareExchange(core.i32, w + S_STATE, s, next) === s;
  core.i32[w + S_STATE] = next;
  return true;
}

/** Undoes swap(core, w, s, x, next) if nothing changed the slot since; true when it did. */
function unswap(core: Core, w: number, s: number, x: number, next: number): boolean {
  if (!core.shared) {
    // Nothing else writes the words: they hold what swap() stored.
    if (core.wide) storeWide(core.i32, w, s, x);
    else core.i32[w + S_STATE] = s;
    return true;
  }
  if (core.wide) return cas64(core.b64, w, wideState(s, next), wideExt(next), s, x);
  return Atomics.compareExchange(core.i32, w + S_STATE, next, s) === next;
}

/**
 * Takes back a grant whose CAS moved slot word `w` from state `s` (ext `x`) to `next` (a
 * wide table's payload) when it must not stand (see stands()).
 */
function takeBack(
  core: Core,
  algo: Algorithm,
  w: number,
  s: number,
  x: number,
  next: number,
  permits: number,
  key: Key | undefined,
): void {
  try {
    // Nobody decided on the slot since: put it back as it was.
    if (!unswap(core, w, s, x, next)) {
      // Somebody did: give the permits back to the key holding the slot, as a refund of
      // permits taken now would, while it holds it (reassigned again, its state is gone).
      const nowUs = core.last.atUs;
      const giveBack = (q: number, stamp: number) => algo.giveBack(q, stamp, nowUs, permits, nowUs);
      const gen = s >>> GEN_SHIFT;
      if (updateSlot(core, w, gen, nowUs, giveBack, undefined) === SLOT_GONE) {
        // Or its generation moved while it stayed the key's (the default key's slot always
        // is): a reconfigure() converted the state, grant included, after the CAS. The
        // permits are given back from there, under the stripe's lock so that no further
        // conversion moves it meanwhile.
        withSlotLocked(core.table, w, () => {
          const now = Atomics.load(core.i32, w + S_STATE) >>> GEN_SHIFT;
          if (key === undefined || core.table.holds(w, now, key)) {
            updateSlot(core, w, now, nowUs, giveBack, undefined);
          }
        });
      }
    }
  } finally {
    algo.gaveBack();
  }
  wakeWaiters(core, w);
}
