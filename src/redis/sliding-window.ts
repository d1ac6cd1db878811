import { readWindowOptions } from '../algorithms/window-bits.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { Script } from './runner.js';
import { SLIDING_WINDOW_SCRIPT } from './sliding-window.lua.js';

const SCRIPT = new Script('atomic-limiter:sliding-window', SLIDING_WINDOW_SCRIPT, true);

export interface SlidingWindowOptions extends RedisOptions {
  /** Permits per window; the same range as the in-memory SlidingWindow. */
  limit: number;
  /** Window length in milliseconds (0.001 to 2^30). */
  windowMs: number;
}

/** SlidingWindow with its state in Redis: the two-window weighted counter, as in memory. */
export class SlidingWindow extends RedisLimiter {
  readonly algorithm = 'SlidingWindow';
  readonly limit: number;
  readonly windowMs: number;
  private readonly args: readonly string[];

  constructor(options: SlidingWindowOptions) {
    const { opts, common } = readRedisCommon('SlidingWindow', options, ['limit', 'windowMs']);
    const { limit, windowMs } = readWindowOptions('SlidingWindow', opts, 2);
    super('SlidingWindow', common, SCRIPT);
    this.limit = limit;
    this.windowMs = windowMs;
    this.args = [String(limit), String(windowMs * 1000)];
    this.startFleet();
  }

  protected params(): readonly string[] {
    return this.args;
  }
}
