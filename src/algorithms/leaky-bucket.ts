import { decide, decideWide } from '../engine/decision.js';
import { explain, granted } from '../engine/explain.js';
import { NO_SLOT } from '../engine/table.js';
import type { Key } from '../limiter.js';
import { Attached, type CommonOptions, type Decision, type Fresh, readCommon } from '../options.js';
import { Gcra, leakyQueueLimit, readBucketOptions } from './gcra.js';
import { ALGO_LEAKY_BUCKET } from './ids.js';

/** The options of `new LeakyBucket()`: its own, then those every limiter takes. */
export interface LeakyBucketOptions extends CommonOptions {
  /**
   * Permits that may wait in the bucket in `acquire()` (the default `queueLimit`); also
   * the largest request. Integer, 1 to 2^31 − 1 (past 2^24: a wide table).
   */
  capacity: number;
  /**
   * Permits leaving the bucket per second, at a constant pace. From 1e-6 to 1e9 (past 1e6:
   * a wide table).
   */
  ratePerSecond: number;
}

/**
 * LeakyBucket: requests leave at a constant `ratePerSecond`, one permit every
 * 1/ratePerSecond seconds, never in bursts. `tryAcquire` / `consume` admit a request only
 * when it would leave at once (the bucket has drained); a request of `permits` then
 * occupies the outflow for `permits` intervals. `acquire()` waits in the bucket, FIFO,
 * up to `capacity` permits (or `queueLimit` if smaller), and leaves at the constant rate;
 * a full bucket rejects with QueueFullError.
 */
export class LeakyBucket extends Gcra {
  readonly algorithm = 'LeakyBucket';

  /** Makes a limiter and its shared state; a TypeError or RangeError names a bad option. */
  constructor(options: LeakyBucketOptions) {
    super('LeakyBucket', ALGO_LEAKY_BUCKET, LeakyBucket.prepare(options), true);
  }

  /** Permits that may wait in the bucket; also the largest request (reconfigure() changes it). */
  get capacity(): number {
    return this.param(0);
  }

  /** Permits leaving the bucket per second (reconfigure() changes it). */
  get ratePerSecond(): number {
    return this.param(1);
  }

  /**
   * Takes `capacity` and `ratePerSecond` (see the class): the permits each key owes stay
   * owed and come back at the new rate; a key owing more than a lower capacity is refused
   * until it owes less.
   */
  override reconfigure(options: { capacity?: number; ratePerSecond?: number }): void {
    super.reconfigure(options);
  }

  /** @internal The bucket is the queue: a capacity lowered by reconfigure() bounds `queueLimit` too. */
  override effectiveQueueLimit(): number {
    return Math.min(this.queueLimit, this.limit);
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

  // The wide table's decision, in this class too: see tryAcquire().
  /** @internal */
  protected tryAcquireWide(key: Key | undefined, permits: number): boolean {
    const core = this.core;
    return decideWide(core, this, this.stepWide, key, permits, core.clock.nowUs());
  }

  /** @internal */
  private static prepare(options: LeakyBucketOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('LeakyBucket', options, ['capacity', 'ratePerSecond']);
    const { capacity, rate, wide } = readBucketOptions('LeakyBucket', opts, 'ratePerSecond', true);
    const queueLimit = leakyQueueLimit(opts, capacity);
    return { ...common, queueLimit, params: [capacity, rate], logRing: 0, wide };
  }
}
