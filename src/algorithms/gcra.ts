import {
  FRESH,
  GEN_MASK,
  PAYLOAD_MASK,
  REJECT,
  RESERVED,
  STAMP_US,
  W_FRESH,
  WIDE_SPAN,
} from '../layout.js';
import { Limiter } from '../limiter.js';
import type { Attached, Fresh } from '../options.js';
import { integerOption, positiveNumberOption } from '../validate.js';

/** Largest capacity: the burst, in GCRA units, must fit well inside a 28-bit payload. */
export const MAX_GCRA_CAPACITY = 2 ** 24;
export const MIN_RATE_PER_SECOND = 1e-6;
export const MAX_RATE_PER_SECOND = 1e6;
/** The wide table's ranges (a 64-bit state): options past the narrow ones choose it. */
export const MAX_WIDE_CAPACITY = 2 ** 31 - 1;
export const MAX_WIDE_RATE_PER_SECOND = 1e9;
/** A wide bucket's burst, in units, stays below this (see Gcra's wide step). */
const MAX_WIDE_TAU = 2 ** 40;
/** A wide bucket keeps its TAT modulo this many units. */
const WIDE_MOD = WIDE_SPAN / 2;
const WIDE_HALF = WIDE_MOD / 2;

/**
 * A bucket's own options, checked: `capacity` and the rate option named `rateName`
 * (`refillPerSecond` or `ratePerSecond`). Every backend's bucket classes read them here.
 */
export function readBucketOptions(
  owner: string,
  opts: Record<string, unknown>,
  rateName: 'refillPerSecond' | 'ratePerSecond',
  wideAllowed = false,
): { capacity: number; rate: number; wide: boolean } {
  const maxRate = wideAllowed ? MAX_WIDE_RATE_PER_SECOND : MAX_RATE_PER_SECOND;
  const maxCapacity = wideAllowed ? MAX_WIDE_CAPACITY : MAX_GCRA_CAPACITY;
  const capacity = integerOption(owner, 'capacity', opts.capacity, 1, maxCapacity);
  const rate = positiveNumberOption(owner, rateName, opts[rateName], MIN_RATE_PER_SECOND, maxRate);
  return { capacity, rate, wide: capacity > MAX_GCRA_CAPACITY || rate > MAX_RATE_PER_SECOND };
}

/**
 * A bucket's time units (see Gcra): `k` units per emission interval, `scale` units per µs
 * and the burst `tau` in units. Every backend computes them here, so that all decide alike.
 * The finest unit such that the burst fits in 2^24 units (2^40 in a wide table) and a unit
 * is at least 1 µs, so that time in units (µs since the epoch × scale) stays an exact
 * integer for 285 years; past 10^6 per second (wide only) a unit is the emission interval
 * itself, under 1 µs: time in units is then kept modulo 2^52 (see Gcra's stepWide).
 */
export function gcraUnits(
  capacity: number,
  ratePerSecond: number,
  wide: boolean,
): { k: number; scale: number; tau: number } {
  const intervalUs = 1e6 / ratePerSecond;
  const maxTau = wide ? MAX_WIDE_TAU : MAX_GCRA_CAPACITY;
  const k = Math.max(1, Math.min(Math.floor(maxTau / capacity), Math.floor(intervalUs)));
  return { k, scale: k / intervalUs, tau: capacity * k };
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
  /** Units per stamp period (STAMP_US × scale: exact, a power of two times scale). */
  private readonly unitsPerStamp: number;
  /** Wide table: µs after a slot's stamp (its last grant) beyond which its TAT has passed. */
  private readonly staleUs: number;

  protected constructor(
    owner: string,
    algo: number,
    source: Fresh | Attached,
    private readonly leaky: boolean,
  ) {
    super(owner, algo, source);
    const capacity = this.param(0);
    this.limit = capacity;
    const { k, scale, tau } = gcraUnits(capacity, this.param(1), this.core.wide);
    this.k = k;
    this.scale = scale;
    this.tau = tau;
    this.unitsPerStamp = STAMP_US * this.scale;
    // The last grant was before the end of its stamp period; its TAT at most tau later.
    this.staleUs = STAMP_US + this.tau / this.scale;
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

  // consume(), tryAcquire() and tryAcquireWide() are written in TokenBucket and in
  // LeakyBucket, not here: one copy serving both classes would see both, and V8 would
  // specialise it for neither (see Limiter.tryAcquire).

  protected step(state: number, stamp: number, nowUs: number, permits: number): number {
    // nowUnits(), tat() and encode() written out, in as few bytes of bytecode as V8 allows:
    // the decision path inlines this, and V8 inlines only so much (see decide() in
    // decision.ts). `x << 4 >>> 4` is `x & PAYLOAD_MASK` (a 28-bit literal takes 10 bytes,
    // a shift 3), `x >>> 28 << 28` is `x & GEN_MASK`, and FRESH << 4 is -16.
    const now = Math.floor((nowUs - this.epochUs) * this.scale);
    let base = now;
    if (state << 4 !== -16) {
      const ref = Math.floor(stamp * this.unitsPerStamp);
      const tat = ref + (((((state << 4) >>> 4) - ref) << 4) >> 4);
      if (tat > now) base = tat;
    }
    const cost = permits * this.k;
    if (base - now + cost > (this.leaky ? cost : this.tau)) return REJECT;
    const next = ((base + cost) << 4) >>> 4;
    return ((state >>> 28) << 28) | (next >= RESERVED ? 0 : next);
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
    if (this.core.wide) return this.giveBackWide(state, stamp, nowUs, permits);
    if ((state & PAYLOAD_MASK) === FRESH) return state;
    const now = this.nowUnits(nowUs);
    const tat = this.tat(state, stamp);
    if (tat <= now) return state;
    return this.encode(state, Math.max(now, tat - permits * this.k));
  }

  protected available(state: number, stamp: number, nowUs: number): number {
    const ahead = this.ahead(state, stamp, nowUs);
    if (this.leaky) return ahead === 0 ? this.limit : 0;
    return Math.max(0, Math.min(this.limit, Math.floor((this.tau - ahead) / this.k)));
  }

  protected untilFreshUs(state: number, stamp: number, nowUs: number): number {
    return this.ahead(state, stamp, nowUs) / this.scale;
  }

  protected retryEstimateUs(state: number, stamp: number, nowUs: number, permits: number): number {
    const ahead = this.ahead(state, stamp, nowUs);
    const wait = this.leaky ? ahead : ahead + permits * this.k - this.tau;
    return wait / this.scale;
  }

  /** How far the TAT is ahead of now, in units (0 when it is not), for either table. */
  private ahead(state: number, stamp: number, nowUs: number): number {
    if (this.core.wide) return Math.max(0, this.lead(state, stamp, nowUs, this.unitsMod(nowUs)));
    if ((state & PAYLOAD_MASK) === FRESH) return 0;
    return Math.max(0, this.tat(state, stamp) - this.nowUnits(nowUs));
  }

  // ---- the wide table (capacity past 2^24 or rate past 10^6 per second) ----------------
  //
  // The payload is the TAT in units modulo 2^52, so every sum stays an exact integer in
  // a double however long the process runs. It is decoded relative to now (the TAT is
  // never more than tau ahead of now, nor far behind it while the key is active): a key
  // whose stamp (last grant) is older than `staleUs` has a TAT in the past, so it is
  // read as drained without decoding.

  /** Time in units modulo 2^52 (exact: an integer double reduced by a power of two). */
  private unitsMod(nowUs: number): number {
    const u = Math.floor((nowUs - this.epochUs) * this.scale);
    return u >= 0 && u < WIDE_MOD ? u : u - Math.floor(u / WIDE_MOD) * WIDE_MOD;
  }

  /** TAT − now in units, signed (0 for a fresh or long-idle slot). */
  private lead(p: number, stamp: number, nowUs: number, now: number): number {
    if (p === W_FRESH || nowUs - this.epochUs >= stamp * STAMP_US + this.staleUs) return 0;
    const d = p - now;
    return d >= WIDE_HALF ? d - WIDE_MOD : d < -WIDE_HALF ? d + WIDE_MOD : d;
  }

  private wrap(tat: number): number {
    return tat >= WIDE_MOD ? tat - WIDE_MOD : tat < 0 ? tat + WIDE_MOD : tat;
  }

  protected override stepWide(p: number, stamp: number, nowUs: number, permits: number): number {
    const now = this.unitsMod(nowUs);
    const ahead = Math.max(0, this.lead(p, stamp, nowUs, now));
    const cost = permits * this.k;
    if (ahead + cost > (this.leaky ? cost : this.tau)) return REJECT;
    return this.wrap(now + ahead + cost);
  }

  protected override stepQueuedWide(
    p: number,
    stamp: number,
    nowUs: number,
    permits: number,
  ): number {
    // stepQueued(), relative to now: the waiter is granted at the TAT, never before its
    // own refused attempt.
    const now = this.unitsMod(nowUs);
    const cost = permits * this.k;
    const u = Math.floor((nowUs - this.epochUs) * this.scale);
    const since = Math.floor((this.core.queuedSinceUs - this.epochUs) * this.scale) - u;
    let base = since < 0 ? since : 0;
    if (p !== W_FRESH) {
      const lead = this.lead(p, stamp, nowUs, now);
      if (lead > base) base = lead;
    }
    if (base + cost > (this.leaky ? cost : this.tau)) return REJECT;
    return this.wrap(now + base + cost);
  }

  private giveBackWide(p: number, stamp: number, nowUs: number, permits: number): number {
    const now = this.unitsMod(nowUs);
    const ahead = this.lead(p, stamp, nowUs, now);
    if (ahead <= 0) return p;
    return this.wrap(now + Math.max(0, ahead - permits * this.k));
  }
}
