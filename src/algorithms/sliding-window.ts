import { near, wakeWaiters } from '../engine/core.js';
import { decide, decideWide } from '../engine/decision.js';
import { explain, granted } from '../engine/explain.js';
import {
  FRESH,
  GEN_MASK,
  PAYLOAD_MASK,
  REJECT,
  STAMP_US,
  W_FRESH,
  WIDE_SPAN,
} from '../engine/layout.js';
import { type Key, NO_SLOT } from '../engine/table.js';
import { Limiter } from '../limiter.js';
import { Attached, type CommonOptions, type Decision, type Fresh, readCommon } from '../options.js';
import { rangeError, show } from '../validate.js';
import { ALGO_SLIDING_WINDOW } from './ids.js';
import { readSlidingWindowOptions, segmentBits } from './segment-bits.js';
import { SegmentRing } from './segmented-window.js';
import { reconfiguredWindow, wideSlidingBits, windowBits } from './window-bits.js';

/** The options of `new SlidingWindow()`: its own, then those every limiter takes. */
export interface SlidingWindowOptions extends CommonOptions {
  /**
   * Permits per sliding window. Integer ≥ 1: up to 2^31 − 1 for windows of 1 ms or more
   * (past what the 32-bit state holds, a wide table), less for shorter ones or with
   * `segments` (see the range table in docs/algorithms.md).
   */
  limit: number;
  /** Window length in milliseconds (0.001 to 2^31; 2^30 with `segments`). */
  windowMs: number;
  /**
   * Split the window into this many equal segments (an integer from 2 to 1000, each a
   * whole number of microseconds) and count exactly what the last `segments` segments
   * granted: .NET's SegmentsPerWindow. Costs 4 bytes per segment per key, and a decision
   * reads every segment. Omitted (default): the two-window estimate, one word per key.
   */
  segments?: number;
}

/**
 * SlidingWindow: the two-window counter. With `elapsed` the time since the current
 * aligned window began, a request of `permits` passes when
 *
 *     previous × (1 − elapsed / windowMs) + current + permits ≤ limit
 *
 * It smooths FixedWindow's boundary burst at the cost of treating the previous window's
 * permits as evenly spread. Both counters and the window number share one 28-bit word.
 *
 * With `segments`, exact to a segment instead: see SegmentRing (segmented-window.ts).
 */
export class SlidingWindow extends Limiter {
  readonly algorithm = 'SlidingWindow';
  /** Permits per window, at most (estimated across the boundary). */
  readonly limit!: number;
  // Derived from the options (configure()): reconfigure() changes them.
  /** @internal */
  private windowUs!: number;
  /** @internal The segmented algorithm, or null for the two-window estimate. */
  private ring!: SegmentRing | null;
  /** @internal */
  private countBits!: number;
  /** @internal */
  private countMask!: number;
  /** @internal */
  private wBits!: number;
  /** @internal */
  private wMask!: number;
  /** @internal Wide table: the previous window's count is kept in units of `prevQuantum` (a power of two). */
  private prevQuantum!: number;
  /** @internal */
  private prevBits!: number;
  /** @internal 2^countBits and 2^prevBits: a wide payload's fields are counted in these. */
  private countSpan!: number;
  /** @internal */
  private prevSpan!: number;
  // Their inverses, and prevQuantum's: a wide decision multiplies where it would divide
  // (exact, all powers of two), as a division takes several times a multiplication's
  // latency and three of them would stand one after another on the decision's path.
  /** @internal */
  private perCount!: number;
  /** @internal */
  private perPrev!: number;
  /** @internal */
  private perQuantum!: number;
  /** @internal The largest count the count fields hold (see configure()). */
  private ceiling!: number;
  /** @internal Wide table: limit × windowUs is below 2^53, so the weighted test is exact. */
  private exactWeights!: boolean;
  // Scratch results of read(): a per-thread object, so no allocation per call.
  /** @internal */
  private window = 0;
  /** @internal */
  private prev = 0;
  /** @internal */
  private curr = 0;

  /** Makes a limiter and its shared state; a TypeError or RangeError names a bad option. */
  constructor(options: SlidingWindowOptions) {
    super('SlidingWindow', ALGO_SLIDING_WINDOW, SlidingWindow.prepare(options));
    this.configure();
    // The default key's ring is taken here once per buffer (attach() finds it taken).
    if (this.ring !== null) this.opened(() => this.initSlot(0));
  }

  /** Window length in milliseconds (reconfigure() changes it). */
  get windowMs(): number {
    return this.param(1);
  }

  /** Segments per window; undefined for the two-window estimate. */
  get segments(): number | undefined {
    const segments = this.param(2);
    return segments > 0 ? segments : undefined;
  }

  /**
   * Takes `limit` and `windowMs` (with `segments`: `limit` alone, within the segment
   * fields the limiter was created with). What each key was granted stays counted (up to
   * the new limit): a higher limit admits the difference in the same window, a lower one
   * nothing more until the window allows. A new `windowMs` counts the key's weighted count
   * (previous window's share and current count) in the new window that contains now.
   */
  override reconfigure(options: { limit?: number; windowMs?: number; segments?: number }): void {
    super.reconfigure(options);
  }

  /** @internal */
  override reconfigurable(): readonly string[] {
    return ['limit', 'windowMs', 'segments'];
  }

  /** @internal */
  override reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = { limit: this.param(0), windowMs: this.param(1) };
    const segments = this.segments;
    if (segments === undefined) {
      if (opts.segments !== undefined) {
        throw rangeError(
          `${name}: option "segments" (${show(opts.segments)}) needs a ring of counts per key, and this limiter was created without "segments"; create it with segments to count by segment`,
        );
      }
      const [limit, windowMs, ceiling] = reconfiguredWindow(
        name,
        opts,
        current,
        2,
        this.core.wide,
        this.param(3),
      );
      return [limit, windowMs, 0, ceiling];
    }
    // Each key's ring holds `segments` counts of segments of a fixed length.
    for (const option of ['windowMs', 'segments'] as const) {
      const was = option === 'windowMs' ? current.windowMs : segments;
      if (opts[option] !== undefined && opts[option] !== was) {
        throw rangeError(
          `${name}: option "${option}" (${show(opts[option])}) cannot change with segments: each key's ring counts ${segments} segments of ${(current.windowMs / segments).toFixed(3).replace(/\.?0+$/, '')} ms; create a new limiter for another window or segment count`,
        );
      }
    }
    const merged = { ...current, segments, ...opts };
    const { limit } = readSlidingWindowOptions(name, merged, false);
    // The state words and rings keep the count fields the limiter was created with.
    const fieldsFor = Math.max(current.limit, this.param(3));
    const segmentUs = (current.windowMs * 1000) / segments;
    const most = 2 ** segmentBits(fieldsFor, segmentUs, segments)!.countBits - 3;
    if (limit > most) {
      throw rangeError(
        `${name}: option "limit" (${show(limit)}) needs wider count fields than this limiter's (limits up to ${most} with segments); create a new limiter for a larger limit`,
      );
    }
    return [limit, current.windowMs, segments, fieldsFor];
  }

  /** @internal The segment ring's counts are plain counts: a new limit reads them as they are. */
  override get convertsStates(): boolean {
    return this.ring === null;
  }

  /** @internal */
  override describe(state: number, stamp: number, nowUs: number): number[] | undefined {
    this.read(state, stamp, nowUs);
    if (this.prev === 0 && this.curr === 0) return undefined;
    // The previous window's share now, and the current count, in the current window.
    const share = this.weightedPrev(nowUs) / this.windowUs;
    return [this.window, this.windowUs, this.prev, this.curr, share];
  }

  /** @internal */
  override restate(d: number[], nowUs: number): number {
    const [window, windowUs, prev, curr, share] = d as [number, number, number, number, number];
    const w = this.windowUs;
    if (windowUs === w) {
      // The same window length: both counts as they were, up to the new limit.
      this.window = window;
      this.prev = Math.min(prev, this.ceiling);
      this.curr = Math.min(curr, this.ceiling);
    } else {
      this.window = Math.max(Math.floor(nowUs / w), Math.floor((window * windowUs) / w));
      this.prev = 0;
      this.curr = Math.min(this.ceiling, Math.ceil(share + curr));
    }
    return this.encode(0);
  }

  /** @internal */
  override configure(): void {
    (this as { limit: number }).limit = this.param(0);
    this.windowUs = this.param(1) * 1000;
    const segments = this.param(2);
    if (segments > 0) {
      this.ring = new SegmentRing(
        this.limit,
        Math.round(this.windowUs),
        segments,
        this.i32,
        this.pool!, // logRing > 0: the base made (or attached) the pool
        this.layout,
        this.epochUs,
        this.core,
        Math.max(this.limit, this.param(3)),
      );
      this.countBits = this.countMask = this.wBits = this.wMask = 0;
      this.prevQuantum = this.prevBits = this.countSpan = this.prevSpan = 0;
      this.perCount = this.perPrev = this.perQuantum = 0;
      this.exactWeights = true;
      this.ceiling = this.limit;
      return;
    }
    this.ring = null;
    // After a reconfigure(), the largest limit the count fields hold (param 3; 0 until
    // then): a key keeps what an earlier, higher limit granted it.
    this.ceiling = Math.max(this.limit, this.param(3));
    const bits = this.core.wide
      ? wideSlidingBits(this.ceiling, this.windowUs)
      : { ...windowBits(this.ceiling, this.windowUs, 2)!, prevBits: 0, prevQuantum: 1 };
    this.countBits = bits.countBits;
    this.countMask = 2 ** bits.countBits - 1;
    this.wBits = bits.windowBits;
    this.wMask = 2 ** bits.windowBits - 1;
    // Wide: window number, previous count and current count share 53 bits; the current
    // count is exact, the previous one may be kept in steps (wideSlidingBits()).
    this.prevBits = bits.prevBits;
    this.prevQuantum = bits.prevQuantum;
    this.exactWeights = this.limit * this.windowUs < WIDE_SPAN;
    this.countSpan = 2 ** bits.countBits;
    this.prevSpan = 2 ** this.prevBits;
    this.perCount = 2 ** -bits.countBits;
    this.perPrev = 2 ** -this.prevBits;
    this.perQuantum = 1 / this.prevQuantum;
  }

  /** @internal */
  private static prepare(options: SlidingWindowOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('SlidingWindow', options, [
      'limit',
      'windowMs',
      'segments',
    ]);
    const { limit, windowMs, segments, wide } = readSlidingWindowOptions(
      'SlidingWindow',
      opts,
      true,
    );
    if (segments === undefined) return { ...common, params: [limit, windowMs], logRing: 0, wide };
    // The segment ring lives where SlidingLog keeps its log: the pool, in 16-byte units.
    return {
      ...common,
      params: [limit, windowMs, segments],
      logRing: SegmentRing.ringUnits(segments),
    };
  }

  /** @internal */
  override remapped(): void {
    if (this.ring) this.ring.i32 = this.i32;
  }

  /** @internal */
  override initSlot(s: number): void {
    this.ring?.initSlot(s);
  }

  /** @internal Rolls the stored counters forward to now's window; results in window/prev/curr. */
  private read(state: number, stamp: number, nowUs: number): void {
    const now = Math.floor(nowUs / this.windowUs);
    this.window = now;
    this.prev = 0;
    this.curr = 0;
    let stored: number;
    let prev: number;
    let curr: number;
    const ref = Math.floor((this.epochUs + stamp * STAMP_US) / this.windowUs);
    if (this.core.wide) {
      if (state === W_FRESH) return;
      // Fields split by powers of two: exact, and no `%` (a call to fmod).
      const rest = Math.floor(state * this.perCount);
      curr = state - rest * this.countSpan;
      const high = Math.floor(rest * this.perPrev);
      prev = Math.min(this.ceiling, (rest - high * this.prevSpan) * this.prevQuantum);
      stored = near(high, ref, this.wBits);
    } else {
      const p = state & PAYLOAD_MASK;
      if (p === FRESH) return;
      stored = near(p >>> (2 * this.countBits), ref, this.wBits);
      prev = (p >>> this.countBits) & this.countMask;
      curr = p & this.countMask;
    }
    if (stored >= now) {
      // Same window, or the clock went back: keep the stored window.
      this.window = stored;
      this.prev = prev;
      this.curr = curr;
    } else if (stored === now - 1) {
      this.prev = curr;
    }
  }

  /** @internal Weighted count of the previous window at `nowUs`, times windowUs (exact in doubles). */
  private weightedPrev(nowUs: number): number {
    const elapsed = Math.max(0, nowUs - this.window * this.windowUs);
    return this.prev * Math.max(0, this.windowUs - elapsed);
  }

  /** @internal */
  private encode(state: number): number {
    if (this.core.wide) {
      const q = Math.ceil(this.prev * this.perQuantum);
      const high = (this.window & this.wMask) * this.prevSpan + q;
      return high * this.countSpan + this.curr;
    }
    return (
      (state & GEN_MASK) |
      ((this.window & this.wMask) << (2 * this.countBits)) |
      (this.prev << this.countBits) |
      this.curr
    );
  }

  // The same four lines in every class: see Limiter.consume.
  override consume(key?: Key, permits = 1): Decision {
    const a = this.tryAcquire(key, permits);
    const { word: w, state: s, stamp: t, atUs: n } = this.core.last;
    if (!a || w === NO_SLOT) return explain(this.core, this, a, key, permits);
    return granted(this.available(s, t, n), this.limit, this.untilFreshUs(s, t, n));
  }

  // The same call in every class, so that V8 specialises it: see Limiter.tryAcquire.
  override tryAcquire(key?: Key, permits = 1): boolean {
    const core = this.core;
    if (core.wide) return this.tryAcquireWide(key, permits);
    return decide(core, this, this.step, key, permits, core.clock.nowUs());
  }

  /** @internal */
  step(state: number, stamp: number, nowUs: number, permits: number): number {
    if (this.ring !== null) return this.ring.step(state, stamp, nowUs, permits);
    this.read(state, stamp, nowUs);
    const w = this.windowUs;
    if (this.weightedPrev(nowUs) + (this.curr + permits) * w > this.limit * w) return REJECT;
    this.curr += permits;
    return this.encode(state);
  }

  // The wide table's decision, in this class too: see tryAcquire().
  /** @internal */
  protected tryAcquireWide(key: Key | undefined, permits: number): boolean {
    const core = this.core;
    return decideWide(core, this, this.stepWide, key, permits, core.clock.nowUs());
  }

  /** @internal */
  override stepWide(p: number, stamp: number, nowUs: number, permits: number): number {
    this.read(p, stamp, nowUs);
    if (this.curr + permits > this.limit) return REJECT;
    if (this.exactWeights) {
      const w = this.windowUs;
      if (this.weightedPrev(nowUs) + (this.curr + permits) * w > this.limit * w) return REJECT;
    } else {
      // limit × window past 2^53: the weighted count in doubles, held a hair stricter than
      // its rounding error (relative 2^-52) so that rounding never admits.
      const room = this.limit - this.curr - permits;
      if (this.weightedPrev(nowUs) / this.windowUs > room * (1 - 2 ** -40)) return REJECT;
    }
    this.curr += permits;
    return this.encode(p);
  }

  /** @internal */
  override countsUntilUs(takenUs: number): number {
    // Counted in a later window (segment), they would weigh less there than a new grant.
    const unit = this.ring !== null ? this.ring.segmentUs : this.windowUs;
    return (Math.floor(takenUs / unit) + 1) * unit;
  }

  /** @internal */
  giveBack(state: number, stamp: number, nowUs: number, permits: number, takenUs: number): number {
    if (this.ring !== null) {
      const next = this.ring.giveBack(state, stamp, nowUs, permits, takenUs);
      // A past segment's credit changes the ring, not the state word: wake waiters here.
      if (this.ring.creditedRing) wakeWaiters(this.core, this.core.last.word);
      return next;
    }
    this.read(state, stamp, nowUs);
    // Credit the counter of the window the permits were taken in: the current one, or the
    // previous one (whose weight still counts). Older permits no longer count at all.
    const taken = Math.floor(takenUs / this.windowUs);
    if (taken === this.window && this.curr > 0) {
      this.curr = Math.max(0, this.curr - permits);
    } else if (taken === this.window - 1 && this.prev > 0) {
      this.prev = Math.max(0, this.prev - permits);
    } else {
      return state;
    }
    return this.encode(state);
  }

  /** @internal */
  available(state: number, stamp: number, nowUs: number): number {
    if (this.ring !== null) return this.ring.available(state, stamp, nowUs);
    this.read(state, stamp, nowUs);
    const used = this.weightedPrev(nowUs) / this.windowUs + this.curr;
    return Math.max(0, Math.floor(this.limit - used));
  }

  /** @internal */
  untilFreshUs(state: number, stamp: number, nowUs: number): number {
    if (this.ring !== null) return this.ring.untilFreshUs(state, stamp, nowUs);
    this.read(state, stamp, nowUs);
    if (this.curr > 0) return (this.window + 2) * this.windowUs - nowUs;
    if (this.prev > 0) return Math.max(0, (this.window + 1) * this.windowUs - nowUs);
    return 0;
  }

  /** @internal */
  retryEstimateUs(state: number, stamp: number, nowUs: number, permits: number): number {
    if (this.ring !== null) return this.ring.retryEstimateUs(state, stamp, nowUs, permits);
    this.read(state, stamp, nowUs);
    const w = this.windowUs;
    const start = this.window * w;
    if (this.curr + permits <= this.limit) {
      // Wait for the previous window's weight to decay enough within this window.
      if (this.prev === 0) return 0;
      return start + w - ((this.limit - this.curr - permits) * w) / this.prev - nowUs;
    }
    // Next window: the current count becomes the previous one and decays from there.
    const e = w - ((this.limit - permits) * w) / this.curr;
    return start + w + Math.max(0, e) - nowUs;
  }
}
