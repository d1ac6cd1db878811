import { readSlidingWindowOptions, segmentBits } from '../algorithms/segment-bits.js';
import { reconfiguredWindow, wideSlidingBits } from '../algorithms/window-bits.js';
import { rangeError, show } from '../validate.js';
import { type OptionsAt, RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
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
  /** @internal Whether the in-memory class would take its wide table (its ranges). */
  private readonly wide: boolean;

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
    this.wide = wide;
    // Parameters as in memory: limit, window, segments (0: none), and the largest limit a
    // reconfigure() gave it.
    this.start([limit, windowMs, segments ?? 0, 0]);
    this.startFleet();
  }

  /** Window length in milliseconds (reconfigure() changes it). */
  get windowMs(): number {
    return this.params[1]!;
  }

  /** Segments per window; undefined for the two-window estimate. */
  get segments(): number | undefined {
    const segments = this.params[2]!;
    return segments > 0 ? segments : undefined;
  }

  /**
   * Takes `limit` and `windowMs` (with `segments`: `limit` alone), as the in-memory
   * SlidingWindow: what each key was granted stays counted: a higher limit admits the
   * difference in the same window, a lower one nothing more until the window allows. A new
   * `windowMs` counts the key's weighted count (previous window's share and current count)
   * in the new window that contains now.
   */
  override reconfigure(options: {
    limit?: number;
    windowMs?: number;
    segments?: number;
  }): Promise<void> {
    return super.reconfigure(options);
  }

  /** @internal A wide window's previous count is kept in steps, as the in-memory wide table's. */
  private quantum(params: readonly number[]): number {
    return this.wide
      ? wideSlidingBits(Math.max(params[0]!, params[3]!), params[1]! * 1000).prevQuantum
      : 1;
  }

  /** @internal */
  protected configure({ params, version, past, times }: OptionsAt): void {
    const [limit, windowMs, segments] = params as [number, number, number];
    if (segments === 0) {
      const history = { version, past: past.map((p) => [p[1]! * 1000, this.quantum(p)]), times };
      const windowUs = windowMs * 1000;
      this.useRule(
        slidingWindowRule({ limit, windowUs, prevQuantum: this.quantum(params) }, history),
      );
    } else {
      const segmentUs = Math.round(windowMs * 1000) / segments;
      this.useRule(slidingWindowSegmentsRule({ limit, segmentUs, segments, version }));
    }
  }

  /** @internal */
  protected reconfigurable(): readonly string[] {
    return ['limit', 'windowMs', 'segments'];
  }

  /** @internal The in-memory SlidingWindow's checks, message for message. */
  protected reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = this.params;
    const [limit0, windowMs0, segments, ceiling] = current as [number, number, number, number];
    const now = { limit: limit0, windowMs: windowMs0 };
    if (segments === 0) {
      if (opts.segments !== undefined) {
        throw rangeError(
          `${name}: option "segments" (${show(opts.segments)}) needs a ring of counts per key, and this limiter was created without "segments"; create it with segments to count by segment`,
        );
      }
      const [limit, windowMs, most] = reconfiguredWindow(name, opts, now, 2, this.wide, ceiling);
      return [limit, windowMs, 0, most];
    }
    // Each key's counts are of `segments` segments of a fixed length.
    for (const option of ['windowMs', 'segments'] as const) {
      const was = option === 'windowMs' ? windowMs0 : segments;
      if (opts[option] !== undefined && opts[option] !== was) {
        throw rangeError(
          `${name}: option "${option}" (${show(opts[option])}) cannot change with segments: each key's ring counts ${segments} segments of ${(windowMs0 / segments).toFixed(3).replace(/\.?0+$/, '')} ms; create a new limiter for another window or segment count`,
        );
      }
    }
    const { limit } = readSlidingWindowOptions(name, { ...now, segments, ...opts }, false);
    const fieldsFor = Math.max(limit0, ceiling);
    const segmentUs = (windowMs0 * 1000) / segments;
    const most = 2 ** segmentBits(fieldsFor, segmentUs, segments)!.countBits - 3;
    if (limit > most) {
      throw rangeError(
        `${name}: option "limit" (${show(limit)}) needs wider count fields than this limiter's (limits up to ${most} with segments); create a new limiter for a larger limit`,
      );
    }
    return [limit, windowMs0, segments, fieldsFor];
  }

  /** @internal */
  protected settings(params: readonly number[]): string {
    const segments = params[2]!;
    return segments > 0
      ? `windowMs ${params[1]} in ${segments} segments`
      : `windowMs ${params[1]} (previous count in steps of ${this.quantum(params)})`;
  }
}
