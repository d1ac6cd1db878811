import { BackendUnavailableError, warnGiveBackFailed } from '../errors.js';
import type { Key } from '../limiter.js';
import type { AcquireOptions, Decision } from '../options.js';
import { isThenable } from '../validate.js';
import type { RedisLease, WhenUnavailable } from './options.js';
import { Unavailable } from './runner.js';

/*
 * The unavailability policy: what a call does when Redis could not answer it in time
 * (`whenUnavailable`): throw BackendUnavailableError, allow, deny, or ask a local limiter.
 */

/** What the policy needs of its limiter. */
export interface PolicyHost {
  readonly owner: string;
  readonly limit: number;
  readonly timeoutMs: number;
  readonly whenUnavailable: WhenUnavailable;
}

/** A lease with nothing to give back (rate limiters, and 'allow' while Redis is away). */
export const NO_OP_LEASE: RedisLease = Object.freeze({
  release: (): Promise<void> => Promise.resolve(),
  [Symbol.dispose](): void {},
});

/** The lease of 'allow' while Redis is away: nothing to give back, and Redis took nothing. */
const UNAVAILABLE_LEASE: RedisLease = Object.freeze({
  release: (): Promise<void> => Promise.resolve(),
  [Symbol.dispose](): void {},
  reason: 'unavailable' as const,
});

/** A give-back that could not reach Redis, where nobody awaits it: a process warning. */
export function reportLost(error: unknown): void {
  warnGiveBackFailed('atomic-limiter/redis', 'ATOMIC_LIMITER_REDIS_GIVE_BACK', error);
}

/** `error` as the caller sees it: Redis's unavailability as BackendUnavailableError. */
export function unavailableError(owner: string, error: unknown): unknown {
  if (!(error instanceof Unavailable)) return error;
  return new BackendUnavailableError(`${owner}: Redis is unavailable: ${error.message}`, {
    cause: error.cause ?? error,
  });
}

/** The decision of a tryAcquire() or consume() whose answer Redis could not give. */
export function decideUnavailable(
  h: PolicyHost,
  error: unknown,
  key: Key | undefined,
  permits: number,
): Decision | PromiseLike<Decision> {
  if (!(error instanceof Unavailable)) throw error;
  const policy = h.whenUnavailable;
  if (policy === 'allow') {
    return {
      allowed: true,
      remaining: h.limit - permits,
      limit: h.limit,
      retryAfterMs: 0,
      resetAfterMs: 0,
      reason: 'unavailable',
    };
  }
  if (policy === 'deny') {
    return {
      allowed: false,
      remaining: 0,
      limit: h.limit,
      retryAfterMs: h.timeoutMs,
      resetAfterMs: 0,
      reason: 'unavailable',
    };
  }
  if (policy === 'throw') throw unavailableError(h.owner, error);
  const d = policy.consume(key, permits);
  return isThenable(d) ? d.then(fromFallback) : fromFallback(d);
}

/**
 * A fallback limiter's decision as this limiter's: a grant says `reason: 'unavailable'`, as
 * one of `'allow'` does — Redis took nothing, so a chain's rollback or the HTTP middleware's
 * `refundWhen` gives nothing back to it (a refund goes to Redis, and would mint a permit there).
 */
function fromFallback(d: Decision): Decision {
  return d.allowed && d.reason === undefined ? { ...d, reason: 'unavailable' } : d;
}

/**
 * The lease of an acquire() whose answer Redis could not give; `deadline` (performance.now()
 * ms, 0: none) bounds the whole call, so a local limiter gets what the Redis wait left of it.
 */
export function acquireUnavailable(
  h: PolicyHost,
  error: Unavailable,
  key: Key | undefined,
  permits: number,
  options: AcquireOptions,
  deadline: number,
): RedisLease | PromiseLike<RedisLease> {
  const policy = h.whenUnavailable;
  if (policy === 'allow') return UNAVAILABLE_LEASE;
  if (typeof policy === 'object' && typeof policy.acquire === 'function') {
    let rest = options;
    if (deadline !== 0) {
      const left = Math.floor(deadline - performance.now());
      if (left <= 0) throw new DOMException('The operation timed out.', 'TimeoutError');
      rest = { ...options, timeoutMs: left };
    }
    return Promise.resolve(policy.acquire(key, permits, rest)).then(
      (lease): RedisLease => ({
        release: async () => lease.release(),
        [Symbol.dispose]: () => lease[Symbol.dispose](),
        reason: 'unavailable',
      }),
    );
  }
  throw unavailableError(h.owner, error);
}
