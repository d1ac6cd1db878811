import { readWindowOptions } from '../algorithms/window-bits.js';
import { RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { fixedWindowRule } from './fixed-window.lua.js';

/** The options of atomic-limiter/redis's `new FixedWindow()` (at most `limit` per fixed `windowMs`): its own, then every Redis limiter's. */
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

  constructor(options: FixedWindowOptions) {
    const { opts, common } = readRedisCommon('FixedWindow', options, ['limit', 'windowMs']);
    const { limit, windowMs } = readWindowOptions('FixedWindow', opts, 1, true);
    super('FixedWindow', common);
    this.limit = limit;
    this.windowMs = windowMs;
    this.useRule(fixedWindowRule({ limit, windowUs: windowMs * 1000 }));
    this.startFleet();
  }
}
