import { warnGiveBackFailed } from './errors.js';
import type { Key } from './limiter.js';
import { Limiter } from './limiter.js';
import type { AcquireOptions, Decision, Lease } from './options.js';
import { acquireOptions, checkPermits, isThenable, show, typeError } from './validate.js';

/**
 * What `chain()` accepts: an in-memory limiter, a cluster client, a Redis limiter or another
 * chain — anything with `consume` and `refund`. Methods may answer synchronously or with a
 * promise. `limit` may be unknown for a while (a cluster client learns it from the primary's
 * first answer): the chain then leaves checking permits against it to that member.
 */
export interface ChainMember {
  /** The member's limit: a request for more permits than this is refused for good. */
  readonly limit: number | undefined;
  /** The member's algorithm ('TokenBucket', …): chooses the member's header policy. */
  readonly algorithm?: string;
  /** Decides for `permits` on `key`; the chain asks every member in order. */
  consume(key?: Key, permits?: number): Decision | PromiseLike<Decision>;
  /** Gives back permits a decision took: the chain refunds earlier members after a refusal. */
  refund(key?: Key, permits?: number): void | PromiseLike<void>;
  /** Decides without the Decision object, where the member has a cheaper path. */
  tryAcquire?(key?: Key, permits?: number): boolean | PromiseLike<boolean>;
  /** Waits for permits (the chain's `acquire()` needs it on every member). */
  acquire?(key?: Key, permits?: number, options?: AcquireOptions): Lease | PromiseLike<Lease>;
  /** Concurrency members: gives held permits back when the work is done. */
  release?(key?: Key, permits?: number): void | PromiseLike<void>;
}

/** A chain's Decision: the overall one, and each asked member's own. */
export interface ChainDecision extends Decision {
  /**
   * Member i's Decision, for each member in order: all of them when allowed; on a refusal,
   * every member's (those that granted as after their permits were given back), except
   * past a member whose refusal is for good (`retryAfterMs` Infinity) or that failed while
   * the chain asked past the refusal: then up to it.
   */
  readonly decisions: readonly Decision[];
}

/** A value, or a promise of it when any member answers asynchronously. */
type Maybe<T> = T | Promise<T>;

/** Synchronous answers when every member is an in-memory limiter (or such a chain). */
type Answer<M, T> = [M] extends [Limiter | Chain<Limiter>] ? T : Maybe<T>;

/**
 * A chain nested in another reports when each of its members took a call's permits, so
 * that the outer chain's rollback gives them back to the windows they came from as well
 * (its plain refund() would credit the current ones): by its Decision or Lease, the
 * times of that call. And a call's times of the members that are chains, by the call's
 * own times array (only for chains with such members).
 */
const reportedTimes = new WeakMap<object, Float64Array>();
const nestedTimes = new WeakMap<Float64Array, (Float64Array | undefined)[]>();

/** A copy of `times`, with the nested chains' times it holds. */
function copyTimes(times: Float64Array): Float64Array {
  const copy = times.slice();
  const nested = nestedTimes.get(times);
  if (nested !== undefined) nestedTimes.set(copy, [...nested]);
  return copy;
}

/** Notes in `times` what member `i`, a chain, reported for the call that gave `answer`. */
function noteNested(times: Float64Array, i: number, answer: object): void {
  let nested = nestedTimes.get(times);
  if (nested === undefined) nestedTimes.set(times, (nested = []));
  nested[i] = reportedTimes.get(answer);
}

/**
 * Several limiters acting as one: a request is granted by all of them or by none. Each is
 * asked in order; when one refuses (or throws), the permits already taken from the earlier
 * ones are given back — to the window they were taken in, so a rollback that crosses a
 * window boundary never credits the new window. Between the take and the give-back other
 * callers may briefly see those permits as used (they come back; they are never lost).
 *
 * Members may be asynchronous (cluster clients, Redis limiters): the chain answers
 * synchronously while every member asked answered synchronously, and with a promise as soon
 * as one returned one.
 */
export class Chain<M extends ChainMember = ChainMember> {
  /** Always 'chain': HTTP headers then describe the member that decided. */
  readonly algorithm = 'chain';
  /** The members, in the order they are asked. */
  readonly limiters: readonly M[];
  /** Largest permits one call may ask for: the smallest limit the chain knows of yet. */
  get limit(): number {
    let limit = Number.POSITIVE_INFINITY;
    for (const l of this.limiters)
      if (typeof l.limit === 'number' && l.limit < limit) limit = l.limit;
    return limit;
  }
  // When each in-memory member took its permits (its clock), for the rollback.
  private readonly takenUs: Float64Array;
  /** Whether a member is a chain (whose times are noted: see reportedTimes). */
  private readonly hasChains: boolean;
  /** Set once this chain is a member of another: it reports its calls' times. */
  private reports = false;

  constructor(limiters: readonly M[]) {
    this.limiters = [...limiters];
    this.takenUs = new Float64Array(this.limiters.length);
    this.hasChains = false;
    for (const l of this.limiters) {
      if (l instanceof Chain) {
        l.reports = true;
        this.hasChains = true;
      }
    }
  }

  /**
   * @internal From now on, each granted Decision records when each member took its permits
   * (see takenTimes()): for a give-back long after the call (the HTTP middleware's
   * `refundWhen`), to the window the permits came from.
   */
  reportTakenTimes(): void {
    this.reports = true;
  }

  /**
   * @internal For a Decision this chain granted (after reportTakenTimes()): when each member,
   * nested chains flattened, took its permits, on that member's clock; NaN where unknown (a
   * member that is not in memory, or a Decision not recorded).
   */
  takenTimes(decision: object): number[] {
    const out: number[] = [];
    flattenTimes(this, reportedTimes.get(decision), out);
    return out;
  }

  /**
   * @internal Gives back what a call took, each member to the window its permits came from
   * (`times`, as reported: see reportedTimes); without them, a refund.
   */
  refundTimes(key: Key | undefined, permits: number, times: Float64Array | undefined): Maybe<void> {
    if (times === undefined) return this.refund(key, permits) as Maybe<void>;
    return this.undo(this.limiters.length, key, permits, times);
  }

  private check(permits: number): void {
    const limit = this.limit;
    checkPermits('chain', permits, limit);
  }

  /**
   * Gives back what members 0…upTo−1 granted. Every give-back is attempted even if one
   * fails; the first failure is reported (thrown, or the promise rejects).
   */
  private undo(
    upTo: number,
    key: Key | undefined,
    permits: number,
    times: Float64Array,
    leased = false,
    leases?: readonly Lease[],
  ): Maybe<void> {
    // Latest first; in-memory members give back to the window their permits came from.
    // `leased`: acquire() released the Concurrency members' leases, which gave theirs back.
    const nested = this.hasChains ? nestedTimes.get(times) : undefined;
    return this.each(upTo - 1, -1, (l, j) => {
      if (leased && holdsLease(l)) return undefined;
      // A lease with a reason took nothing (a Redis member's whenUnavailable granted it).
      if ((leases?.[j] as { reason?: unknown } | undefined)?.reason !== undefined) return undefined;
      if (l instanceof Limiter) return l.refundTaken(key, permits, times[j]!);
      if (l instanceof Chain) return l.refundTimes(key, permits, nested?.[j]);
      return l.refund(key, permits);
    });
  }

  /** Takes `permits` from every limiter, or from none. */
  tryAcquire(key?: Key, permits = 1): Answer<M, boolean> {
    const d = this.consume(key, permits) as Maybe<ChainDecision>;
    return (isThenable(d) ? d.then((x) => x.allowed) : d.allowed) as Answer<M, boolean>;
  }

  /**
   * Like `tryAcquire`, with a Decision: on refusal, the Decision of the member that admits
   * last, so that `retryAfterMs` is when the whole chain admits; when granted, the tightest figures (fewest remaining, longest reset) of the chain. Each
   * member's own Decision is in `decisions`.
   */
  consume(key?: Key, permits = 1): Answer<M, ChainDecision> {
    this.check(permits);
    return this.ask(0, -1, key, permits, [], this.takenUs) as Answer<M, ChainDecision>;
  }

  /**
   * Asks members `start`… in order, adding their Decisions to `decisions`; `refusedAt` is
   * the first member that refused (−1: none yet). Past a refusal the members after it are
   * asked too (and give back what they grant), so that the refusal says when the whole chain
   * admits: the latest of the members' own retry times (each member, once it admits, keeps
   * admitting while time passes). Not when the refusal is for good (`retryAfterMs` Infinity:
   * a Concurrency member held), nor past a member that throws or rejects then: the refusal
   * stands, the later members are left unasked. Before a refusal, a member that throws or
   * rejects fails the call (see fail()).
   *
   * `times` is this.takenUs while everything runs synchronously; once a member answers with
   * a promise, other calls may run meanwhile, so the rest of the call keeps its own copy.
   */
  private ask(
    start: number,
    refusedAt: number,
    key: Key | undefined,
    permits: number,
    decisions: Decision[],
    times: Float64Array,
  ): Maybe<ChainDecision> {
    const ls = this.limiters;
    for (let i = start; i < ls.length; i++) {
      if (refusedAt >= 0 && decisions[refusedAt]!.retryAfterMs === Number.POSITIVE_INFINITY) break;
      const l = ls[i]!;
      let d: Decision | PromiseLike<Decision>;
      try {
        d = l.consume(key, permits);
      } catch (error) {
        return this.stop(i, refusedAt, key, permits, decisions, error, times);
      }
      if (isThenable(d)) {
        const own = times === this.takenUs ? copyTimes(times) : times;
        return Promise.resolve(d).then(
          (x) => {
            if (this.hasChains && l instanceof Chain) noteNested(own, i, x);
            decisions.push(x);
            const r = refusedAt < 0 && !x.allowed ? i : refusedAt;
            return this.ask(i + 1, r, key, permits, decisions, own);
          },
          (error) => this.stop(i, refusedAt, key, permits, decisions, error, own),
        );
      }
      if (l instanceof Limiter) times[i] = l.lastDecisionUs;
      else if (this.hasChains && l instanceof Chain) noteNested(times, i, d);
      decisions.push(d);
      if (refusedAt < 0 && !d.allowed) refusedAt = i;
    }
    if (refusedAt < 0) return this.granted(decisions, times);
    return this.refusal(refusedAt, key, permits, decisions, times);
  }

  /** Member `i` threw or rejected: the call fails before a refusal, the refusal stands after one. */
  private stop(
    i: number,
    refusedAt: number,
    key: Key | undefined,
    permits: number,
    decisions: Decision[],
    error: unknown,
    times: Float64Array,
  ): Maybe<ChainDecision> {
    if (refusedAt < 0) return this.fail(i, key, permits, error, times);
    return this.refusal(refusedAt, key, permits, decisions, times);
  }

  /**
   * Gives back what every member asked granted; the overall Decision is that of the member
   * that admits last (the first refusing one on a tie), its `retryAfterMs` the chain's.
   */
  private refusal(
    refusedAt: number,
    key: Key | undefined,
    permits: number,
    decisions: Decision[],
    times: Float64Array,
  ): Maybe<ChainDecision> {
    let last = refusedAt;
    for (let j = refusedAt + 1; j < decisions.length; j++) {
      const x = decisions[j]!;
      if (!x.allowed && x.retryAfterMs > decisions[last]!.retryAfterMs) last = j;
    }
    const result: ChainDecision = { ...decisions[last]!, decisions };
    const undone = this.undoGranted(key, permits, decisions, times);
    // Their figures are as after the give-back.
    for (let j = 0; j < decisions.length; j++) {
      const x = decisions[j]!;
      if (x.allowed) decisions[j] = givenBack(this.limiters[j]!, x, permits);
    }
    return isThenable(undone) ? undone.then(() => result) : result;
  }

  /** undo() of the members of `decisions` that granted (on a refusal, before and after it). */
  private undoGranted(
    key: Key | undefined,
    permits: number,
    decisions: readonly Decision[],
    times: Float64Array,
  ): Maybe<void> {
    const nested = this.hasChains ? nestedTimes.get(times) : undefined;
    return this.each(decisions.length - 1, -1, (l, j) => {
      // A grant with a reason took nothing from the member (whenFull 'allow', a Redis
      // limiter's whenUnavailable): a refund would credit permits it never counted.
      const d = decisions[j]!;
      if (!d.allowed || d.reason !== undefined) return undefined;
      if (l instanceof Limiter) return l.refundTaken(key, permits, times[j]!);
      if (l instanceof Chain) return l.refundTimes(key, permits, nested?.[j]);
      return l.refund(key, permits);
    });
  }

  private fail(
    i: number,
    key: Key | undefined,
    permits: number,
    error: unknown,
    times: Float64Array,
  ): never | Promise<never> {
    const undone = this.undo(i, key, permits, times);
    if (isThenable(undone)) {
      return undone.then(
        () => Promise.reject(error),
        () => Promise.reject(error),
      );
    }
    throw error;
  }

  private granted(decisions: Decision[], times: Float64Array): ChainDecision {
    let remaining = Number.POSITIVE_INFINITY;
    let resetAfterMs = 0;
    let limit = Number.POSITIVE_INFINITY;
    for (const d of decisions) {
      remaining = Math.min(remaining, d.remaining);
      resetAfterMs = Math.max(resetAfterMs, d.resetAfterMs);
      limit = Math.min(limit, d.limit);
    }
    const result: ChainDecision = {
      allowed: true,
      remaining,
      limit,
      retryAfterMs: 0,
      resetAfterMs,
      decisions,
    };
    if (this.reports) reportedTimes.set(result, copyTimes(times));
    return result;
  }

  /** Gives `permits` back to every limiter of the chain. */
  refund(key?: Key, permits = 1): Answer<M, void> {
    this.check(permits);
    return this.each(0, this.limiters.length, (l) => l.refund(key, permits)) as Answer<M, void>;
  }

  /** Gives held permits back to the chain's `Concurrency` members; rate limiters keep theirs. */
  release(key?: Key, permits = 1): Answer<M, void> {
    this.check(permits);
    return this.each(0, this.limiters.length, (l) =>
      l.algorithm === 'Concurrency' || l.algorithm === 'chain'
        ? l.release?.(key, permits)
        : undefined,
    ) as Answer<M, void>;
  }

  /**
   * Calls `f` on members `from` down to (or up to) `to`, exclusive — every one of them, even
   * after a failure — and reports the first failure (thrown, or the promise rejects).
   */
  private each(
    from: number,
    to: number,
    f: (l: ChainMember, i: number) => void | PromiseLike<void>,
  ): Maybe<void> {
    let failure: { error: unknown } | undefined;
    const pending: PromiseLike<void>[] = [];
    const step = to > from ? 1 : -1;
    for (let i = from; i !== to; i += step) {
      try {
        const r = f(this.limiters[i]!, i);
        if (isThenable(r)) pending.push(r);
      } catch (error) {
        failure ??= { error };
      }
    }
    if (pending.length === 0) {
      if (failure) throw failure.error;
      return;
    }
    return Promise.allSettled(pending).then((results) => {
      if (failure) throw failure.error;
      for (const r of results) if (r.status === 'rejected') throw r.reason;
    });
  }

  /**
   * Takes `permits` from every limiter, waiting at each in turn (in its FIFO queue) while
   * holding what the earlier ones granted. If one fails (queue full, abort, timeout, close),
   * the earlier ones' leases are released and their permits refunded, and the promise
   * rejects with that failure. The Lease releases every member's lease once.
   */
  async acquire(key?: Key, permits = 1, options: AcquireOptions = {}): Promise<Lease> {
    this.check(permits);
    const leases: Lease[] = [];
    const times = new Float64Array(this.limiters.length);
    // One deadline for the whole call: each member waits only for what is left of it.
    const { timeoutMs } = acquireOptions('chain', options);
    const deadline = timeoutMs === undefined ? undefined : performance.now() + timeoutMs;
    // Every member is checked before any is asked: a member without acquire() found after
    // others had granted would leave their permits taken.
    this.limiters.forEach((l, i) => {
      if (typeof l.acquire !== 'function') {
        throw typeError(`chain.acquire: limiter ${i} has no acquire() method`);
      }
    });
    for (let i = 0; i < this.limiters.length; i++) {
      const l = this.limiters[i]!;
      try {
        const left =
          deadline === undefined
            ? options
            : { ...options, timeoutMs: Math.max(0, deadline - performance.now()) };
        const lease = await l.acquire!(key, permits, left); // checked above
        if (l instanceof Limiter) times[i] = l.lastDecisionUs;
        else if (this.hasChains && l instanceof Chain) noteNested(times, i, lease);
        leases.push(lease);
      } catch (error) {
        // Each earlier member gives its permits back once: a Concurrency member by its
        // lease (a refund as well would free permits that others hold), the others by a
        // refund (their leases hold nothing; a nested chain's refund reaches all of it).
        const held = leases.filter((_, j) => holdsLease(this.limiters[j]));
        try {
          const r = releaseAll(held);
          // The acquire failure is what the caller sees; a give-back that failed is a warning.
          if (isThenable(r)) r.then(undefined, warnReleaseFailed);
        } catch (releaseError) {
          warnReleaseFailed(releaseError);
        }
        try {
          await this.undo(i, key, permits, times, true, leases);
        } catch {
          // The acquire failure is what the caller needs to see; the undo was attempted.
        }
        throw error;
      }
    }
    const lease = new ChainLease(leases);
    if (this.reports) reportedTimes.set(lease, times);
    return lease;
  }
}

function flattenTimes(c: Chain, times: Float64Array | undefined, out: number[]): void {
  const nested = times === undefined ? undefined : nestedTimes.get(times);
  c.limiters.forEach((l, j) => {
    if (l instanceof Chain) flattenTimes(l, nested?.[j], out);
    else out.push(times !== undefined && l instanceof Limiter ? times[j]! : Number.NaN);
  });
}

class ChainLease implements Lease {
  private held = true;
  constructor(private readonly leases: readonly Lease[]) {}
  /**
   * Releases every member's lease once. A member whose release answers with a promise (a
   * Redis Concurrency) makes this a promise too: it settles when they all have,
   * rejecting with the first failure, so that a release Redis could not take is reported
   * (await it) rather than dropped.
   */
  release(): void | Promise<void> {
    if (!this.held) return;
    this.held = false;
    return releaseAll(this.leases);
  }
  [Symbol.dispose](): void {
    const r = this.release();
    // dispose cannot report a failure: `await lease.release()` to see it.
    if (isThenable(r)) r.then(undefined, warnReleaseFailed);
  }
}

/** Releases each lease; a promise when any release answered with one (see ChainLease). */
function releaseAll(leases: readonly Lease[]): void | Promise<void> {
  let pending: PromiseLike<unknown>[] | undefined;
  let failure: { error: unknown } | undefined;
  for (const lease of leases) {
    try {
      const r: unknown = lease.release();
      if (isThenable(r)) (pending ??= []).push(r);
    } catch (error) {
      failure ??= { error };
    }
  }
  if (pending === undefined) {
    if (failure) throw failure.error;
    return;
  }
  return Promise.allSettled(pending).then((results) => {
    if (failure) throw failure.error;
    for (const r of results) if (r.status === 'rejected') throw r.reason;
  });
}

function warnReleaseFailed(error: unknown): void {
  warnGiveBackFailed('atomic-limiter: chain', 'ATOMIC_LIMITER_RELEASE_FAILED', error);
}

/**
 * A granted Decision of member `l` as after its permits were given back (a nested chain's
 * members too): `remaining` and `resetAfterMs` are the state's after the give-back where the
 * Decision tells it — a bucket's reset less the time those permits take to refill (a leaky
 * bucket admits again once drained), 0 for a key back to its initial state; a window with
 * other permits in it keeps its end, which for a sliding window or log is the latest the
 * give-back can leave it.
 */
function givenBack(l: ChainMember, d: Decision, permits: number): Decision {
  const inner = (d as Partial<ChainDecision>).decisions;
  if (inner !== undefined && l instanceof Chain) {
    const members = l.limiters;
    const decisions = inner.map((x, j) => (x.allowed ? givenBack(members[j]!, x, permits) : x));
    let remaining = Number.POSITIVE_INFINITY;
    let resetAfterMs = 0;
    for (const x of decisions) {
      remaining = Math.min(remaining, x.remaining);
      resetAfterMs = Math.max(resetAfterMs, x.resetAfterMs);
    }
    return { ...d, remaining, resetAfterMs, decisions } as Decision;
  }
  if (l.algorithm === 'LeakyBucket') {
    // Admits only once drained, and then its whole capacity.
    const rate = (l as { ratePerSecond?: unknown }).ratePerSecond;
    if (typeof rate !== 'number' || !(rate > 0)) return d;
    const resetAfterMs = Math.max(0, d.resetAfterMs - (permits * 1000) / rate);
    return { ...d, remaining: resetAfterMs === 0 ? d.limit : d.remaining, resetAfterMs };
  }
  const remaining = Math.min(d.limit, d.remaining + permits);
  let resetAfterMs = d.resetAfterMs;
  if (remaining >= d.limit) resetAfterMs = 0;
  else if (l.algorithm === 'TokenBucket') {
    const rate = (l as { refillPerSecond?: unknown }).refillPerSecond;
    if (typeof rate === 'number' && rate > 0) {
      resetAfterMs = Math.max(0, d.resetAfterMs - (permits * 1000) / rate);
    }
  }
  return { ...d, remaining, resetAfterMs };
}

/** Whether a member's lease gives its permits back (Concurrency, here or elsewhere). */
function holdsLease(l: unknown): boolean {
  return (l as { algorithm?: unknown }).algorithm === 'Concurrency';
}

function isMember(value: unknown): value is ChainMember {
  const v = value as Partial<ChainMember> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.consume === 'function' &&
    typeof v.refund === 'function' &&
    (v.limit === undefined || (typeof v.limit === 'number' && v.limit >= 1))
  );
}

/**
 * Composes limiters all-or-nothing: `chain(perSecond, perDay).tryAcquire(ip)`. Accepts
 * in-memory limiters, cluster clients, Redis limiters and chains.
 */
export function chain<L extends ChainMember[]>(...limiters: L): Chain<L[number]> {
  if (limiters.length === 0) throw typeError('chain: give at least one limiter');
  limiters.forEach((l, i) => {
    if (!isMember(l)) {
      throw typeError(
        `chain: argument ${i} must be a limiter (with consume and refund), got ${show(l)}`,
      );
    }
  });
  return new Chain(limiters);
}
