import { readLogOptions } from '../algorithms/sliding-log.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { Script } from './runner.js';
import { SLIDING_LOG_SCRIPT } from './sliding-log.lua.js';
import { slidingLogSingleScript } from './sliding-log-single.lua.js';

const SCRIPT = new Script('atomic-limiter:sliding-log', SLIDING_LOG_SCRIPT, true);

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
  /** @internal */
  private readonly args: readonly string[];

  constructor(options: SlidingLogOptions) {
    const { opts, common } = readRedisCommon('SlidingLog', options, ['limit', 'windowMs']);
    const { limit, windowMs } = readLogOptions('SlidingLog', opts);
    super('SlidingLog', common, SCRIPT);
    this.limit = limit;
    this.windowMs = windowMs;
    this.args = [String(limit), String(windowMs * 1000)];
    const single = { limit, windowUs: windowMs * 1000, slackMs: this.ttlSlackMs };
    this.useSingleScripts('sliding-log', (op) => slidingLogSingleScript(op, single));
    if (this.block > 0) this.useLeaseScript('sliding-log', slidingLogSingleScript('b', single));
    this.startFleet();
  }

  /** @internal */
  protected override keysOf(tag: string): readonly string[] {
    const base = `${this.prefix}:SlidingLog:{${tag}}`;
    return [base, `${base}:n`];
  }

  /** @internal */
  protected params(): readonly string[] {
    return this.args;
  }
}
