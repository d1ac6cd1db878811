import type { Core } from '../engine/core.js';
import {
  FRESH,
  GEN_MASK,
  type Layout,
  PAYLOAD_MASK,
  REJECT,
  RESERVED,
  S_STATE,
  STAMP_US,
  slotOfHotWord,
} from '../engine/layout.js';
import type { LogPool } from '../engine/log-pool.js';
import { segmentBits } from './segment-bits.js';

/**
 * x modulo m, in 0..m−1, for any integer x (segment numbers are doubles past 2^31) and
 * integer m from 1 to 2^31. Not `x % m` on the common path: on doubles V8 calls C's fmod
 * (several times dearer), and a decision takes five of these. Below 2^52 in size, the quotient,
 * rounded, is within one of the true floor, so `q × m` and `x − q × m` are exact integers
 * and one correction lands in 0..m−1. Exported for its test.
 */
export function mod(x: number, m: number): number {
  if (x >= 2 ** 52 || x <= -(2 ** 52)) {
    const r = x % m;
    return r < 0 ? r + m : r + 0; // + 0: not −0
  }
  const r = x - Math.floor(x / m) * m;
  return r < 0 ? r + m : r >= m ? r - m : r;
}

/**
 * SlidingWindow with `segments` (.NET's SegmentsPerWindow): the window is split into N
 * equal segments of `segmentUs`, aligned to the clock's origin, and a request passes when
 * the permits granted in the last N segments (the current one included) plus its own are
 * at most `limit`. Exact to a segment.
 *
 * Memory: the slot's state word holds the current segment `a` (the segment of the key's
 * last grant) and its count; the slot's ring (one Int32 per segment, in the log region of
 * layout.ts) holds the final counts of past segments, each tagged with its segment number
 * modulo 2^tagBits. Segments after `a` and up to now had no grant: their count is 0.
 *
 * A decision is one CAS on the state word. A decision in a segment after `a` "rolls": before
 * its CAS it writes `a`'s count into the ring and clears the entries of the segments it
 * skips (see roll()), and its CAS replaces the state with (now's segment, permits). The
 * writes are idempotent and only ever raise `a`'s entry, so rollers that race or fail their
 * CAS, or die between the writes and the CAS, never make the ring count less than what
 * was granted: the limiter can be stricter for a window, never looser.
 *
 * The count of segment `a` is the larger of the state's and its ring entry's (a roller
 * whose CAS failed may have written a count a refund has lowered since).
 */
export class SegmentRing {
  readonly segmentUs: number;
  private readonly countBits: number;
  private readonly countMask: number;
  private readonly segMod: number;
  private readonly segBits: number;
  private readonly tagMod: number;
  /** The limiter's view of its table buffer, replaced when it is mapped again (remapped). */
  i32: Int32Array;
  // Scratch of decode(): the state explained, per thread, so that nothing is allocated.
  private fresh = true;
  private a = 0;
  private c = 0;
  private cur = 0;
  private base = 0;
  /** roll()'s planned CASes: ring index, expected value, new value. */
  private readonly plan: Int32Array;
  /** Set by giveBack() when it credited a ring entry (the state word did not change). */
  creditedRing = false;

  constructor(
    readonly limit: number,
    windowUs: number,
    readonly n: number,
    i32: Int32Array,
    /** The rings, one per slot in use (see LogPool); `base` indexes its Int32 view. */
    private readonly pool: LogPool,
    private readonly layout: Layout,
    private readonly epochUs: number,
    private readonly core: Core,
    /**
     * The limit the count fields are sized for: the limit, or after a reconfigure() the
     * one the limiter was created with (a lower limit reads the same fields).
     */
    fieldsFor = limit,
  ) {
    this.segmentUs = windowUs / n;
    const bits = segmentBits(fieldsFor, this.segmentUs, n)!;
    this.countBits = bits.countBits;
    this.countMask = 2 ** bits.countBits - 1;
    this.segBits = bits.segBits;
    this.segMod = 2 ** bits.segBits;
    this.tagMod = 2 ** bits.tagBits;
    this.i32 = i32;
    this.plan = new Int32Array(3 * (n + 1));
  }

  /** Ring entries (Int32) a slot needs, in the layout's 16-byte units. */
  static ringUnits(segments: number): number {
    return Math.ceil(segments / 4);
  }

  /** Zeroes slot `s`'s ring (a new key, or a reset): no past segment holds permits. */
  initSlot(s: number): void {
    const base = this.pool.take(this.i32, s) >> 2;
    const ring = this.pool.i32;
    for (let k = 0; k < this.n; k++) Atomics.store(ring, base + k, 0);
  }

  /**
   * Explains `state` (of the slot whose hot word is `core.last.word`) at `nowUs`: the
   * state's segment `a` and count `c`, and `cur`, the segment decisions count in (now's, or
   * `a` if the clock went back).
   */
  private decode(state: number, stamp: number, nowUs: number): void {
    const w = this.core.last.word;
    this.base = this.pool.start(this.i32, slotOfHotWord(this.layout, w)) >> 2;
    const nowSeg = Math.floor(nowUs / this.segmentUs);
    const p = state & PAYLOAD_MASK;
    if (p === FRESH) {
      this.fresh = true;
      this.c = 0;
      this.cur = nowSeg;
      return;
    }
    this.fresh = false;
    // The stamp is the coarse time of a recent grant: the field decodes relative to it.
    const ref = Math.floor((this.epochUs + stamp * STAMP_US) / this.segmentUs);
    const shift = 32 - this.segBits;
    this.a = ref + ((((p >>> this.countBits) - ref) << shift) >> shift);
    this.c = p & this.countMask;
    this.cur = Math.max(nowSeg, this.a);
  }

  /** The ring's count for past segment `g`; 0 if its entry holds another segment. */
  private entry(g: number): number {
    const v = this.pool.i32[this.base + mod(g, this.n)]!;
    return v >>> this.countBits === mod(g, this.tagMod) ? v & this.countMask : 0;
  }

  /** The sum of the ring's counts for segments lo..hi (past segments, at most n). */
  private sum(lo: number, hi: number): number {
    const i32 = this.pool.i32;
    const base = this.base;
    const bits = this.countBits;
    const mask = this.countMask;
    let idx = mod(lo, this.n);
    let tag = mod(lo, this.tagMod);
    let total = 0;
    for (let g = lo; g <= hi; g++) {
      const v = i32[base + idx]!;
      if (v >>> bits === tag) total += v & mask;
      if (++idx === this.n) idx = 0;
      if (++tag === this.tagMod) tag = 0;
    }
    return total;
  }

  /** Segment `a`'s count: the state's, or its ring entry's if a roller wrote more. */
  private countA(): number {
    return Math.max(this.c, this.entry(this.a));
  }

  /** Permits counted in the window ending with segment `cur`, after decode(). */
  private used(): number {
    if (this.fresh) return 0;
    const lo = this.cur - this.n + 1;
    if (this.a < lo) return 0;
    return this.countA() + this.sum(lo, this.a - 1);
  }

  step(state: number, stamp: number, nowUs: number, permits: number): number {
    this.decode(state, stamp, nowUs);
    // An atomic read of the state before the ring's plain reads: it synchronises with the
    // CAS that wrote this state, so the ring entries its roller wrote are seen. Not shared
    // (see Core.shared), this thread was that roller.
    if (this.core.shared) Atomics.load(this.i32, this.core.last.word + S_STATE);
    const rolls = this.fresh || this.a < this.cur;
    if (rolls && !this.core.last.probing) this.roll(state);
    if (this.used() + permits > this.limit) return REJECT;
    const count = rolls ? permits : this.c + permits;
    return (state & GEN_MASK) | (mod(this.cur, this.segMod) << this.countBits) | count;
  }

  /**
   * Before a CAS that moves the state from segment `a` (or FRESH) to `cur`: writes `a`'s
   * count into the ring (if `a` stays in the window) and clears the entries of the
   * segments after `a` up to `cur`, which have no grant. An entry there may still hold the
   * segment n before (a grant inside the window of a decider whose clock lags ours): that
   * one is kept, as its tag cannot be mistaken for the new segment's; anything else is older
   * than any window and cleared, so that no tag can alias a segment read later.
   *
   * Every entry is read, then the state is read again: if it is still in segment `a`, no
   * roller has yet written anything for a later segment, so each entry read holds a segment
   * no later than `a`, and the CASes (expecting what was read) act on exactly that.
   */
  private roll(state: number): void {
    const i32 = this.pool.i32;
    const w = this.core.last.word;
    const n = this.n;
    const bits = this.countBits;
    const cur = this.cur;
    const lo = cur - n + 1;
    const from = this.fresh ? lo : Math.max(this.a + 1, lo);
    const plan = this.plan;
    for (;;) {
      let k = 0;
      let idx = mod(from, n);
      let keep = mod(from - n, this.tagMod);
      for (let g = from; g <= cur; g++) {
        const v = i32[this.base + idx]!;
        if (v !== 0 && v >>> bits !== keep) {
          plan[k++] = idx;
          plan[k++] = v;
          plan[k++] = 0;
        }
        if (++idx === n) idx = 0;
        if (++keep === this.tagMod) keep = 0;
      }
      if (!this.fresh && this.a >= lo) {
        const ia = mod(this.a, n);
        const v = i32[this.base + ia]!;
        const tag = mod(this.a, this.tagMod);
        // Only ever raise the count of `a`'s own entry; replace an older segment's.
        if (v >>> bits !== tag || (v & this.countMask) < this.c) {
          plan[k++] = ia;
          plan[k++] = v;
          plan[k++] = (tag << bits) | this.c;
        }
      }
      if (k === 0) return;
      const now = Atomics.load(this.i32, w + S_STATE);
      if (this.fresh) {
        if (now !== state) return; // the CAS will fail: decide again from the new state
      } else if (
        (now & GEN_MASK) !== (state & GEN_MASK) ||
        (now & PAYLOAD_MASK) === FRESH ||
        (now & PAYLOAD_MASK) === RESERVED ||
        (now & PAYLOAD_MASK) >>> bits !== (state & PAYLOAD_MASK) >>> bits
      ) {
        return;
      }
      let done = true;
      for (let j = 0; j < k; j += 3) {
        const at = this.base + plan[j]!;
        if (Atomics.compareExchange(i32, at, plan[j + 1]!, plan[j + 2]!) !== plan[j + 1]) {
          done = false;
        }
      }
      // An entry changed under us (another roller of the same state): read them again.
      if (done) return;
    }
  }

  /**
   * Gives back `permits` taken at `takenUs`: from segment `a`, by lowering the state's count
   * (returned, for the caller's CAS), and `a`'s ring entry if a roller wrote one; from an
   * earlier segment still in the window, by a CAS on its ring entry (the state is returned
   * unchanged and `creditedRing` set). Permits from a segment that left the window are
   * dropped. A roller racing a credit can only raise an entry again: stricter, not looser.
   */
  giveBack(state: number, stamp: number, nowUs: number, permits: number, takenUs: number): number {
    this.creditedRing = false;
    this.decode(state, stamp, nowUs);
    if (this.fresh) return state;
    const taken = Math.floor(takenUs / this.segmentUs);
    if (taken > this.a || taken < this.cur - this.n + 1) return state;
    if (taken === this.a) {
      if (this.countA() === 0) return state;
      const c = Math.max(0, this.countA() - permits);
      this.lower(this.a, c);
      return (state & GEN_MASK) | ((state & PAYLOAD_MASK) - this.c) | c;
    }
    for (;;) {
      const at = this.base + mod(taken, this.n);
      const v = Atomics.load(this.pool.i32, at);
      const tag = mod(taken, this.tagMod);
      if (v >>> this.countBits !== tag || (v & this.countMask) === 0) return state;
      const next = (tag << this.countBits) | Math.max(0, (v & this.countMask) - permits);
      if (Atomics.compareExchange(this.pool.i32, at, v, next) === v) {
        this.creditedRing = true;
        return state;
      }
    }
  }

  /** Lowers segment `g`'s ring entry to at most `count`, if it holds `g`. */
  private lower(g: number, count: number): void {
    const at = this.base + mod(g, this.n);
    const tag = mod(g, this.tagMod);
    for (;;) {
      const v = Atomics.load(this.pool.i32, at);
      if (v >>> this.countBits !== tag || (v & this.countMask) <= count) return;
      if (Atomics.compareExchange(this.pool.i32, at, v, (tag << this.countBits) | count) === v)
        return;
    }
  }

  available(state: number, stamp: number, nowUs: number): number {
    this.decode(state, stamp, nowUs);
    return Math.max(0, this.limit - this.used());
  }

  /** Until the newest segment holding permits has left the window. */
  untilFreshUs(state: number, stamp: number, nowUs: number): number {
    this.decode(state, stamp, nowUs);
    if (this.fresh) return 0;
    const lo = this.cur - this.n + 1;
    for (let g = this.a; g >= lo; g--) {
      if ((g === this.a ? this.countA() : this.entry(g)) > 0) {
        return Math.max(0, (g + this.n) * this.segmentUs - nowUs);
      }
    }
    return 0;
  }

  /** When enough of the oldest segments holding permits have left the window: exact. */
  retryEstimateUs(state: number, stamp: number, nowUs: number, permits: number): number {
    this.decode(state, stamp, nowUs);
    let used = this.used();
    if (used + permits <= this.limit) return 0;
    const lo = this.cur - this.n + 1;
    for (let g = lo; g <= this.a; g++) {
      used -= g === this.a ? this.countA() : this.entry(g);
      if (used + permits <= this.limit) return Math.max(0, (g + this.n) * this.segmentUs - nowUs);
    }
    return (this.a + this.n) * this.segmentUs - nowUs;
  }
}
