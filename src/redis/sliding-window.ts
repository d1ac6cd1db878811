import { readSlidingWindowOptions } from '../algorithms/segment-bits.js';
import { wideSlidingBits } from '../algorithms/window-bits.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { Script } from './runner.js';
import { SLIDING_WINDOW_SCRIPT } from './sliding-window.lua.js';
import { SLIDING_WINDOW_SEGMENTS_SCRIPT } from './sliding-window-segments.lua.js';
import { slidingWindowSegmentsSingleScript } from './sliding-window-segments-single.lua.js';
import { slidingWindowSingleScript } from './sliding-window-single.lua.js';

const SCRIPT = new Script('atomic-limiter:sliding-window', SLIDING_WINDOW_SCRIPT, true);
const SEGMENTS_SCRIPT = new Script(
  'atomic-limiter:sliding-window-segments',
  SLIDING_WINDOW_SEGMENTS_SCRIPT,
  true,
);

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
  /** @internal */
  private readonly args: readonly string[];

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
    super('SlidingWindow', common, segments === undefined ? SCRIPT : SEGMENTS_SCRIPT);
    this.limit = limit;
    this.windowMs = windowMs;
    this.segments = segments;
    // A wide window keeps its previous count as the in-memory wide table does.
    const prevQuantum = wide ? wideSlidingBits(limit, windowMs * 1000).prevQuantum : 1;
    if (segments === undefined) {
      this.args = [String(limit), String(windowMs * 1000), String(prevQuantum)];
      const single = {
        limit,
        windowUs: windowMs * 1000,
        slackMs: this.ttlSlackMs,
        prevQuantum,
      };
      this.useSingleScripts('sliding-window', (op) => slidingWindowSingleScript(op, single));
      if (this.block > 0) {
        this.useLeaseScript('sliding-window', slidingWindowSingleScript('b', single));
      }
    } else {
      const segmentUs = Math.round(windowMs * 1000) / segments;
      this.args = [String(limit), String(segmentUs), String(segments)];
      const single = { limit, segmentUs, segments, slackMs: this.ttlSlackMs };
      this.useSingleScripts('sliding-window-segments', (op) =>
        slidingWindowSegmentsSingleScript(op, single),
      );
      if (this.block > 0) {
        this.useLeaseScript(
          'sliding-window-segments',
          slidingWindowSegmentsSingleScript('b', single),
        );
      }
    }
    this.startFleet();
  }

  /** @internal */
  protected params(): readonly string[] {
    return this.args;
  }
}
