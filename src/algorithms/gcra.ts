import { near } from '../engine/core.js';
import {
  FRESH,
  GEN_MASK,
  PAYLOAD_MASK,
  REJECT,
  RESERVED,
  STAMP_US,
  W_FRESH,
  WIDE_SPAN,
} from '../engine/layout.js';
import { Limiter } from '../limiter.js';
import type { Attached, Fresh } from '../options.js';
import { integerOption, positiveNumberOption, rangeError, show } from '../validate.js';

/**
 * reconfigure()'s options for a bucket: `opts` over the current capacity and rate, checked
 * as the constructor checks them, within the table the limiter has (a narrow one cannot
 * take a wide table's capacity or rate).
 */
export function reconfiguredBucket(
  name: string,
  opts: Record<string, unknown>,
  current: { capacity: number; rate: number },
  rateName: 'refillPerSecond' | 'ratePerSecond',
  wideTable: boolean,
  ceiling: number,
): [number, number, number] {
  const merged = { capacity: current.capacity, [rateName]: current.rate, ...opts };
  const { capacity, rate, wide } = readBucketOptions(name, merged, rateName, true);
  if (wide && !wideTable) {
    const option = capacity > MAX_GCRA_CAPACITY ? 'capacity' : rateName;
    const value = option === 'capacity' ? capacity : rate;
    throw rangeError(
      `${name}: option "${option}" (${show(value)}) needs a wide table (capacity past ${MAX_GCRA_CAPACITY} or rate past ${MAX_RATE_PER_SECOND} per second), and this limiter was created with a narrow one; create it with such a capacity or rate to reconfigure within them`,
    );
  }
  // The units must hold what a key may owe: up to the largest capacity it had.
  return [capacity, rate, Math.max(ceiling, current.capacity, capacity)];
}

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
 * is at least 1 µs — or up to half as fine, where that makes the scale exact (exactUnits) — so that time in units (µs since the epoch × scale) stays an exact
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
  const most = Math.max(1, Math.min(Math.floor(maxTau / capacity), Math.floor(intervalUs)));
  const exact = exactUnits(ratePerSecond, most);
  if (exact > 0) return { k: exact, scale: (exact * ratePerSecond) / 1e6, tau: capacity * exact };
  return { k: most, scale: most / intervalUs, tau: capacity * most };
}

/**
 * The most units per interval, up to `most`, that make `scale` (k × rate / 10^6 units per
 * µs) a binary fraction of a few bits, or 0 if none does. Time in units is then the exact
 * product of whole µs and the scale, so a token falls due exactly at its boundary: with
 * `k / intervalUs` rounded (7 per second: 142 857 / 142 857.142…), 1 000 000 µs came out
 * a hair under 7 intervals and the 7th token a microsecond late.
 *
 * The rate is m × 2^e with m odd; the scale is k × m × 2^(e − 6) / 5^6, a binary fraction
 * when k is a multiple of f = 5^6 / gcd(m, 5^6), with the odd part m / gcd(m, 5^6) as
 * its mantissa. k = f × 2^j, the largest not above `most`.
 */
function exactUnits(ratePerSecond: number, most: number): number {
  let m = ratePerSecond;
  while (!Number.isInteger(m)) m *= 2;
  while (m % 2 === 0 && m > 0) m /= 2;
  let f = 15_625;
  while (f % 5 === 0 && m % 5 === 0) {
    f /= 5;
    m /= 5;
  }
  // A short mantissa keeps whole µs × scale exact for any uptime a process reaches (2^53 / m µs).
  if (f > most || m >= 2 ** 16) return 0;
  let k = f;
  while (k * 2 <= most) k *= 2;
  return k;
}

/** LeakyBucket's queueLimit: the bucket is the queue, so at most `capacity` (its default). */
export function leakyQueueLimit(opts: Record<string, unknown>, capacity: number): number {
  if (opts.queueLimit === undefined) return capacity;
  const q = opts.queueLimit;
  if (typeof q === 'number' && Number.isInteger(q) && q > capacity) {
    // The bound is another option: say which, or the message reads as an arbitrary range.
    throw rangeError(
      `LeakyBucket: option "queueLimit" must be an integer from 0 to ${capacity} (the bucket's "capacity": the bucket is the queue), got ${show(q)}`,
    );
  }
  return integerOption('LeakyBucket', 'queueLimit', q, 0, capacity);
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
  /** Permits a call may take at once: the bucket's capacity. */
  readonly limit!: number;
  // Derived from the options (configure()): reconfigure() changes them.
  /** @internal Units per emission interval. */
  protected k!: number;
  /** @internal Units per microsecond. */
  protected scale!: number;
  /** @internal Burst tolerance in units: capacity × K. */
  protected tau!: number;
  /** @internal Units per stamp period (STAMP_US × scale: exact, a power of two times scale). */
  private unitsPerStamp!: number;
  /** @internal Wide table: µs after a slot's stamp (its last grant) beyond which its TAT has passed. */
  private staleUs!: number;

  protected constructor(
    owner: string,
    algo: number,
    source: Fresh | Attached,
    private readonly leaky: boolean,
  ) {
    super(owner, algo, source);
    this.configure();
  }

  /** @internal */
  override configure(): void {
    const capacity = this.param(0);
    (this as { limit: number }).limit = capacity;
    // After a reconfigure(), the largest capacity the limiter had (param 2; 0 until then):
    // a key may owe that much, so the units are chosen for it.
    const ceiling = Math.max(capacity, this.param(2));
    const { k, scale } = gcraUnits(ceiling, this.param(1), this.core.wide);
    this.k = k;
    this.scale = scale;
    this.tau = capacity * k;
    this.unitsPerStamp = STAMP_US * this.scale;
    // The last grant was before the end of its stamp period; its TAT at most what a key
    // may owe later.
    this.staleUs = STAMP_US + (ceiling * k) / this.scale;
  }

  /** @internal */
  override reconfigurable(): readonly string[] {
    return ['capacity', this.rateName];
  }

  /** @internal */
  override reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = { capacity: this.param(0), rate: this.param(1) };
    return reconfiguredBucket(name, opts, current, this.rateName, this.core.wide, this.param(2));
  }

  /** @internal The rate option's name: the two buckets' users speak of their rates differently. */
  private get rateName(): 'refillPerSecond' | 'ratePerSecond' {
    return this.leaky ? 'ratePerSecond' : 'refillPerSecond';
  }

  // reconfigure(): the permits a key owes (TAT − now, in permits: what was taken and has
  // not refilled or leaked yet) stay owed, and come back at the new rate. A key owing more
  // than a new, smaller capacity is refused until it owes less than the capacity again.

  /** @internal */
  override describe(state: number, stamp: number, nowUs: number): number[] | undefined {
    const ahead = this.ahead(state, stamp, nowUs);
    return ahead > 0 ? [ahead, this.k] : undefined;
  }

  /** @internal */
  override restate(d: number[], nowUs: number): number {
    // ahead × k′ is an exact integer (both below 2^26): the one rounding is the division's,
    // so units that did not change give the lead back exactly.
    const lead = Math.ceil((d[0]! * this.k) / d[1]!);
    if (this.core.wide) return this.wrap(this.unitsMod(nowUs) + lead);
    return this.encode(0, this.nowUnits(nowUs) + lead);
  }

  /** @internal */
  protected nowUnits(nowUs: number): number {
    return Math.floor((nowUs - this.epochUs) * this.scale);
  }

  /** @internal */
  protected tat(state: number, stamp: number): number {
    return near(state & PAYLOAD_MASK, Math.floor(stamp * STAMP_US * this.scale), 28);
  }

  /** @internal */
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

  /** @internal */
  step(state: number, stamp: number, nowUs: number, permits: number): number {
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

  // The head waiter decides with step() itself (Algorithm's stepQueued()), at the time it
  // wakes: a waiter woken late is granted then, not at its due time. Granting at the due
  // time made up the lateness, but a late timer then granted the overdue waiters — and a
  // new caller — at one instant: a burst a leaky bucket must never show, and past the
  // capacity for a token bucket. The head wakes on time instead (see `punctual`).

  /**
   * Whether a head waiter for `permits` must wake at its due time to the microsecond (see
   * Algorithm.punctual): always for a leaky bucket; for a token bucket only when the request
   * takes the whole burst — else a wake-up later than the due time by less than the rest of
   * the burst finds the tokens it missed still in the bucket, and nothing is lost.
   * @internal
   */
  override punctual(permits: number): boolean {
    return this.leaky || permits * this.k >= this.tau;
  }

  /** @internal */
  giveBack(state: number, stamp: number, nowUs: number, permits: number): number {
    if (this.core.wide) return this.giveBackWide(state, stamp, nowUs, permits);
    if ((state & PAYLOAD_MASK) === FRESH) return state;
    const now = this.nowUnits(nowUs);
    const tat = this.tat(state, stamp);
    if (tat <= now) return state;
    return this.encode(state, Math.max(now, tat - permits * this.k));
  }

  /** @internal */
  available(state: number, stamp: number, nowUs: number): number {
    const ahead = this.ahead(state, stamp, nowUs);
    if (this.leaky) return ahead === 0 ? this.limit : 0;
    return Math.max(0, Math.min(this.limit, Math.floor((this.tau - ahead) / this.k)));
  }

  /** @internal */
  untilFreshUs(state: number, stamp: number, nowUs: number): number {
    return this.ahead(state, stamp, nowUs) / this.scale;
  }

  /** @internal */
  retryEstimateUs(state: number, stamp: number, nowUs: number, permits: number): number {
    const ahead = this.ahead(state, stamp, nowUs);
    const wait = this.leaky ? ahead : ahead + permits * this.k - this.tau;
    return wait / this.scale;
  }

  /**
   * Behind `queued` permits waiting ahead: they are granted as their tokens come (each
   * waiter's turn adds its cost to the TAT from where it is, or from its turn if the TAT
   * has passed), so these are due once the TAT plus the queue's cost allows them — the
   * least whole µs r with units(now + r) ≥ max(TAT, now) + queue + own cost − allowance.
   * @internal
   */
  override retryBehindUs(
    state: number,
    stamp: number,
    nowUs: number,
    queued: number,
    permits: number,
  ): number {
    const cost = permits * this.k;
    const need =
      this.ahead(state, stamp, nowUs) + queued * this.k + (this.leaky ? 0 : cost - this.tau);
    if (need <= 0) return 0;
    const gone = (r: number) => this.unitsBetween(nowUs, nowUs + r) >= need;
    let r = Math.max(0, Math.ceil(need / this.scale) - 1);
    if (!(r <= 2 ** 52)) return Number.POSITIVE_INFINITY;
    while (r > 0 && gone(r - 1)) r--;
    while (!gone(r)) r++;
    return r;
  }

  /** @internal Whole units of time from `fromUs` to `toUs`, as the decisions count them. */
  private unitsBetween(fromUs: number, toUs: number): number {
    if (!this.core.wide) return this.nowUnits(toUs) - this.nowUnits(fromUs);
    const d = this.unitsMod(toUs) - this.unitsMod(fromUs);
    return d < 0 ? d + WIDE_MOD : d;
  }

  /** @internal How far the TAT is ahead of now, in units (0 when it is not), for either table. */
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

  /** @internal Time in units modulo 2^52 (exact: an integer double reduced by a power of two). */
  private unitsMod(nowUs: number): number {
    const u = Math.floor((nowUs - this.epochUs) * this.scale);
    return u >= 0 && u < WIDE_MOD ? u : u - Math.floor(u / WIDE_MOD) * WIDE_MOD;
  }

  /** @internal TAT − now in units, signed (0 for a fresh or long-idle slot). */
  private lead(p: number, stamp: number, nowUs: number, now: number): number {
    if (p === W_FRESH || nowUs - this.epochUs >= stamp * STAMP_US + this.staleUs) return 0;
    const d = p - now;
    return d >= WIDE_HALF ? d - WIDE_MOD : d < -WIDE_HALF ? d + WIDE_MOD : d;
  }

  /** @internal */
  private wrap(tat: number): number {
    return tat >= WIDE_MOD ? tat - WIDE_MOD : tat < 0 ? tat + WIDE_MOD : tat;
  }

  /** @internal */
  override stepWide(p: number, stamp: number, nowUs: number, permits: number): number {
    const now = this.unitsMod(nowUs);
    const ahead = Math.max(0, this.lead(p, stamp, nowUs, now));
    const cost = permits * this.k;
    if (ahead + cost > (this.leaky ? cost : this.tau)) return REJECT;
    return this.wrap(now + ahead + cost);
  }

  /** @internal */
  private giveBackWide(p: number, stamp: number, nowUs: number, permits: number): number {
    const now = this.unitsMod(nowUs);
    const ahead = this.lead(p, stamp, nowUs, now);
    if (ahead <= 0) return p;
    return this.wrap(now + Math.max(0, ahead - permits * this.k));
  }
}
