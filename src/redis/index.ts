/**
 * atomic-limiter/redis: the seven limiters with their state in Redis, for a fleet of
 * machines. Same options, Decisions, Leases and errors as in memory; methods return
 * promises. See the README section "Redis".
 */

export { BackendUnavailableError } from '../errors.js';
export type {
  LocalLimiter,
  RedisHandle,
  RedisLease,
  RedisOptions,
  WhenUnavailable,
} from './base.js';
export { Concurrency, type ConcurrencyOptions } from './concurrency.js';
export { FixedWindow, type FixedWindowOptions } from './fixed-window.js';
export { type AttachOptions, attach } from './fleet/attach.js';
export { LeakyBucket, type LeakyBucketOptions } from './leaky-bucket.js';
export { SlidingLog, type SlidingLogOptions } from './sliding-log.js';
export { SlidingWindow, type SlidingWindowOptions } from './sliding-window.js';
export { TokenBucket, type TokenBucketOptions } from './token-bucket.js';
export { WarmingBucket, type WarmingBucketOptions } from './warming-bucket.js';
