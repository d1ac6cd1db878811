import { leakyQueueLimit, readBucketOptions } from '../algorithms/gcra.js';
import { type RedisOptions, readRedisCommon } from './base.js';
import { RedisGcra } from './gcra.js';

/** The options of atomic-limiter/redis's `new LeakyBucket()` (a constant rate, `ratePerSecond`, with a queue of `capacity`): its own, then every Redis limiter's. */
export interface LeakyBucketOptions extends RedisOptions {
  /** Permits that may wait in the bucket (the default queueLimit); the largest request. Integer, 1 to 2^31 − 1. */
  capacity: number;
  /** Permits leaving the bucket per second, at a constant pace. From 1e-6 to 1e9. */
  ratePerSecond: number;
}

/** LeakyBucket with its state in Redis: the in-memory LeakyBucket's meaning and figures. */
export class LeakyBucket extends RedisGcra {
  readonly algorithm = 'LeakyBucket';
  /** @internal */
  protected readonly rateName = 'ratePerSecond';

  constructor(options: LeakyBucketOptions) {
    const { opts, common } = readRedisCommon('LeakyBucket', options, ['capacity', 'ratePerSecond']);
    const { capacity, rate, wide } = readBucketOptions('LeakyBucket', opts, 'ratePerSecond', true);
    const queueLimit = leakyQueueLimit(opts, capacity);
    super('LeakyBucket', { ...common, queueLimit }, capacity, rate, wide, true);
  }

  /** Permits leaving the bucket per second (reconfigure() changes it). */
  get ratePerSecond(): number {
    return this.params[1]!;
  }

  /**
   * Takes `capacity` and `ratePerSecond`, as the in-memory LeakyBucket: the permits in each
   * key's bucket stay there and leave at the new rate; a smaller capacity bounds
   * `queueLimit` too.
   */
  override reconfigure(options: { capacity?: number; ratePerSecond?: number }): Promise<void> {
    return super.reconfigure(options);
  }
}
