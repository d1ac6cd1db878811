import { readWindowOptions, reconfiguredWindow } from '../algorithms/window-bits.js';
import { type OptionsAt, RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
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
  /** @internal Whether the in-memory class would take its wide table (its ranges). */
  private readonly wide: boolean;

  constructor(options: FixedWindowOptions) {
    const { opts, common } = readRedisCommon('FixedWindow', options, ['limit', 'windowMs']);
    const { limit, windowMs, wide } = readWindowOptions('FixedWindow', opts, 1, true);
    super('FixedWindow', common);
    this.wide = wide;
    // Parameters as in memory: limit, window, and the largest limit a reconfigure() gave it.
    this.start([limit, windowMs, 0]);
    this.startFleet();
  }

  /** Window length in milliseconds (reconfigure() changes it). */
  get windowMs(): number {
    return this.params[1]!;
  }

  /**
   * Takes `limit` and `windowMs`, as the in-memory FixedWindow: what each key was granted in
   * its current window stays counted: a higher limit admits the difference in the same
   * window, a lower one nothing more until the window ends. A new `windowMs` counts those
   * permits in the new window that contains now.
   */
  override reconfigure(options: { limit?: number; windowMs?: number }): Promise<void> {
    return super.reconfigure(options);
  }

  /** @internal */
  protected configure({ params, version, past, times }: OptionsAt): void {
    const history = { version, past: past.map((p) => [p[1]! * 1000]), times };
    this.useRule(fixedWindowRule({ limit: params[0]!, windowUs: params[1]! * 1000 }, history));
  }

  /** @internal */
  protected reconfigurable(): readonly string[] {
    return ['limit', 'windowMs'];
  }

  /** @internal */
  protected reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = this.params;
    const [limit, windowMs, ceiling] = current as [number, number, number];
    return reconfiguredWindow(name, opts, { limit, windowMs }, 1, this.wide, ceiling);
  }

  /** @internal */
  protected settings(params: readonly number[]): string {
    return `windowMs ${params[1]}`;
  }
}
