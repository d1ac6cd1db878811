import { readLogOptions } from '../algorithms/sliding-log.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
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
  readonly limit: number;
  readonly windowMs: number;

  constructor(options: SlidingLogOptions) {
    const { opts, common } = readRedisCommon('SlidingLog', options, ['limit', 'windowMs']);
    const { limit, windowMs } = readLogOptions('SlidingLog', opts);
    super('SlidingLog', common);
    this.limit = limit;
    this.windowMs = windowMs;
    this.useRule(slidingLogRule({ limit, windowUs: windowMs * 1000 }));
    this.startFleet();
  }

  /** @internal */
  protected override keysOf(tag: string): readonly string[] {
    const base = `${this.prefix}:SlidingLog:{${tag}}`;
    return [base, `${base}:n`];
  }
}
