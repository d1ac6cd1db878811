import { gcraUnits } from '../algorithms/gcra.js';
import { QueueFullError } from '../errors.js';
import {
  NO_OP_LEASE,
  type RedisCommon,
  type RedisLease,
  RedisLimiter,
  reportLost,
} from './base.js';
import { gcraRule, gcraStepMs } from './gcra.lua.js';
import { sleepUs, type Waiter } from './wait.js';

/**
 * TokenBucket and LeakyBucket in Redis: GCRA with the in-memory class's unit arithmetic
 * (src/algorithms/gcra.ts), so that both give the same figures. acquire() reserves the
 * permits' future time in the script, then sleeps here until it comes.
 */
export abstract class RedisGcra extends RedisLimiter {
  readonly limit: number;

  /** @internal */
  protected constructor(
    owner: string,
    common: RedisCommon,
    capacity: number,
    ratePerSecond: number,
    wide: boolean,
    leaky: boolean,
  ) {
    super(owner, common);
    // The in-memory class's units (a wide table's past a capacity of 2^24 or a rate of 10^6
    // per second; past that rate a unit is under 1 µs, and a key counts from an origin of its
    // own: gcra.lua.ts).
    const { k, scale, tau } = gcraUnits(capacity, ratePerSecond, wide);
    const stepMs = gcraStepMs(capacity, 1e6 / ratePerSecond);
    this.limit = capacity;
    this.useRule(
      gcraRule({ k, scale, tau, limit: capacity, leaky, queueLimit: common.queueLimit, stepMs }),
    );
    // A leaky bucket's lease is a burst (README, "Fleet mode"): it stays one block.
    this.startFleet(!leaky);
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
