import { readSlidingWindowOptions } from '../algorithms/segment-bits.js';
import { wideSlidingBits } from '../algorithms/window-bits.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { slidingWindowRule } from './sliding-window.lua.js';
import { slidingWindowSegmentsRule } from './sliding-window-segments.lua.js';

/** The options of atomic-limiter/redis's `new SlidingWindow()` (at most about `limit` in any trailing `windowMs`): its own, then every Redis limiter's. */
export interface SlidingWindowOptions extends RedisOptions {
  /** Permits per window; the in-memory SlidingWindow's ranges, wide ones too (README, *Options*). */
  limit: number;
  /** Window length in milliseconds (0.001 to 2^31). */
  windowMs: number;
  /**
   * Segments per window (2 to 1000, each a whole number of microseconds): exact to a
   * segment, as in memory. Omitted: the two-window estimate.
   */
  segments?: number;
}

/**
 * SlidingWindow with its state in Redis: the two-window weighted counter, or with
 * `segments` the segmented window (one count per segment in the key's value), as in memory.
 */
export class SlidingWindow extends RedisLimiter {
  readonly algorithm = 'SlidingWindow';
  readonly limit: number;
  readonly windowMs: number;
  /** Segments per window; undefined for the two-window estimate. */
  readonly segments: number | undefined;

  constructor(options: SlidingWindowOptions) {
    const { opts, common } = readRedisCommon('SlidingWindow', options, [
      'limit',
      'windowMs',
      'segments',
    ]);
    const { limit, windowMs, segments, wide } = readSlidingWindowOptions(
      'SlidingWindow',
      opts,
      true,
    );
    super('SlidingWindow', common);
    this.limit = limit;
    this.windowMs = windowMs;
    this.segments = segments;
    // A wide window keeps its previous count as the in-memory wide table does.
    const prevQuantum = wide ? wideSlidingBits(limit, windowMs * 1000).prevQuantum : 1;
    if (segments === undefined) {
      this.useRule(slidingWindowRule({ limit, windowUs: windowMs * 1000, prevQuantum }));
    } else {
      const segmentUs = Math.round(windowMs * 1000) / segments;
      this.useRule(slidingWindowSegmentsRule({ limit, segmentUs, segments }));
    }
    this.startFleet();
  }
}
