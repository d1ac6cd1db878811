import { readWarmingOptions, warmingModel } from '../algorithms/warming-bucket.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { warmingBucketRule } from './warming-bucket.lua.js';

/** The options of atomic-limiter/redis's `new WarmingBucket()` (Guava's warm-up to `ratePerSecond` over `warmupMs`): its own, then every Redis limiter's. */
export interface WarmingBucketOptions extends RedisOptions {
  /** The stable rate, reached once warm: permits per second, from 1e-6 to 1e9. */
  ratePerSecond: number;
  /** Milliseconds of full demand to ramp up to `ratePerSecond`. Above 0, at most 2^31 − 1. */
  warmupMs: number;
  /** The cold interval in stable intervals. Above 1, at most 1000; default 3. */
  coldFactor?: number;
}

/**
 * WarmingBucket with its state in Redis: Guava's SmoothWarmingUp, the in-memory
 * WarmingBucket's meaning and figures (it pays later; retryAfterMs is the debt owed).
 */
export class WarmingBucket extends RedisLimiter {
  readonly algorithm = 'WarmingBucket';
  readonly limit: number;
  readonly ratePerSecond: number;
  readonly warmupMs: number;
  readonly coldFactor: number;

  constructor(options: WarmingBucketOptions) {
    const { opts, common } = readRedisCommon('WarmingBucket', options, [
      'ratePerSecond',
      'warmupMs',
      'coldFactor',
    ]);
    const { rate, warmupMs, coldFactor } = readWarmingOptions('WarmingBucket', opts);
    super('WarmingBucket', common);
    const m = warmingModel(rate, warmupMs, coldFactor);
    this.limit = m.limit;
    this.ratePerSecond = rate;
    this.warmupMs = warmupMs;
    this.coldFactor = coldFactor;
    this.useRule(warmingBucketRule(m), false);
    this.startFleet();
  }
}
