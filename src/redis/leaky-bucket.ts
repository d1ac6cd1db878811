import { MAX_GCRA_CAPACITY, MAX_RATE_PER_SECOND, MIN_RATE_PER_SECOND } from '../algorithms/gcra.js';
import { integerOption, positiveNumberOption } from '../validate.js';
import { type RedisOptions, readRedisCommon } from './base.js';
import { RedisGcra } from './gcra.js';

export interface LeakyBucketOptions extends RedisOptions {
  /** Permits that may wait in the bucket (the default queueLimit); the largest request. */
  capacity: number;
  /** Permits leaving the bucket per second, at a constant pace. From 1e-6 to 1e6. */
  ratePerSecond: number;
}

/** LeakyBucket with its state in Redis: the in-memory LeakyBucket's meaning and figures. */
export class LeakyBucket extends RedisGcra {
  readonly algorithm = 'LeakyBucket';
  readonly capacity: number;
  readonly ratePerSecond: number;

  constructor(options: LeakyBucketOptions) {
    const { opts, common } = readRedisCommon('LeakyBucket', options, ['capacity', 'ratePerSecond']);
    const capacity = integerOption('LeakyBucket', 'capacity', opts.capacity, 1, MAX_GCRA_CAPACITY);
    const rate = positiveNumberOption(
      'LeakyBucket',
      'ratePerSecond',
      opts.ratePerSecond,
      MIN_RATE_PER_SECOND,
      MAX_RATE_PER_SECOND,
    );
    // The bucket is the queue: at most `capacity` permits wait (fewer if asked).
    const queueLimit =
      opts.queueLimit === undefined
        ? capacity
        : integerOption('LeakyBucket', 'queueLimit', opts.queueLimit, 0, capacity);
    super('LeakyBucket', { ...common, queueLimit }, capacity, rate, true);
    this.capacity = capacity;
    this.ratePerSecond = rate;
  }
}
