import { gcraUnits, reconfiguredBucket } from '../algorithms/gcra.js';
import { QueueFullError } from '../errors.js';
import {
  NO_OP_LEASE,
  type OptionsAt,
  type RedisCommon,
  type RedisLease,
  RedisLimiter,
  reportLost,
} from './base.js';
import { gcraRule, gcraStepMs } from './gcra.lua.js';
import { sleepUs, timedOut, type Waiter } from './wait.js';

/**
 * TokenBucket and LeakyBucket in Redis: GCRA with the in-memory class's unit arithmetic
 * (src/algorithms/gcra.ts), so that both give the same figures. acquire() reserves the
 * permits' future time in the script, then sleeps here until it comes.
 */
export abstract class RedisGcra extends RedisLimiter {
  /** @internal The rate option's name (the in-memory class's). */
  protected abstract readonly rateName: 'refillPerSecond' | 'ratePerSecond';

  /** @internal */
  protected constructor(
    owner: string,
    common: RedisCommon,
    capacity: number,
    ratePerSecond: number,
    private readonly wide: boolean,
    private readonly leaky: boolean,
  ) {
    super(owner, common);
    // Parameters as in memory: capacity, rate, and the largest capacity a reconfigure()
    // gave it (0 until then).
    this.start([capacity, ratePerSecond, 0]);
    // A leaky bucket's lease is a burst (README, "Fleet mode"): it stays one block.
    this.startFleet(!leaky);
  }

  /** Burst size, or the bucket's room (reconfigure() changes it). */
  get capacity(): number {
    return this.params[0]!;
  }

  /**
   * @internal The in-memory class's units for `params` (a wide table's past a capacity of
   * 2^24 or a rate of 10^6 per second; past that rate a unit is under 1 µs, and a key counts
   * from an origin of its own: gcra.lua.ts), chosen for the largest capacity it had.
   */
  private units(params: readonly number[]) {
    return gcraUnits(Math.max(params[0]!, params[2]!), params[1]!, this.wide);
  }

  /** @internal */
  protected configure({ params, version, past, times }: OptionsAt): void {
    const [capacity, rate] = params as [number, number];
    const { k, scale } = this.units(params);
    // The bucket is a leaky bucket's queue: a smaller capacity bounds queueLimit too.
    const queueLimit = this.leaky ? Math.min(this.queueLimit, capacity) : this.queueLimit;
    this.useRule(
      gcraRule({
        k,
        scale,
        limit: capacity,
        leaky: this.leaky,
        queueLimit,
        stepMs: gcraStepMs(capacity, 1e6 / rate),
        history: {
          version,
          times,
          past: past.map((p) => {
            const u = this.units(p);
            return [u.k, u.scale];
          }),
        },
      }),
    );
  }

  /** @internal */
  protected reconfigurable(): readonly string[] {
    return ['capacity', this.rateName];
  }

  /** @internal */
  protected reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = this.params;
    const [capacity, rate, ceiling] = current as [number, number, number];
    return reconfiguredBucket(name, opts, { capacity, rate }, this.rateName, this.wide, ceiling);
  }

  /** @internal */
  protected settings(params: readonly number[]): string {
    const { k, scale } = this.units(params);
    return `${this.rateName} ${(scale * 1e6) / k} (${k} units a permit)`;
  }

  /** @internal */
  protected override async waitFor(w: Waiter): Promise<RedisLease> {
    const pending = this.call('q', w.tag, w.permits);
    // A reservation that lands after the waiter left is given back.
    pending.then(
      (reply) => {
        if (w.done && Array.isArray(reply) && (reply[0] === 1 || reply[0] === 3)) {
          this.giveBack(w.tag, w.permits, '').catch(reportLost);
        }
      },
      () => {},
    );
    const reply = await w.race(pending);
    const status = this.num(reply, 0);
    if (status === 1) return NO_OP_LEASE;
    if (status === 2) {
      const retryUs = this.num(reply, 1);
      throw new QueueFullError(
        this.queueLimit === 0
          ? `${this.owner}: option "queueLimit" is 0, so acquire() never waits`
          : `${this.owner}: more than ${this.queueLimit} permits would wait for this key (option "queueLimit"); retry after ${retryUs / 1000} ms`,
      );
    }
    if (status !== 3) throw this.badReply(reply);
    if (w.once) {
      // timeoutMs 0: a reservation to wait for is not taken.
      this.giveBack(w.tag, w.permits, '').catch(reportLost);
      throw timedOut();
    }
    const waitUs = this.num(reply, 1);
    try {
      await w.race(sleepUs(this.clock, waitUs, w));
    } catch (error) {
      // Abort, timeout or close: the reservation goes back (later reservations keep their
      // times; the rate is never exceeded).
      this.giveBack(w.tag, w.permits, '').catch(reportLost);
      throw error;
    }
    return NO_OP_LEASE;
  }
}
