import { FRESH, GEN_MASK, PAYLOAD_MASK, REJECT } from '../layout.js';
import {
  Attached,
  type CommonOptions,
  type Fresh,
  type Key,
  Limiter,
  readCommon,
} from '../limiter.js';
import { NO_SLOT } from '../table.js';
import { integerOption, permitsError } from '../validate.js';
import { ALGO_CONCURRENCY } from './ids.js';

export const MAX_CONCURRENCY = 2 ** 27;

export interface ConcurrencyOptions extends CommonOptions {
  /** Permits that may be held at once per key. Integer, 1 to 2^27. */
  limit: number;
}

/**
 * Concurrency: at most `limit` permits held at once per key. Permits are taken with
 * `tryAcquire` / `consume` and given back with `release(key, permits)`. Time plays no
 * part, so a refusal's `retryAfterMs` is `Infinity`: only a release can help.
 */
export class Concurrency extends Limiter {
  readonly algorithm = 'Concurrency';
  readonly limit: number;

  constructor(options: ConcurrencyOptions) {
    super('Concurrency', ALGO_CONCURRENCY, Concurrency.prepare(options));
    this.limit = this.param(0);
  }

  private static prepare(options: ConcurrencyOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('Concurrency', options, ['limit']);
    const limit = integerOption('Concurrency', 'limit', opts.limit, 1, MAX_CONCURRENCY);
    return { ...common, params: [limit], logRing: 0 };
  }

  /** A Lease from `acquire()` gives its permits back on `release()`. */
  protected override get releasable(): boolean {
    return true;
  }

  private held(state: number): number {
    const p = state & PAYLOAD_MASK;
    return p === FRESH ? 0 : p;
  }

  /**
   * Returns `permits` held for `key`. Releasing more than the key holds is a bug in the
   * caller and throws a RangeError (nothing is released then).
   */
  release(key?: Key, permits = 1): void {
    this.checkOpen();
    if (!(permits >= 1 && permits <= this.limit) || (permits | 0) !== permits) {
      throw permitsError('Concurrency.release', permits, this.limit);
    }
    let over = -1;
    const ref = this.update(key, 0, (s) => {
      const held = this.held(s);
      if (held < permits) {
        over = held;
        return s;
      }
      return (s & GEN_MASK) | (held - permits);
    });
    if (ref === NO_SLOT) over = 0;
    if (over >= 0) {
      throw new RangeError(
        `Concurrency.release: permits (${permits}) exceed the permits held for this key (${over})`,
      );
    }
  }

  protected step(state: number, _stamp: number, _nowUs: number, permits: number): number {
    const held = this.held(state);
    if (held + permits > this.limit) return REJECT;
    return (state & GEN_MASK) | (held + permits);
  }

  protected giveBack(state: number, _stamp: number, _nowUs: number, permits: number): number {
    const held = this.held(state);
    return held === 0 ? state : (state & GEN_MASK) | Math.max(0, held - permits);
  }

  protected available(state: number): number {
    return this.limit - this.held(state);
  }

  protected untilFreshUs(state: number): number {
    return this.held(state) === 0 ? 0 : Number.POSITIVE_INFINITY;
  }

  protected retryEstimateUs(): number {
    return Number.POSITIVE_INFINITY;
  }
}
