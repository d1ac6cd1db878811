import { enter, run, TRY } from '../decision.js';
import { FRESH, GEN_MASK, PAYLOAD_MASK, REJECT, RESERVED, STAMP_US } from '../layout.js';
import { Limiter } from '../limiter.js';
import type { Attached, Fresh } from '../options.js';
import type { Key } from '../table.js';
import { integerOption, positiveNumberOption } from '../validate.js';

/** Largest capacity: the burst, in GCRA units, must fit well inside a 28-bit payload. */
export const MAX_GCRA_CAPACITY = 2 ** 24;
export const MIN_RATE_PER_SECOND = 1e-6;
export const MAX_RATE_PER_SECOND = 1e6;

/**
 * A bucket's own options, checked: `capacity` and the rate option named `rateName`
 * (`refillPerSecond` or `ratePerSecond`). Every backend's bucket classes read them here.
 */
export function readBucketOptions(
  owner: string,
  opts: Record<string, unknown>,
  rateName: 'refillPerSecond' | 'ratePerSecond',
): { capacity: number; rate: number } {
  const capacity = integerOption(owner, 'capacity', opts.capacity, 1, MAX_GCRA_CAPACITY);
  const rate = positiveNumberOption(
    owner,
    rateName,
    opts[rateName],
    MIN_RATE_PER_SECOND,
    MAX_RATE_PER_SECOND,
  );
  return { capacity, rate };
}

/** LeakyBucket's queueLimit: the bucket is the queue, so at most `capacity` (its default). */
export function leakyQueueLimit(opts: Record<string, unknown>, capacity: number): number {
  return opts.queueLimit === undefined
    ? capacity
    : integerOption('LeakyBucket', 'queueLimit', opts.queueLimit, 0, capacity);
}

/**
 * The Generic Cell Rate Algorithm: the whole state of a key is one theoretical arrival
 * time (TAT). Time is counted in units of 1/K of the emission interval T = 1 s / rate, so
 * T is an exact integer (no drift however long the run) and the burst `capacity × K`
 * stays below 2^24 units. The TAT is stored modulo 2^28 and decoded relative to the
 * slot's stamp (see layout.ts), so any idle time decodes exactly.
 *
 * `leaky` selects LeakyBucket's rule (a request passes only when the bucket has drained:
 * TAT ≤ now) instead of TokenBucket's (TAT − now + cost ≤ burst).
 */
export abstract class Gcra extends Limiter {
  readonly limit: number;
  /** Units per emission interval. */
  protected readonly k: number;
  /** Units per microsecond. */
  protected readonly scale: number;
  /** Burst tolerance in units: capacity × K. */
  protected readonly tau: number;

  protected constructor(
    owner: string,
    algo: number,
    source: Fresh | Attached,
    private readonly leaky: boolean,
  ) {
    super(owner, algo, source);
    const capacity = this.param(0);
    const rate = this.param(1);
    const intervalUs = 1e6 / rate;
    this.limit = capacity;
    // Finest unit such that the burst fits in 2^24 units and a unit is ≥ 1 µs, so that
    // time in units (µs since the epoch × scale) stays an exact integer for 285 years.
    this.k = Math.max(
      1,
      Math.min(Math.floor(MAX_GCRA_CAPACITY / capacity), Math.floor(intervalUs)),
    );
    this.scale = this.k / intervalUs;
    this.tau = capacity * this.k;
  }

  protected nowUnits(nowUs: number): number {
    return Math.floor((nowUs - this.epochUs) * this.scale);
  }

  protected tat(state: number, stamp: number): number {
    return Limiter.near(state & PAYLOAD_MASK, Math.floor(stamp * STAMP_US * this.scale), 28);
  }

  private encode(state: number, tat: number): number {
    let p = tat & PAYLOAD_MASK;
    // Two payload values are reserved; landing on one rounds the TAT up by ≤ 2 units
    // (a fraction of a microsecond of conservatism).
    if (p >= RESERVED) p = 0;
    return (state & GEN_MASK) | p;
  }

  // Limiter.tryAcquire again: a copy in every class lets V8 specialise it (see enter()).
  override tryAcquire(key?: Key, permits = 1): boolean {
    const core = this.core;
    const ref = enter(core, this, key, permits, core.clock.nowUs());
    return run(core, this, this.step, ref, permits, key, TRY);
  }

  protected step(state: number, stamp: number, nowUs: number, permits: number): number {
    // nowUnits(), tat() and encode() written out: the decision path inlines this, and V8
    // inlines only so much (see enter() in decision.ts).
    const now = Math.floor((nowUs - this.epochUs) * this.scale);
    const p = state & PAYLOAD_MASK;
    let base = now;
    if (p !== FRESH) {
      const ref = Math.floor(stamp * STAMP_US * this.scale);
      const tat = ref + (((p - ref) << 4) >> 4);
      if (tat > now) base = tat;
    }
    const cost = permits * this.k;
    if (base - now + cost > (this.leaky ? cost : this.tau)) return REJECT;
    const next = (base + cost) & PAYLOAD_MASK;
    return (state & GEN_MASK) | (next >= RESERVED ? 0 : next);
  }

  /**
   * The head waiter's step: a waiter that wakes late is granted at the theoretical time
   * (the TAT), not at its wake-up time, so the schedule follows the TAT line and lateness
   * is made up instead of carried into every later turn. Never earlier than the waiter's
   * own refused attempt: it was refused then, so the TAT was ahead of that time, and no
   * idle period is credited. The TAT still grows by the full cost per grant, so over any
   * interval T at most rate × T + capacity permits are granted.
   */
  protected override stepQueued(
    state: number,
    stamp: number,
    nowUs: number,
    permits: number,
  ): number {
    const now = this.nowUnits(nowUs);
    const cost = permits * this.k;
    const since = this.nowUnits(this.core.queuedSinceUs);
    let base = since < now ? since : now;
    if ((state & PAYLOAD_MASK) !== FRESH) {
      const tat = this.tat(state, stamp);
      if (tat > base) base = tat;
    }
    const allowance = this.leaky ? cost : this.tau;
    if (base - now + cost > allowance) return REJECT;
    return this.encode(state, base + cost);
  }

  protected giveBack(state: number, stamp: number, nowUs: number, permits: number): number {
    if ((state & PAYLOAD_MASK) === FRESH) return state;
    const now = this.nowUnits(nowUs);
    const tat = this.tat(state, stamp);
    if (tat <= now) return state;
    return this.encode(state, Math.max(now, tat - permits * this.k));
  }

  protected available(state: number, stamp: number, nowUs: number): number {
    if ((state & PAYLOAD_MASK) === FRESH) return this.limit;
    const now = this.nowUnits(nowUs);
    const ahead = Math.max(0, this.tat(state, stamp) - now);
    if (this.leaky) return ahead === 0 ? this.limit : 0;
    return Math.max(0, Math.min(this.limit, Math.floor((this.tau - ahead) / this.k)));
  }

  protected untilFreshUs(state: number, stamp: number, nowUs: number): number {
    if ((state & PAYLOAD_MASK) === FRESH) return 0;
    const ahead = this.tat(state, stamp) - this.nowUnits(nowUs);
    return ahead > 0 ? ahead / this.scale : 0;
  }

  protected retryEstimateUs(state: number, stamp: number, nowUs: number, permits: number): number {
    const now = this.nowUnits(nowUs);
    const tat = (state & PAYLOAD_MASK) === FRESH ? now : Math.max(now, this.tat(state, stamp));
    const wait = this.leaky ? tat - now : tat + permits * this.k - this.tau - now;
    return wait / this.scale;
  }
}
