import { ManualClock } from '../../clock.js';
import { checkOptionsObject, show, typeError } from '../../validate.js';
import { BLOCKS, type RedisHandle, type RedisLimiter, type WhenUnavailable } from '../base.js';
import { FixedWindow } from '../fixed-window.js';
import { LeakyBucket } from '../leaky-bucket.js';
import { SlidingLog } from '../sliding-log.js';
import { SlidingWindow } from '../sliding-window.js';
import { TokenBucket } from '../token-bucket.js';
import { WarmingBucket } from '../warming-bucket.js';

const CLASSES: Record<string, new (options: never) => RedisLimiter> = {
  TokenBucket,
  LeakyBucket,
  FixedWindow,
  SlidingWindow,
  SlidingLog,
  WarmingBucket,
};

/** Options of atomic-limiter/redis's `attach(handle, options)`: what is this thread's own. */
export interface AttachOptions {
  /** This thread's own Redis client (ioredis or node-redis), connected. */
  redis: unknown;
  /** A policy for this thread, e.g. a local limiter (one given to the original does not travel). */
  whenUnavailable?: WhenUnavailable;
}

/**
 * Opens, in this thread, the Redis limiter whose `handle` was sent here: the same options,
 * the same ManualClock if one was given, and in fleet mode the same shared blocks (permits
 * leased by any thread are spent by all). `redis` is this thread's own client.
 */
export function attach(handle: RedisHandle, options: AttachOptions): RedisLimiter {
  const opts = checkOptionsObject('attach', options, ['redis', 'whenUnavailable']);
  if (
    typeof handle !== 'object' ||
    handle === null ||
    handle.kind !== 'atomic-limiter/redis' ||
    !(handle.algorithm in CLASSES)
  ) {
    throw typeError(`attach: expected a Redis rate limiter's handle, got ${show(handle)}`);
  }
  const Class = CLASSES[handle.algorithm]!;
  const given: Record<string | symbol, unknown> = { ...handle.options, redis: opts.redis };
  if (opts.whenUnavailable !== undefined) given.whenUnavailable = opts.whenUnavailable;
  if (handle.clock) given.clock = new ManualClock(handle.clock as never);
  if (handle.blocks) given[BLOCKS] = handle.blocks;
  return new Class(given as never);
}
