import type { Key } from '../limiter.js';
import { rangeError, show, typeError } from '../validate.js';
import {
  flattenLimiters,
  type HeaderFormat,
  HeaderWriter,
  isChain,
  type LimiterFace,
  policyNamesOption,
} from './headers.js';
import type { HttpLimiter } from './options.js';

/**
 * What the middleware knows of one limiter: its headers (policies computed once), whether
 * it holds permits, how its permits are given back. One for a fixed `limiter`; one per
 * limiter a `limiter: (req) => …` function chooses, made when it is first chosen.
 */
export class Plan {
  /** tookFrom()'s answer for a limiter that is not a chain: no array made per request. */
  readonly self: readonly LimiterFace[];
  /** Known once every limiter's algorithm is (a cluster client learns it from its first answer). */
  holds: boolean | undefined;
  /** The limiter when it is an in-memory one and `refundWhen` is set (see Engine.decide). */
  readonly inMemory: InMemory | undefined;
  /** Writes `Retry-After` alone: made when a wait first times out. */
  retryAfterOnly: HeaderWriter | undefined;
  /** Whether a waiter may be evicted by a newer one (a member with queueOrder 'newest-first'). */
  readonly evicts: boolean;

  constructor(
    readonly limiter: HttpLimiter,
    readonly headers: HeaderWriter,
    refundWhen: boolean,
  ) {
    this.self = [limiter as LimiterFace];
    this.holds = holdsPermits(limiter);
    this.evicts = flattenLimiters(limiter).some((l) => l.queueOrder === 'newest-first');
    this.inMemory = refundWhen && isInMemory(limiter) ? limiter : undefined;
    if (refundWhen && isChainOf(limiter)) limiter.reportTakenTimes();
  }

  /** The largest permits a request may ask for, where the limiter tells it (as it is now). */
  get maxPermits(): number {
    return maxPermitsOf(this.limiter);
  }

  /** Whether the limiter holds permits until released (Concurrency, or a chain with one). */
  holding(): boolean {
    if (this.holds !== undefined) return this.holds;
    const h = holdsPermits(this.limiter);
    if (h !== undefined) this.holds = h;
    return h === true;
  }
}

/** What makePlan() checks a limiter against: the options that depend on it. */
export interface PlanNeeds {
  readonly formats: readonly HeaderFormat[];
  /** A fixed permits count (checked against the limiter's limit), or undefined. */
  readonly permits: number | undefined;
  readonly wait: boolean;
  readonly refundWhen: boolean;
}

/**
 * Checks `limiter` (given as option "limiter", or returned by it: `how` says which) and
 * makes its Plan; a TypeError or RangeError naming the option otherwise.
 */
export function makePlan(
  owner: string,
  limiter: unknown,
  needs: PlanNeeds,
  names: unknown,
  how = '',
): Plan {
  const l = limiter as HttpLimiter;
  if (typeof l !== 'object' || l === null || typeof l.consume !== 'function') {
    throw typeError(
      `${owner}: option "limiter" must ${how === '' ? 'be' : `${how} return`} a limiter (an object with consume(), e.g. a TokenBucket, a connectCluster client, a Redis limiter or a chain()), got ${show(limiter)}`,
    );
  }
  const maxPermits = maxPermitsOf(l);
  if (needs.permits !== undefined && needs.permits > maxPermits) {
    throw rangeError(
      `${owner}: option "permits" must be an integer from 1 to ${maxPermits} (the limiter's limit), got ${needs.permits}`,
    );
  }
  if (needs.wait) {
    if (typeof l.acquire !== 'function') {
      throw typeError(`${owner}: option "wait" needs a limiter with acquire()`);
    }
    // A chain waits at each member in turn: one that cannot wait refuses every wait.
    const members = flattenLimiters(l) as HttpLimiter[];
    const which = (i: number) => (isChain(l) ? `limiter ${i} of the chain` : 'this one');
    members.forEach((m, i) => {
      if (typeof m.acquire !== 'function') {
        throw typeError(
          `${owner}: option "wait" needs a limiter with acquire() (${which(i)} has none)`,
        );
      }
      if (m.queueLimit === 0) {
        throw rangeError(
          `${owner}: option "wait" needs a limiter whose queueLimit is above 0 (${which(i)} never queues)`,
        );
      }
    });
  }
  if (needs.refundWhen && typeof l.refund !== 'function') {
    throw typeError(`${owner}: option "refundWhen" needs a limiter with refund()`);
  }
  const policyNames = policyNamesOption(owner, names, flattenLimiters(l).length);
  return new Plan(l, new HeaderWriter(l, needs.formats, policyNames), needs.refundWhen);
}

function maxPermitsOf(l: HttpLimiter): number {
  return typeof l.limit === 'number' && l.limit >= 1 ? l.limit : 2 ** 31 - 1;
}

/** Whether the limiter holds permits until released (Concurrency, or a chain with one). */
function holdsPermits(limiter: unknown): boolean | undefined {
  let unknown = false;
  for (const l of flattenLimiters(limiter) as LimiterFace[]) {
    if (l.algorithm === 'Concurrency') return true;
    if (typeof l.algorithm !== 'string') unknown = true;
  }
  return unknown ? undefined : false;
}

/**
 * An in-memory limiter, by its methods: this module may be a copy of the package's other
 * than the limiter's (the http entry point is bundled on its own), so no instanceof.
 * `refundTaken` gives back to the window of `takenUs` (its clock; NaN: now).
 */
export interface InMemory {
  readonly lastDecisionUs: number;
  refundTaken(key: Key, permits: number, takenUs: number): void;
}

export function isInMemory(l: unknown): l is InMemory {
  return (
    typeof (l as InMemory).refundTaken === 'function' &&
    typeof (l as InMemory).lastDecisionUs === 'number'
  );
}

/** A chain(), able to say when its members took a granted call's permits. */
export interface ChainOf {
  readonly limiters: readonly unknown[];
  reportTakenTimes(): void;
  takenTimes(decision: object): number[];
}

export function isChainOf(l: unknown): l is ChainOf {
  return isChain(l) && typeof (l as Partial<ChainOf>).takenTimes === 'function';
}
