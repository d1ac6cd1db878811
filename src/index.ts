export {
  Concurrency,
  type ConcurrencyOptions,
  type ReleaseOptions,
} from './algorithms/concurrency.js';
export { FixedWindow, type FixedWindowOptions } from './algorithms/fixed-window.js';
export { LeakyBucket, type LeakyBucketOptions } from './algorithms/leaky-bucket.js';
export { SlidingLog, type SlidingLogOptions } from './algorithms/sliding-log.js';
export { SlidingWindow, type SlidingWindowOptions } from './algorithms/sliding-window.js';
export { TokenBucket, type TokenBucketOptions } from './algorithms/token-bucket.js';
export { WarmingBucket, type WarmingBucketOptions } from './algorithms/warming-bucket.js';
export { type AnyLimiter, attach } from './attach.js';
export { Chain, type ChainDecision, type ChainMember, chain } from './chain.js';
export { type Clock, type ClockHandle, ManualClock, MonotonicClock } from './clock.js';
export { CoarseClock, type CoarseClockOptions } from './coarse-clock.js';
export {
  BackendUnavailableError,
  ClusterTimeoutError,
  ClusterUnavailableError,
  LimiterClosedError,
  LimiterError,
  QueueFullError,
} from './errors.js';
export type { Key, Limiter } from './limiter.js';
export { TABLE_FULL_CHANNEL } from './limiter.js';
export type {
  AcquireOptions,
  AlgorithmName,
  CommonOptions,
  Decision,
  Lease,
  LimiterHandle,
  QueueOrder,
  Stats,
  WhenFull,
} from './options.js';
