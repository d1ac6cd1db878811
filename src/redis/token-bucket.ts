import { readBucketOptions } from '../algorithms/gcra.js';
import { type RedisOptions, readRedisCommon } from './base.js';
import { RedisGcra } from './gcra.js';

/** The options of atomic-limiter/redis's `new TokenBucket()` (`capacity` tokens refilled at `refillPerSecond`): its own, then every Redis limiter's. */
export interface TokenBucketOptions extends RedisOptions {
  /** Burst size: tokens a full bucket holds. Integer, 1 to 2^31 − 1. */
  capacity: number;
  /** Tokens added per second, continuously. From 1e-6 to 1e9, fractions allowed. */
  refillPerSecond: number;
}

/** TokenBucket with its state in Redis: the in-memory TokenBucket's meaning and figures. */
export class TokenBucket extends RedisGcra {
  readonly algorithm = 'TokenBucket';
  /** @internal */
  protected readonly rateName = 'refillPerSecond';

  constructor(options: TokenBucketOptions) {
    const { opts, common } = readRedisCommon('TokenBucket', options, [
      'capacity',
      'refillPerSecond',
    ]);
    const {
      capacity,
      rate: refill,
      wide,
    } = readBucketOptions('TokenBucket', opts, 'refillPerSecond', true);
    super('TokenBucket', common, capacity, refill, wide, false);
  }

  /** Tokens added per second (reconfigure() changes it). */
  get refillPerSecond(): number {
    return this.params[1]!;
  }

  /**
   * Takes `capacity` and `refillPerSecond`, as the in-memory TokenBucket: the permits each
   * key owes stay owed and come back at the new rate; a key owing more than a lower
   * capacity is refused until it owes less.
   */
  override reconfigure(options: { capacity?: number; refillPerSecond?: number }): Promise<void> {
    return super.reconfigure(options);
  }
}
