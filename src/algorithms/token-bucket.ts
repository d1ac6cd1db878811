import { decide, decideWide } from '../engine/decision.js';
import { explain, granted } from '../engine/explain.js';
import { NO_SLOT } from '../engine/table.js';
import type { Key } from '../limiter.js';
import { Attached, type CommonOptions, type Decision, type Fresh, readCommon } from '../options.js';
import { Gcra, readBucketOptions } from './gcra.js';
import { ALGO_TOKEN_BUCKET } from './ids.js';

/** The options of `new TokenBucket()`: its own, then those every limiter takes. */
export interface TokenBucketOptions extends CommonOptions {
  /** Burst size: tokens a full bucket holds. Integer, 1 to 2^31 − 1 (past 2^24: a wide table). */
  capacity: number;
  /**
   * Tokens added per second, continuously. From 1e-6 to 1e9, fractions allowed (past 1e6:
   * a wide table).
   */
  refillPerSecond: number;
}

/**
 * TokenBucket: a bucket of `capacity` tokens refilled continuously at `refillPerSecond`;
 * a request takes `permits` tokens or is refused. A new key starts full. Implemented as
 * GCRA: one theoretical-arrival-time word per key, one CAS per decision.
 *
 * Safe to use from any number of threads at once through `handle` / `attach()`.
 */
export class TokenBucket extends Gcra {
  readonly algorithm = 'TokenBucket';

  /** Makes a limiter and its shared state; a TypeError or RangeError names a bad option. */
  constructor(options: TokenBucketOptions) {
    super('TokenBucket', ALGO_TOKEN_BUCKET, TokenBucket.prepare(options), false);
  }

  /** Burst size: tokens a full bucket holds (reconfigure() changes it). */
  get capacity(): number {
    return this.param(0);
  }

  /** Tokens added per second (reconfigure() changes it). */
  get refillPerSecond(): number {
    return this.param(1);
  }

  /**
   * Takes `capacity` and `refillPerSecond` (see the class): the permits each key owes stay
   * owed and come back at the new rate; a key owing more than a lower capacity is refused
   * until it owes less.
   */
  override reconfigure(options: { capacity?: number; refillPerSecond?: number }): void {
    super.reconfigure(options);
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
  private static prepare(options: TokenBucketOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('TokenBucket', options, ['capacity', 'refillPerSecond']);
    const { capacity, rate, wide } = readBucketOptions(
      'TokenBucket',
      opts,
      'refillPerSecond',
      true,
    );
    return { ...common, params: [capacity, rate], logRing: 0, wide };
  }
}
