import { readLogOptions } from '../algorithms/sliding-log.js';
import { type OptionsAt, RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { slidingLogRule } from './sliding-log.lua.js';

/** The options of atomic-limiter/redis's `new SlidingLog()` (at most `limit` in any trailing `windowMs`): its own, then every Redis limiter's. */
export interface SlidingLogOptions extends RedisOptions {
  /** Permits in any trailing window. Integer, 1 to 65 536. */
  limit: number;
  /** Window length in milliseconds (0.001 to 2^30). */
  windowMs: number;
}

/**
 * SlidingLog with its state in Redis: exact, at most `limit` permits in any trailing
 * `windowMs`. A key holds a list of up to `limit` grant times (about 20 bytes each).
 */
export class SlidingLog extends RedisLimiter {
  readonly algorithm = 'SlidingLog';

  constructor(options: SlidingLogOptions) {
    const { opts, common } = readRedisCommon('SlidingLog', options, ['limit', 'windowMs']);
    const { limit, windowMs } = readLogOptions('SlidingLog', opts);
    super('SlidingLog', common);
    // Parameters: limit, window, and the largest limit and window it had.
    this.start([limit, windowMs, limit, windowMs]);
    this.startFleet();
  }

  /** Window length in milliseconds (reconfigure() changes it). */
  get windowMs(): number {
    return this.params[1]!;
  }

  /**
   * Takes `limit` and `windowMs`: the log keeps grant times, so the new limit and window
   * apply to the grants it holds: the last `limit` grants (the largest limit it had, after
   * a lower one), for as long as the window they were logged under.
   */
  override reconfigure(options: { limit?: number; windowMs?: number }): Promise<void> {
    return super.reconfigure(options);
  }

  /** @internal */
  protected configure({ params, version }: OptionsAt): void {
    const [limit, windowMs, keep, keepMs] = params as [number, number, number, number];
    const keepUs = keepMs * 1000;
    this.useRule(slidingLogRule({ limit, windowUs: windowMs * 1000, keep, keepUs, version }));
  }

  /** @internal */
  protected reconfigurable(): readonly string[] {
    return ['limit', 'windowMs'];
  }

  /** @internal */
  protected reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = this.params;
    const { limit, windowMs } = readLogOptions(name, {
      limit: current[0],
      windowMs: current[1],
      ...opts,
    });
    return [limit, windowMs, Math.max(limit, current[2]!), Math.max(windowMs, current[3]!)];
  }

  /** @internal A log holds times: the same under any options. */
  protected settings(): string {
    return '';
  }

  /** @internal */
  protected override keysOf(tag: string): readonly string[] {
    const base = `${this.prefix}:SlidingLog:{${tag}}`;
    return [base, `${base}:n`];
  }
}
