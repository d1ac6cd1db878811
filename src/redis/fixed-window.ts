import { readWindowOptions } from '../algorithms/window-bits.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { FIXED_WINDOW_SCRIPT } from './fixed-window.lua.js';
import { fixedWindowSingleScript } from './fixed-window-single.lua.js';
import { Script } from './runner.js';

const SCRIPT = new Script('atomic-limiter:fixed-window', FIXED_WINDOW_SCRIPT, true);

export interface FixedWindowOptions extends RedisOptions {
  /** Permits per window; the same ranges as the in-memory FixedWindow, wide ones included. */
  limit: number;
  /** Window length in milliseconds (0.001 to 2^31), aligned to time 0 of Redis TIME. */
  windowMs: number;
}

/** FixedWindow with its state in Redis: at most `limit` permits per aligned window. */
export class FixedWindow extends RedisLimiter {
  readonly algorithm = 'FixedWindow';
  readonly limit: number;
  readonly windowMs: number;
  /** @internal */
  private readonly args: readonly string[];

  constructor(options: FixedWindowOptions) {
    const { opts, common } = readRedisCommon('FixedWindow', options, ['limit', 'windowMs']);
    const { limit, windowMs } = readWindowOptions('FixedWindow', opts, 1, true);
    super('FixedWindow', common, SCRIPT);
    this.limit = limit;
    this.windowMs = windowMs;
    this.args = [String(limit), String(windowMs * 1000)];
    const single = {
      limit,
      windowUs: windowMs * 1000,
      slackMs: this.ttlSlackMs,
    };
    this.useSingleScripts('fixed-window', (op) => fixedWindowSingleScript(op, single));
    if (this.block > 0) this.useLeaseScript('fixed-window', fixedWindowSingleScript('b', single));
    this.startFleet();
  }

  /** @internal */
  protected params(): readonly string[] {
    return this.args;
  }
}
