import { readWarmingOptions, warmingModel } from '../algorithms/warming-bucket.js';
import { type OptionsAt, RedisLimiter, type RedisOptions, readRedisCommon } from './base.js';
import { warmingBucketRule, warmingGeometry } from './warming-bucket.lua.js';

/** The options of atomic-limiter/redis's `new WarmingBucket()` (Guava's warm-up to `ratePerSecond` over `warmupMs`): its own, then every Redis limiter's. */
export interface WarmingBucketOptions extends RedisOptions {
  /** The stable rate, reached once warm: permits per second, from 1e-6 to 1e9. */
  ratePerSecond: number;
  /** Milliseconds of full demand to ramp up to `ratePerSecond`. Above 0, at most 2^31 − 1. */
  warmupMs: number;
  /** The cold interval in stable intervals. Above 1, at most 1000; default 3. */
  coldFactor?: number;
}

/**
 * WarmingBucket with its state in Redis: Guava's SmoothWarmingUp, the in-memory
 * WarmingBucket's meaning and figures (it pays later; retryAfterMs is the debt owed).
 */
export class WarmingBucket extends RedisLimiter {
  readonly algorithm = 'WarmingBucket';

  constructor(options: WarmingBucketOptions) {
    const { opts, common } = readRedisCommon('WarmingBucket', options, [
      'ratePerSecond',
      'warmupMs',
      'coldFactor',
    ]);
    const { rate, warmupMs, coldFactor } = readWarmingOptions('WarmingBucket', opts);
    super('WarmingBucket', common);
    // Parameters as in memory: the limit (most stored permits), rate, warm-up, cold factor.
    this.start([warmingModel(rate, warmupMs, coldFactor).limit, rate, warmupMs, coldFactor]);
    this.startFleet();
  }

  /** The stable rate, permits per second (reconfigure() changes it). */
  get ratePerSecond(): number {
    return this.params[1]!;
  }

  /** The warm-up, ms (reconfigure() changes it). */
  get warmupMs(): number {
    return this.params[2]!;
  }

  /** The cold interval in stable intervals (reconfigure() changes it). */
  get coldFactor(): number {
    return this.params[3]!;
  }

  /**
   * Takes `ratePerSecond`, `warmupMs` and `coldFactor`, as Guava's setRate() and the
   * in-memory WarmingBucket: each key's stored permits keep their share of the (new)
   * maximum, and what a key owes stays owed (its next free time is kept); a key cold now
   * stays cold.
   */
  override reconfigure(options: {
    ratePerSecond?: number;
    warmupMs?: number;
    coldFactor?: number;
  }): Promise<void> {
    return super.reconfigure(options);
  }

  /** @internal */
  private model(params: readonly number[]) {
    return warmingModel(params[1]!, params[2]!, params[3]!);
  }

  /** @internal */
  protected configure({ params, version, past, times }: OptionsAt): void {
    const geometries = past.map((p) => warmingGeometry(this.model(p)));
    this.useRule(
      warmingBucketRule(this.model(params), { version, past: geometries, times }),
      false,
    );
  }

  /** @internal */
  protected reconfigurable(): readonly string[] {
    return ['ratePerSecond', 'warmupMs', 'coldFactor'];
  }

  /** @internal */
  protected reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = this.params;
    const { rate, warmupMs, coldFactor } = readWarmingOptions(name, {
      ratePerSecond: current[1],
      warmupMs: current[2],
      coldFactor: current[3],
      ...opts,
    });
    return [warmingModel(rate, warmupMs, coldFactor).limit, rate, warmupMs, coldFactor];
  }

  /** @internal */
  protected settings(params: readonly number[]): string {
    return `ratePerSecond ${params[1]}, warmupMs ${params[2]}, coldFactor ${params[3]}`;
  }
}
