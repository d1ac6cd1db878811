import { near } from '../engine/core.js';
import { decide, decideWide } from '../engine/decision.js';
import { explain, granted } from '../engine/explain.js';
import { FRESH, GEN_MASK, PAYLOAD_MASK, REJECT, STAMP_US, W_FRESH } from '../engine/layout.js';
import { type Key, NO_SLOT } from '../engine/table.js';
import { Limiter } from '../limiter.js';
import { Attached, type CommonOptions, type Decision, type Fresh, readCommon } from '../options.js';
import { ALGO_FIXED_WINDOW } from './ids.js';
import {
  readWindowOptions,
  reconfiguredWindow,
  wideWindowBits,
  windowBits,
} from './window-bits.js';

/** The options of `new FixedWindow()`: its own, then those every limiter takes. */
export interface FixedWindowOptions extends CommonOptions {
  /**
   * Permits per window. Integer ≥ 1: up to 2^31 − 1 for windows of 1 ms or more (past what
   * the 32-bit state holds, a wide table), less for shorter ones (see docs/algorithms.md).
   */
  limit: number;
  /** Window length in milliseconds (0.001 to 2^31). Windows are aligned to the clock's origin. */
  windowMs: number;
}

/**
 * FixedWindow: at most `limit` permits per aligned window of `windowMs`. Cheap and
 * simple; a caller can get up to 2 × limit across a window boundary (the end of one
 * window and the start of the next). Use SlidingWindow or SlidingLog to smooth that.
 */
export class FixedWindow extends Limiter {
  readonly algorithm = 'FixedWindow';
  /** Permits per window, at most. */
  readonly limit!: number;
  // Derived from the options (configure()): reconfigure() changes them.
  /** @internal */
  private windowUs!: number;
  /** @internal */
  private countBits!: number;
  /** @internal */
  private countMask!: number;
  /** @internal 2^countBits: a wide payload's window number is counted in these. */
  private countSpan!: number;
  /** @internal 1 / countSpan: a wide decision multiplies where it would divide (exact, a power of two). */
  private perCount!: number;
  /** @internal */
  private wBits!: number;
  /** @internal */
  private wMask!: number;
  /** @internal The largest count the count field holds (see configure()). */
  private ceiling!: number;

  /** Makes a limiter and its shared state; a TypeError or RangeError names a bad option. */
  constructor(options: FixedWindowOptions) {
    super('FixedWindow', ALGO_FIXED_WINDOW, FixedWindow.prepare(options));
    this.configure();
  }

  /** Window length in milliseconds (reconfigure() changes it). */
  get windowMs(): number {
    return this.param(1);
  }

  /**
   * Takes `limit` and `windowMs`. What each key was granted in its current window stays
   * counted (up to the new limit): a higher limit admits the difference in the same window,
   * a lower one nothing more until the window ends. A new `windowMs` counts those permits
   * in the new window that contains now.
   */
  override reconfigure(options: { limit?: number; windowMs?: number }): void {
    super.reconfigure(options);
  }

  /** @internal */
  override reconfigurable(): readonly string[] {
    return ['limit', 'windowMs'];
  }

  /** @internal */
  override reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = { limit: this.param(0), windowMs: this.param(1) };
    return reconfiguredWindow(name, opts, current, 1, this.core.wide, this.param(2));
  }

  /** @internal */
  override describe(state: number, stamp: number, nowUs: number): number[] | undefined {
    const { window, count } = this.read(state, stamp, nowUs);
    return count === 0 ? undefined : [window * this.windowUs, count];
  }

  /** @internal */
  override restate(d: number[], nowUs: number): number {
    const window = Math.max(Math.floor(d[0]! / this.windowUs), Math.floor(nowUs / this.windowUs));
    const count = Math.min(d[1]!, this.ceiling);
    if (this.core.wide) return this.packWide(window, count);
    return ((window & this.wMask) << this.countBits) | count;
  }

  /** @internal */
  override configure(): void {
    (this as { limit: number }).limit = this.param(0);
    this.windowUs = this.param(1) * 1000;
    // After a reconfigure(), the largest limit the count field holds (param 2; 0 until
    // then): a key keeps what an earlier, higher limit granted it.
    this.ceiling = Math.max(this.limit, this.param(2));
    const bits = this.core.wide
      ? wideWindowBits(this.ceiling, this.windowUs)
      : windowBits(this.ceiling, this.windowUs, 1)!;
    this.countBits = bits.countBits;
    this.countMask = 2 ** bits.countBits - 1;
    this.countSpan = 2 ** bits.countBits;
    this.perCount = 2 ** -bits.countBits;
    this.wBits = bits.windowBits;
    this.wMask = 2 ** bits.windowBits - 1;
  }

  /** @internal */
  private static prepare(options: FixedWindowOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('FixedWindow', options, ['limit', 'windowMs']);
    const { limit, windowMs, wide } = readWindowOptions('FixedWindow', opts, 1, true);
    return { ...common, params: [limit, windowMs], logRing: 0, wide };
  }

  /** @internal The window the state counts in (≥ the current one) and its count; count 0 if stale. */
  private read(state: number, stamp: number, nowUs: number): { window: number; count: number } {
    const window = Math.floor(nowUs / this.windowUs);
    if (this.core.wide) {
      if (state === W_FRESH) return { window, count: 0 };
      const high = Math.floor(state * this.perCount);
      const count = state - high * this.countSpan;
      const ref = Math.floor((this.epochUs + stamp * STAMP_US) / this.windowUs);
      const stored = near(high, ref, this.wBits);
      return stored >= window ? { window: stored, count } : { window, count: 0 };
    }
    if ((state & PAYLOAD_MASK) === FRESH) return { window, count: 0 };
    const p = state & PAYLOAD_MASK;
    const ref = Math.floor((this.epochUs + stamp * STAMP_US) / this.windowUs);
    const stored = near(p >>> this.countBits, ref, this.wBits);
    // A stored window later than now means the clock went back: keep counting in it.
    return stored >= window ? { window: stored, count: p & this.countMask } : { window, count: 0 };
  }

  /** @internal A wide table's payload: `count` in `window`. */
  private packWide(window: number, count: number): number {
    return (window & this.wMask) * this.countSpan + count;
  }

  // The wide table's decision, in this class too: see tryAcquire().
  /** @internal */
  protected tryAcquireWide(key: Key | undefined, permits: number): boolean {
    const core = this.core;
    return decideWide(core, this, this.stepWide, key, permits, core.clock.nowUs());
  }

  /** @internal */
  override stepWide(p: number, stamp: number, nowUs: number, permits: number): number {
    // read() written out without its object, for the hot path.
    let window = Math.floor(nowUs / this.windowUs);
    let count = 0;
    if (p !== W_FRESH) {
      const high = Math.floor(p * this.perCount);
      const c = p - high * this.countSpan;
      const ref = Math.floor((this.epochUs + stamp * STAMP_US) / this.windowUs);
      const stored = near(high, ref, this.wBits);
      if (stored >= window) {
        window = stored;
        count = c;
      }
    }
    if (count + permits > this.limit) return REJECT;
    return (window & this.wMask) * this.countSpan + count + permits;
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
    // Inline of read() without the object, for the hot path.
    let window = Math.floor(nowUs / this.windowUs);
    let count = 0;
    const p = state & PAYLOAD_MASK;
    if (p !== FRESH) {
      const ref = Math.floor((this.epochUs + stamp * STAMP_US) / this.windowUs);
      const stored = near(p >>> this.countBits, ref, this.wBits);
      if (stored >= window) {
        window = stored;
        count = p & this.countMask;
      }
    }
    if (count + permits > this.limit) return REJECT;
    return (state & GEN_MASK) | ((window & this.wMask) << this.countBits) | (count + permits);
  }

  /** @internal */
  giveBack(state: number, stamp: number, nowUs: number, permits: number, takenUs: number): number {
    const { window, count } = this.read(state, stamp, nowUs);
    // Permits from a window that has passed are not this window's to give back.
    if (count === 0 || Math.floor(takenUs / this.windowUs) !== window) return state;
    if (this.core.wide) return this.packWide(window, Math.max(0, count - permits));
    return (
      (state & GEN_MASK) | ((window & this.wMask) << this.countBits) | Math.max(0, count - permits)
    );
  }

  /** @internal */
  available(state: number, stamp: number, nowUs: number): number {
    // Past the limit after a reconfigure() lowered it.
    return Math.max(0, this.limit - this.read(state, stamp, nowUs).count);
  }

  /** @internal */
  override countsUntilUs(takenUs: number): number {
    return (Math.floor(takenUs / this.windowUs) + 1) * this.windowUs;
  }

  /** @internal */
  untilFreshUs(state: number, stamp: number, nowUs: number): number {
    const { window, count } = this.read(state, stamp, nowUs);
    return count === 0 ? 0 : (window + 1) * this.windowUs - nowUs;
  }

  /** @internal */
  retryEstimateUs(state: number, stamp: number, nowUs: number): number {
    return (this.read(state, stamp, nowUs).window + 1) * this.windowUs - nowUs;
  }
}
