import { decideWide } from '../engine/decision.js';
import { explain, granted } from '../engine/explain.js';
import { REJECT, STAMP_US, W_FRESH } from '../engine/layout.js';
import { NO_SLOT } from '../engine/table.js';
import { type Key, Limiter } from '../limiter.js';
import { Attached, type CommonOptions, type Decision, type Fresh, readCommon } from '../options.js';
import { positiveNumberOption } from '../validate.js';
import { MAX_WIDE_RATE_PER_SECOND, MIN_RATE_PER_SECOND } from './gcra.js';
import { ALGO_WARMING_BUCKET } from './ids.js';

/** The options of `new WarmingBucket()`: its own, then those every limiter takes. */
export interface WarmingBucketOptions extends CommonOptions {
  /** The stable rate, reached once warm: permits per second, from 1e-6 to 1e9. */
  ratePerSecond: number;
  /**
   * Milliseconds a cold limiter takes to ramp up to `ratePerSecond` under full demand (and
   * the idle time after which it is cold again). Above 0, at most 2^31 − 1.
   */
  warmupMs: number;
  /**
   * How much slower than the stable rate a cold limiter goes: its first permit costs
   * `coldFactor` stable intervals. Above 1, at most 1000; default 3 (Guava's).
   */
  coldFactor?: number;
}

export const MAX_WARMUP_MS = 2 ** 31 - 1;
export const MAX_COLD_FACTOR = 1000;
/** Stored permits are kept in 22 bits: a count of quanta of 2^-e permits (see warmingModel). */
const STORED_BITS = 22;
const MAX_QUANTA = 2 ** STORED_BITS - 1;
/** The next free time is kept modulo 2^31 units, in the payload's low bits. */
const TIME_SPAN = 2 ** 31;
const TIME_HALF = 2 ** 30;

/** The options of a warming bucket, checked (every backend reads them here). */
export function readWarmingOptions(
  owner: string,
  opts: Record<string, unknown>,
): { rate: number; warmupMs: number; coldFactor: number } {
  const rate = positiveNumberOption(
    owner,
    'ratePerSecond',
    opts.ratePerSecond,
    MIN_RATE_PER_SECOND,
    MAX_WIDE_RATE_PER_SECOND,
  );
  const warmupMs = positiveNumberOption(owner, 'warmupMs', opts.warmupMs, 0, MAX_WARMUP_MS, true);
  const coldFactor =
    opts.coldFactor === undefined
      ? 3
      : positiveNumberOption(owner, 'coldFactor', opts.coldFactor, 1, MAX_COLD_FACTOR, true);
  return { rate, warmupMs, coldFactor };
}

/**
 * Guava's SmoothWarmingUp figures for a rate, a warm-up and a cold factor, and how this
 * library stores its state. Every backend computes them here, so that all decide alike.
 */
export interface WarmingModel {
  /** Stable interval, µs: 1e6 / rate. */
  readonly stableUs: number;
  /** Stored permits at and below which a permit costs the stable interval. */
  readonly threshold: number;
  /** Stored permits of a cold limiter. */
  readonly maxPermits: number;
  /** µs of interval per stored permit above the threshold. */
  readonly slope: number;
  /** µs of idleness per stored permit regained: warmupMs / maxPermits. */
  readonly coolDownUs: number;
  /** Quanta per stored permit (a power of two): stored permits are whole quanta, rounded up. */
  readonly quanta: number;
  /** Quanta of a cold limiter: maxPermits rounded up. */
  readonly maxQuanta: number;
  /** µs per time unit (a power of two, 1 unless the warm-up is long): the next free time's unit. */
  readonly unitUs: number;
  /** Largest permits one call may take: maxPermits, at least 1, at most 2^31 − 1. */
  readonly limit: number;
  /** µs after a slot's stamp past which its state is cold again whatever it holds. */
  readonly staleUs: number;
}

export function warmingModel(rate: number, warmupMs: number, coldFactor: number): WarmingModel {
  // Guava's doSetRate(), operation for operation (its figures, to the last bit).
  const stableUs = 1e6 / rate;
  const warmupUs = warmupMs * 1000;
  const coldUs = stableUs * coldFactor;
  const threshold = (0.5 * warmupUs) / stableUs;
  const maxPermits = threshold + (2.0 * warmupUs) / (stableUs + coldUs);
  const slope = (coldUs - stableUs) / (maxPermits - threshold);
  const coolDownUs = warmupUs / maxPermits;
  // The finest power-of-two quantum with maxPermits in 22 bits: whole permits taken from a
  // whole or half count are exact, so the arithmetic follows Guava's doubles.
  let e = Math.floor(Math.log2(MAX_QUANTA / maxPermits));
  while (Math.ceil(maxPermits * 2 ** e) > MAX_QUANTA) e--;
  while (Math.ceil(maxPermits * 2 ** (e + 1)) <= MAX_QUANTA) e++;
  const near = Math.round(maxPermits);
  const most = Math.abs(maxPermits - near) <= 1e-9 * maxPermits ? near : Math.floor(maxPermits);
  const limit = Math.max(1, Math.min(2 ** 31 - 1, most));
  // A grant's debt is at most the cost of `limit` permits from cold: the warm-up itself
  // (the trapezoid), the threshold's permits at the stable interval (half the warm-up),
  // and fresh permits past maxPermits (at most one: limit ≤ maxPermits or limit = 1).
  const maxDebtUs = 1.5 * warmupUs + stableUs + 2;
  // After its debt, a state is cold again once idle for the warm-up: it is decoded only
  // within that time of its stamp (the stamp period, then the debt, then the warm-up), and
  // its next free time must then lie within ±2^30 units of now.
  let unitUs = 1;
  while (STAMP_US + maxDebtUs + warmupUs + 2 * unitUs > (TIME_HALF - 2) * unitUs) unitUs *= 2;
  const staleUs = STAMP_US + maxDebtUs + warmupUs + 2 * unitUs;
  return {
    stableUs,
    threshold,
    maxPermits,
    slope,
    coolDownUs,
    quanta: 2 ** e,
    maxQuanta: Math.ceil(maxPermits * 2 ** e),
    unitUs,
    limit,
    staleUs,
  };
}

/**
 * Guava's storedPermitsToWaitTime(): µs to charge for taking `take` of `stored` permits,
 * the area under the interval line (the trapezoid above the threshold, the stable interval
 * below), each part truncated to whole µs as Guava's `(long)` does.
 */
export function storedWaitUs(m: WarmingModel, stored: number, take: number): number {
  const above = stored - m.threshold;
  let us = 0;
  if (above > 0) {
    const fromAbove = Math.min(above, take);
    const length = m.stableUs + above * m.slope + (m.stableUs + (above - fromAbove) * m.slope);
    us = Math.floor((fromAbove * length) / 2.0);
    take -= fromAbove;
  }
  return us + Math.floor(m.stableUs * take);
}

/**
 * WarmingBucket: Guava's SmoothWarmingUp, shared by every thread. A cold limiter admits
 * slowly — its first permit costs `coldFactor` stable intervals — and speeds up as it is
 * used, reaching `ratePerSecond` after `warmupMs` of full demand; idle, it cools down again
 * (fully in `warmupMs`). For a cold cache or a service just started.
 *
 * Guava's model, exactly: stable interval s = 1/rate, cold interval c·s, threshold
 * ½·W/s stored permits, maxPermits = threshold + 2W/(s + c·s). A request pays for the
 * permits it takes from storage by the area under the interval line (s up to the threshold,
 * rising linearly to c·s at maxPermits), plus s per fresh permit; storage regains one
 * permit per W/maxPermits of idleness, up to maxPermits; a new key starts cold (full).
 *
 * It pays later, as Guava does: a request is admitted whenever the previous one's debt is
 * paid (the next free time has come), whatever its own size, and its cost pushes the next
 * free time on. So `retryAfterMs` is exactly the time until the debt is paid, and
 * `remaining` is the limit while nothing is owed, 0 while something is.
 *
 * State: stored permits (22 bits, whole quanta of a power of two of a permit, rounded up:
 * an error only makes it colder, that is stricter) and the next free time (in µs, or a
 * power of two of µs for a warm-up of many minutes) in one 64-bit word, changed by one
 * CAS. Under contention it may admit fewer than Guava's single caller would, never more.
 */
export class WarmingBucket extends Limiter {
  readonly algorithm = 'WarmingBucket';
  /** Permits a call may take at once: the most stored permits (at least 1). */
  readonly limit!: number;
  // Derived from the options (configure()): reconfigure() changes them.
  /** @internal */
  private m!: WarmingModel;
  /** @internal Time units per µs (1 / unitUs, exact: a power of two). */
  private perUs!: number;

  /** Makes a limiter and its shared state; a TypeError or RangeError names a bad option. */
  constructor(options: WarmingBucketOptions) {
    super('WarmingBucket', ALGO_WARMING_BUCKET, WarmingBucket.prepare(options));
    this.configure();
  }

  /** The stable rate, permits per second (reconfigure() changes it). */
  get ratePerSecond(): number {
    return this.param(1);
  }

  /** The warm-up, ms (reconfigure() changes it). */
  get warmupMs(): number {
    return this.param(2);
  }

  /** The cold interval in stable intervals (reconfigure() changes it). */
  get coldFactor(): number {
    return this.param(3);
  }

  /** @internal */
  override configure(): void {
    this.m = warmingModel(this.param(1), this.param(2), this.param(3));
    (this as { limit: number }).limit = this.param(0);
    this.perUs = 1 / this.m.unitUs;
  }

  /**
   * Takes `ratePerSecond`, `warmupMs` and `coldFactor`, as Guava's setRate(): each key's
   * stored permits keep their share of the (new) maximum, and what a key owes stays owed
   * (its next free time is kept); a key cold now stays cold.
   */
  override reconfigure(options: {
    ratePerSecond?: number;
    warmupMs?: number;
    coldFactor?: number;
  }): void {
    super.reconfigure(options);
  }

  /** @internal */
  override reconfigurable(): readonly string[] {
    return ['ratePerSecond', 'warmupMs', 'coldFactor'];
  }

  /** @internal */
  override reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = {
      ratePerSecond: this.param(1),
      warmupMs: this.param(2),
      coldFactor: this.param(3),
    };
    const { rate, warmupMs, coldFactor } = readWarmingOptions(name, { ...current, ...opts });
    const { limit } = warmingModel(rate, warmupMs, coldFactor);
    return [limit, rate, warmupMs, coldFactor];
  }

  /** @internal */
  override describe(p: number, stamp: number, nowUs: number): number[] | undefined {
    const rel = nowUs - this.epochUs;
    if (this.stale(p, stamp, rel)) return undefined;
    const now = Math.floor(rel * this.perUs);
    const next = this.nextFree(p, now);
    let stored = this.stored(p);
    if (rel >= this.coldAtUs(stored, next)) return undefined;
    // Guava's resync() first: idleness since the next free time regains stored permits.
    const m = this.m;
    if (now > next)
      stored = Math.min(m.maxPermits, stored + ((now - next) * m.unitUs) / m.coolDownUs);
    return [stored / m.maxPermits, Math.max(now, next) * m.unitUs];
  }

  /** @internal */
  override restate(d: number[], _nowUs: number): number {
    return this.encode(d[0]! * this.m.maxPermits, Math.ceil(d[1]! * this.perUs));
  }

  /**
   * @internal Stamped at its next free time: a debt run up under a longer warm-up may be
   * longer than the new options' stale() allows for, and stays owed all the same.
   */
  override restampUs(d: number[], nowUs: number): number {
    return Math.max(nowUs, this.epochUs + d[1]!);
  }

  // The same four lines in every class: see Limiter.consume.
  override consume(key?: Key, permits = 1): Decision {
    const a = this.tryAcquire(key, permits);
    const { word: w, state: s, stamp: t, atUs: n } = this.core.last;
    if (!a || w === NO_SLOT) return explain(this.core, this, a, key, permits);
    return granted(this.available(s, t, n), this.limit, this.untilFreshUs(s, t, n));
  }

  // Always a wide table (64-bit state): see Limiter.tryAcquire.
  override tryAcquire(key?: Key, permits = 1): boolean {
    const core = this.core;
    return decideWide(core, this, this.stepWide, key, permits, core.clock.nowUs());
  }

  /** @internal */
  protected tryAcquireWide(key: Key | undefined, permits: number): boolean {
    return this.tryAcquire(key, permits);
  }

  /** @internal */
  step(): number {
    throw new Error('WarmingBucket: always a wide table');
  }

  // ---- the state: payload = stored quanta × 2^31 + (next free time in units mod 2^31) --

  /** @internal True when the slot's last grant is so long ago that it is cold whatever it holds. */
  private stale(p: number, stamp: number, rel: number): boolean {
    return p === W_FRESH || rel >= stamp * STAMP_US + this.m.staleUs;
  }

  /** @internal The next free time in units, decoded as the nearest to `now` of its residue. */
  private nextFree(p: number, now: number): number {
    const t = p - Math.floor(p / TIME_SPAN) * TIME_SPAN;
    let d = t - (now - Math.floor(now / TIME_SPAN) * TIME_SPAN);
    if (d >= TIME_HALF) d -= TIME_SPAN;
    else if (d < -TIME_HALF) d += TIME_SPAN;
    return now + d;
  }

  /** @internal */
  private stored(p: number): number {
    return Math.min(this.m.maxPermits, Math.floor(p / TIME_SPAN) / this.m.quanta);
  }

  /**
   * When (µs since the epoch) a state with `stored` permits and next free time `next` is
   * cold again: its debt paid, then storage refilled. From then on it decides as a new key
   * (exactly maxPermits stored, where Guava's sum could fall an ulp short: never looser).
   * @internal
   */
  private coldAtUs(stored: number, next: number): number {
    return next * this.m.unitUs + (this.m.maxPermits - stored) * this.m.coolDownUs;
  }

  /** @internal */
  private encode(stored: number, next: number): number {
    const q = Math.min(this.m.maxQuanta, Math.ceil(stored * this.m.quanta));
    return q * TIME_SPAN + (next - Math.floor(next / TIME_SPAN) * TIME_SPAN);
  }

  /**
   * Guava's reserveEarliestAvailable() at time `at` (units, ≤ now), from stored permits
   * `stored` and next free time `next` (≤ at): the payload after taking `permits`.
   * @internal
   */
  private reserve(stored: number, next: number, at: number, permits: number): number {
    const m = this.m;
    // resync(): idleness since the next free time regains stored permits.
    if (at > next)
      stored = Math.min(m.maxPermits, stored + ((at - next) * m.unitUs) / m.coolDownUs);
    const spend = Math.min(permits, stored);
    const waitUs = storedWaitUs(m, stored, spend) + Math.floor((permits - spend) * m.stableUs);
    return this.encode(stored - spend, at + Math.ceil(waitUs * this.perUs));
  }

  /** @internal */
  override stepWide(p: number, stamp: number, nowUs: number, permits: number): number {
    const rel = nowUs - this.epochUs;
    const now = Math.floor(rel * this.perUs);
    if (this.stale(p, stamp, rel)) return this.reserve(this.m.maxPermits, now, now, permits);
    const next = this.nextFree(p, now);
    // Pays later: admitted once the previous request's debt is paid.
    if (next > now) return REJECT;
    const stored = this.stored(p);
    if (rel >= this.coldAtUs(stored, next))
      return this.reserve(this.m.maxPermits, now, now, permits);
    return this.reserve(stored, next, now, permits);
  }

  /**
   * The head waiter is granted at the next free time, not at its (always late) wake-up,
   * as Guava's acquire() reserves the next free time: lateness is made up instead of
   * carried into every later turn. Never before its own refused attempt (no idleness it did
   * not wait through is credited), nor more than the warm-up before now.
   * @internal
   */
  override stepQueuedWide(p: number, stamp: number, nowUs: number, permits: number): number {
    const rel = nowUs - this.epochUs;
    const now = Math.floor(rel * this.perUs);
    // A cold key, or a debt not yet paid: nothing to make up, the waiter decides as any caller.
    if (this.stale(p, stamp, rel) || this.nextFree(p, now) > now) {
      return this.stepWide(p, stamp, nowUs, permits);
    }
    const next = this.nextFree(p, now);
    const since = Math.min(
      now,
      Math.floor((this.core.last.queuedSinceUs - this.epochUs) * this.perUs),
    );
    const floor = now - Math.ceil(this.warmupMs * 1000 * this.perUs);
    const at = Math.max(next, since, floor);
    const stored = this.stored(p);
    if (at * this.m.unitUs >= this.coldAtUs(stored, next)) {
      return this.reserve(this.m.maxPermits, at, at, permits);
    }
    return this.reserve(stored, next, at, permits);
  }

  /**
   * A refund undoes a grant: the permits go back to storage (up to maxPermits) and the debt
   * shrinks by what taking them from there costs, never to before now. Once the debt is
   * paid there is nothing to give back (storing permits then would only make it colder).
   * @internal
   */
  giveBack(p: number, stamp: number, nowUs: number, permits: number): number {
    const rel = nowUs - this.epochUs;
    if (this.stale(p, stamp, rel)) return p;
    const now = Math.floor(rel * this.perUs);
    const next = this.nextFree(p, now);
    if (next <= now) return p;
    const m = this.m;
    const stored = this.stored(p);
    const back = Math.min(m.maxPermits, stored + permits);
    const creditUs =
      storedWaitUs(m, back, back - stored) + Math.floor((permits - (back - stored)) * m.stableUs);
    return this.encode(back, Math.max(now, next - Math.floor(creditUs * this.perUs)));
  }

  /** @internal */
  available(p: number, stamp: number, nowUs: number): number {
    const rel = nowUs - this.epochUs;
    if (this.stale(p, stamp, rel)) return this.limit;
    const now = Math.floor(rel * this.perUs);
    return this.nextFree(p, now) > now ? 0 : this.limit;
  }

  /** @internal */
  untilFreshUs(p: number, stamp: number, nowUs: number): number {
    const rel = nowUs - this.epochUs;
    if (this.stale(p, stamp, rel)) return 0;
    const next = this.nextFree(p, Math.floor(rel * this.perUs));
    return Math.max(0, this.coldAtUs(this.stored(p), next) - rel);
  }

  /** @internal */
  retryEstimateUs(p: number, stamp: number, nowUs: number): number {
    const rel = nowUs - this.epochUs;
    if (this.stale(p, stamp, rel)) return 0;
    const next = this.nextFree(p, Math.floor(rel * this.perUs));
    return Math.max(0, next * this.m.unitUs - rel);
  }

  /** @internal */
  private static prepare(options: WarmingBucketOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('WarmingBucket', options, [
      'ratePerSecond',
      'warmupMs',
      'coldFactor',
    ]);
    const { rate, warmupMs, coldFactor } = readWarmingOptions('WarmingBucket', opts);
    const { limit } = warmingModel(rate, warmupMs, coldFactor);
    return { ...common, params: [limit, rate, warmupMs, coldFactor], logRing: 0, wide: true };
  }
}
