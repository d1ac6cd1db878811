/**
 * A worker process's view of one limiter served by the primary: the limiter's methods,
 * each returning a promise, its description (algorithm, limit, …) once the primary told
 * it, and optional permit blocks spent locally.
 */
import { performance } from 'node:perf_hooks';
import { ClusterTimeoutError, ClusterUnavailableError } from '../errors.js';
import type { Key } from '../limiter.js';
import type { AlgorithmName, Decision, Lease, Stats } from '../options.js';
import {
  type BlockOptions,
  type BlockSettings,
  blockSettings,
  grownLease,
  leaseAheadDue,
} from '../permit-blocks.js';
import {
  acquireOptions,
  checkKey,
  checkOptionsObject,
  integerOption,
  isPermits,
  permitsError,
  positiveNumberOption,
  typeError,
} from '../validate.js';
import type { Channel } from './channel.js';
import type { Caller, Check } from './pending.js';
import {
  CONSUME,
  type Description,
  GIVE,
  type Grant,
  REFUND,
  RELEASE,
  RESET,
  STATS,
  TAKE,
  TRY,
} from './protocol.js';

/**
 * Options of `connectCluster`. The permit-block options (`block`, `blockTtlMs`,
 * `maxBlock`, `leaseAhead`) mean what they mean for Redis fleet mode, with the same
 * defaults (permit-blocks.ts): `tryAcquire`, `consume` and `acquire` take up to `block`
 * permits per trip to the primary and spend them in this worker, so most calls cost no IPC.
 * A FixedWindow or SlidingWindow block is spent only in the window (segment) its permits
 * were taken in.
 */
export interface ConnectOptions extends BlockOptions {
  /** Longest wait for the primary's answer, in ms (default 5000); then ClusterTimeoutError. */
  timeoutMs?: number;
  /** Calls in flight at most in this process (default 10 000); past it calls reject at once. */
  maxPending?: number;
}

/** connectCluster's options, checked. */
export interface ConnectSettings extends BlockSettings {
  readonly timeoutMs: number;
  readonly maxPending: number;
}

/** The primary's limiter, seen from a worker process: the same methods, each a promise. */
export interface ClusterLimiter {
  /** The name the primary serves the limiter under (`serveCluster(limiter, { name })`). */
  readonly name: string;
  /** The served limiter's algorithm ('TokenBucket', …); undefined until the primary told it. */
  readonly algorithm: AlgorithmName | undefined;
  /**
   * The served limiter's limit; undefined until known. This and the figures below follow a
   * reconfigure() of the primary's limiter: the primary announces the new ones to every
   * worker, before any answer decided under them.
   */
  readonly limit: number | undefined;
  /** FixedWindow, SlidingWindow, SlidingLog: the window; undefined otherwise or until known. */
  readonly windowMs: number | undefined;
  /** TokenBucket, LeakyBucket: the capacity; undefined otherwise or until known. */
  readonly capacity: number | undefined;
  /** TokenBucket: the refill rate; undefined otherwise or until known. */
  readonly refillPerSecond: number | undefined;
  /** LeakyBucket: the leak rate; undefined otherwise or until known. */
  readonly ratePerSecond: number | undefined;
  /**
   * Resolves with this client once the primary has described the limiter (the properties
   * above are set; the type says so, e.g. for `chain()`). Rejects with
   * ClusterUnavailableError when the primary does not serve this name or the IPC channel
   * closed first, and ClusterTimeoutError when no primary answers within `timeoutMs`.
   */
  ready(): Promise<DescribedClusterLimiter>;
  /** Resolves true when the primary's limiter granted `permits` on `key`. */
  tryAcquire(key?: Key, permits?: number): Promise<boolean>;
  /** Resolves with the primary's Decision (allowed, remaining, retryAfterMs, …). */
  consume(key?: Key, permits?: number): Promise<Decision>;
  /** Waits in the primary's queue until `permits` are granted; rejects on abort or timeout. */
  acquire(
    key?: Key,
    permits?: number,
    options?: { signal?: AbortSignal; timeoutMs?: number },
  ): Promise<Lease>;
  /** Concurrency: gives held permits back. */
  release(key?: Key, permits?: number): Promise<void>;
  /** Gives back permits a decision took (a request that should not count). */
  refund(key?: Key, permits?: number): Promise<void>;
  /** The key's counters and the permits available now, at the primary. */
  stats(key?: Key): Promise<Stats>;
  /** Puts `key` back in its initial state at the primary and zeroes its counters. */
  reset(key?: Key): Promise<void>;
  /**
   * Rejects this client's calls in flight, gives its unspent blocks back, refuses new calls.
   * None of its calls runs at the primary afterwards: those not sent yet are not sent (with
   * many calls in flight, some of this tick's may have left already), and its acquire()
   * calls waiting there are aborted. What it gives back and aborts is sent before it
   * returns: the process may exit or disconnect right after it.
   */
  close(): void;
}

/** A cluster client whose limiter the primary has described (after `ready()`). */
export interface DescribedClusterLimiter extends ClusterLimiter {
  /** The served limiter's algorithm. */
  readonly algorithm: AlgorithmName;
  /** The served limiter's limit: the most permits one call may ask for. */
  readonly limit: number;
}

interface Block {
  left: number;
  /** performance.now() after which the block is given back instead of spent. */
  expires: number;
  /**
   * performance.now() from which its permits no longer count where they were counted (a
   * window's end): none is spent, and none given back, from then on. Infinity: never.
   */
  countsUntil: number;
  /** When the primary took its permits, and until when they count there (its clock, µs). */
  takenUs: number;
  untilUs: number;
  /** When the key would be fresh again, as the primary said at the last grant (ms). */
  resetAt: number;
  /** False after a background top-up was refused: no more until a call needs one. */
  topUp: boolean;
}

/** A call waiting for a block request in flight. */
interface Waiter {
  permits: number;
  done: (d: Decision) => void;
  fail: (e: unknown) => void;
}

/** A block request in flight: at least `min` permits were asked for. */
interface Fetch {
  min: number;
  waiters: Waiter[];
  /** A call found the block dry while this was out: the key's leases grow (maxBlock). */
  starved: boolean;
  /**
   * performance.now() when the request was made: before the primary took its permits (−1:
   * not made yet).
   */
  sentAt: number;
  /** Sent, then reset() of its key: the primary took its permits before the reset. */
  stale: boolean;
}

const TRUE = Promise.resolve(true);

function newBlock(): Block {
  return {
    left: 0,
    expires: 0,
    countsUntil: 0,
    takenUs: 0,
    untilUs: Number.POSITIVE_INFINITY,
    resetAt: 0,
    topUp: true,
  };
}
const MAX_MS = 2 ** 31 - 1;
const NO_OP_LEASE: Lease = Object.freeze({
  release(): void {},
  [Symbol.dispose](): void {},
});

/**
 * The permits check, made in the worker before sending, with one difference: a whole count
 * above the limit last described goes to the primary, whose limit may have been raised by a
 * reconfigure() since (its answer brings the new figures; it refuses a count above its own
 * limit with the same RangeError).
 */
function checkCount(owner: string, permits: unknown, limit: number): void {
  if (!isPermits(permits, limit) && !(Number.isInteger(permits) && (permits as number) > limit)) {
    throw permitsError(owner, permits, limit);
  }
}

/** Checks connectCluster's options (before anything else: they are the caller's bug). */
export function connectOptions(options: unknown): ConnectSettings {
  const owner = 'connectCluster';
  const opts = checkOptionsObject(owner, options, [
    'timeoutMs',
    'maxPending',
    'block',
    'blockTtlMs',
    'maxBlock',
    'leaseAhead',
  ]);
  return {
    timeoutMs:
      opts.timeoutMs === undefined
        ? 5000
        : positiveNumberOption(owner, 'timeoutMs', opts.timeoutMs, 1, MAX_MS),
    maxPending: integerOption(owner, 'maxPending', opts.maxPending, 1, MAX_MS, 10_000),
    ...blockSettings(owner, opts, 'permit blocks'),
  };
}

export class Client implements ClusterLimiter, Caller {
  readonly timeoutMs: number;
  readonly maxPending: number;
  /** Permits per lease (0: no blocks), the largest lease, and whether leases go ahead. */
  private readonly block: number;
  private readonly maxBlock: number;
  private readonly leaseAhead: boolean;
  private readonly blockTtlMs: number;
  private readonly blocks = new Map<Key | undefined, Block>();
  /** Lease sizes grown past `block` (maxBlock), by key, until the key's block ages out. */
  private readonly grown = new Map<Key | undefined, number>();
  /** A block request in flight per key: later calls wait for it instead of asking too. */
  private readonly fetching = new Map<Key | undefined, Fetch>();
  private sweeper: ReturnType<typeof setInterval> | undefined;
  /** Block calls made before the primary described the limiter, waiting for it (wait()). */
  private readonly undescribed = new Set<Waiter>();
  private closed = false;

  // Checks run before a call is sent, once the description is known: the same errors,
  // with the same messages, as the in-memory limiter's.
  private readonly checkCall: Check = (d, key, permits) => {
    this.checkBlock(d);
    checkCount(d.algorithm, permits, d.limit);
    checkKey(d.algorithm, key);
  };
  private readonly checkRelease: Check = (d, key, permits) => {
    if (d.algorithm !== 'Concurrency') {
      throw typeError(
        `${d.algorithm}: release() is for Concurrency limiters; rate limiters have refund()`,
      );
    }
    checkCount('Concurrency.release', permits, d.limit);
    checkKey(d.algorithm, key);
  };
  private readonly checkRefund: Check = (d, key, permits) => {
    checkCount(`${d.algorithm}.refund`, permits, d.limit);
    checkKey(d.algorithm, key);
  };
  private readonly checkKeyOnly: Check = (d, key) => checkKey(d.algorithm, key);

  constructor(
    readonly name: string,
    private readonly channel: Channel,
    options: ConnectSettings,
  ) {
    this.timeoutMs = options.timeoutMs;
    this.maxPending = options.maxPending;
    this.block = options.block;
    this.maxBlock = options.maxBlock;
    this.leaseAhead = options.leaseAhead;
    this.blockTtlMs = options.blockTtlMs;
  }

  private get description(): Description | undefined {
    return this.channel.describe(this.name);
  }
  get algorithm(): AlgorithmName | undefined {
    return this.description?.algorithm;
  }
  get limit(): number | undefined {
    return this.description?.limit;
  }
  get windowMs(): number | undefined {
    return this.description?.windowMs;
  }
  get capacity(): number | undefined {
    return this.description?.capacity;
  }
  get refillPerSecond(): number | undefined {
    return this.description?.refillPerSecond;
  }
  get ratePerSecond(): number | undefined {
    return this.description?.ratePerSecond;
  }
  /**
   * @internal The served limiter's options version, as last described: changes when the
   * primary's limiter is reconfigured (HTTP's policy fields are read again then).
   */
  get optionsVersion(): number | undefined {
    return this.description?.version;
  }
  get concurrency(): boolean {
    return this.description?.algorithm === 'Concurrency';
  }

  async ready(): Promise<DescribedClusterLimiter> {
    if (this.description) return this as DescribedClusterLimiter;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new ClusterTimeoutError(
              `${this.name}: no answer from the cluster primary within ${this.timeoutMs} ms`,
            ),
          ),
        this.timeoutMs,
      );
    });
    try {
      await Promise.race([this.channel.whenReady(), timeout]);
    } finally {
      clearTimeout(timer);
    }
    // The primary has answered; its list decides (stats() asks it, in case a server was
    // added since: a name it does not serve rejects with ClusterUnavailableError).
    if (!this.description) await this.stats();
    return this as DescribedClusterLimiter;
  }

  private checkBlock(d: Description): void {
    if (this.block > 0 && d.algorithm === 'Concurrency') {
      throw typeError(
        `connectCluster(${JSON.stringify(this.name)}): option "block" is for rate limiters; this name serves a Concurrency limiter`,
      );
    }
  }

  private refusedWhenClosed(): Promise<never> {
    return Promise.reject(new ClusterUnavailableError(`${this.name}: the client was closed`));
  }

  // ---- permit blocks ----------------------------------------------------------------

  /** Spends `permits` from the key's block, if it has them and is fresh. */
  private spend(key: Key | undefined, permits: number): Block | undefined {
    const b = this.blocks.get(key);
    // Bad permits (0, 1.5, NaN, '1') go the slow way, whose check refuses them.
    if (b === undefined || !isPermits(permits, b.left)) {
      return undefined;
    }
    const now = performance.now();
    if (b.expires <= now || b.countsUntil <= now) {
      this.giveBack(key, b);
      return undefined;
    }
    b.left -= permits;
    // leaseAhead: a quarter left, the next lease is asked for in the background, so the
    // next calls need not wait (permit-blocks.ts).
    if (
      this.leaseAhead &&
      b.topUp &&
      leaseAheadDue(b.left, this.leaseSize(key), false) &&
      !this.fetching.has(key)
    ) {
      this.topUp(key);
    }
    return b;
  }

  /** The permits a lease of `key` asks for: `block`, or more for a key spent fast. */
  private leaseSize(key: Key | undefined): number {
    return this.maxBlock > this.block ? (this.grown.get(key) ?? this.block) : this.block;
  }

  /**
   * Tops the key's block up to a lease's size. The size is taken when the request leaves
   * (after the calls already queued in this tick): calls that spend in a burst get a
   * full lease per round trip, and the block never holds more than one.
   */
  private topUp(key: Key | undefined): void {
    const f: Fetch = { min: 1, waiters: [], starved: false, sentAt: -1, stale: false };
    this.fetching.set(key, f);
    queueMicrotask(() => {
      const max = this.leaseSize(key) - (this.blocks.get(key)?.left ?? 0);
      if (this.closed || max < 1) {
        if (this.fetching.get(key) === f) this.fetching.delete(key);
        return;
      }
      this.request(key, f, max);
    });
  }

  /**
   * A decision the block could not make at once: joins the key's request in flight (the
   * permits it brings are handed out in arrival order), or asks the primary itself.
   */
  private wait(
    key: Key | undefined,
    permits: number,
    done: (d: Decision) => void,
    fail: (e: unknown) => void,
  ): void {
    const d = this.description;
    if (!d) {
      // Not described yet: the call waits for the description, then leases or joins the
      // key's lease as any other. Asking alone, each of a tick's first calls would lease a
      // whole block (it cannot join a lease unchecked: see below).
      const early: Waiter = { permits, done, fail };
      this.undescribed.add(early);
      this.ready().then(
        () => {
          if (this.undescribed.delete(early)) this.wait(key, permits, done, fail);
        },
        (error) => {
          if (this.undescribed.delete(early)) fail(error);
        },
      );
      return;
    }
    // Checked before joining: a bad call must not fail the calls it would wait with.
    try {
      this.checkCall(d, key, permits);
    } catch (error) {
      fail(error);
      return;
    }
    const waiter: Waiter = { permits, done, fail };
    const inFlight = this.fetching.get(key);
    if (inFlight) {
      // Dry with a lease out: the key is spent faster than a round trip brings permits.
      inFlight.starved = true;
      inFlight.waiters.push(waiter);
      return;
    }
    const left = this.blocks.get(key)?.left ?? 0;
    const size = this.leaseSize(key);
    this.fetch(key, permits, Math.max(Math.max(size, permits) - left, permits), waiter);
  }

  /**
   * Asks the primary for between `min` and `max` permits for the key's block; `first` is
   * the call that asked (it is served first), others may join while it is in flight.
   */
  private fetch(key: Key | undefined, min: number, max: number, first: Waiter): void {
    const f: Fetch = { min, waiters: [first], starved: false, sentAt: -1, stale: false };
    this.fetching.set(key, f);
    this.request(key, f, max);
  }

  private request(key: Key | undefined, f: Fetch, max: number): void {
    f.sentAt = performance.now();
    (this.channel.call(this, TAKE, key, f.min, max, this.checkCall) as Promise<Grant>).then(
      (grant) => this.fetched(key, f, grant),
      (error) => {
        if (this.fetching.get(key) === f) this.fetching.delete(key);
        for (const w of f.waiters) w.fail(error);
      },
    );
  }

  private fetched(key: Key | undefined, f: Fetch, grant: Grant): void {
    if (this.fetching.get(key) === f) this.fetching.delete(key);
    // Taken before a reset of the key, which wiped them: spent or given back now, they
    // would count twice in the fresh key's allowance. (Its waiters left it at the reset.)
    if (f.stale) return;
    let b = this.blocks.get(key);
    if (this.closed) {
      // The waiters were rejected by close(); what came goes back.
      if (grant.granted > 0) this.channel.giveBack(this, GIVE, key, grant.granted, grant.takenUs);
      return;
    }
    if (f.starved && this.maxBlock > this.block) {
      this.grown.set(key, grownLease(this.leaseSize(key), this.maxBlock));
    }
    if (grant.granted > 0) {
      const now = performance.now();
      if (!b) {
        b = newBlock();
        this.blocks.set(key, b);
        this.sweep();
      }
      // Permits the primary took in a later window than the block's: the block's own have
      // stopped counting (its window ended), so none of them may be spent now, nor given
      // back. Those of one window share its taking time and the earlier deadline.
      if (b.left > 0 && b.untilUs !== grant.untilUs) b.left = 0;
      if (b.left === 0) {
        b.takenUs = grant.takenUs;
        b.untilUs = grant.untilUs;
        // From when the request left, not when the answer came: never past the window.
        b.countsUntil = f.sentAt + (grant.untilUs - grant.takenUs) / 1000;
      }
      b.left += grant.granted;
      b.expires = now + this.blockTtlMs;
      b.resetAt = now + grant.decision.resetAfterMs;
      b.topUp = true;
    } else if (b) b.topUp = false;
    for (const w of f.waiters) {
      const spent = this.spend(key, w.permits);
      if (spent) w.done(this.localDecision(spent));
      else if (grant.granted === 0 && w.permits === f.min) {
        // The refusal is the primary's Decision for f.min permits: these. (Its retryAfterMs
        // is wrong for more, so those ask with their own count below.) What this worker
        // could still spend is the primary's remaining and its own block's.
        const own = this.blocks.get(key)?.left ?? 0;
        w.done({ ...grant.decision, remaining: grant.decision.remaining + own });
      } else this.wait(key, w.permits, w.done, w.fail); // ask again, for w.permits
    }
  }

  /** A grant from the block: `remaining` is what this worker may still spend locally. */
  private localDecision(b: Block): Decision {
    return {
      allowed: true,
      remaining: b.left,
      limit: this.limit as number,
      retryAfterMs: 0,
      resetAfterMs: Math.max(0, b.resetAt - performance.now()),
    };
  }

  /** Returns the block's unspent permits to where they were taken, unless they stopped counting. */
  private giveBack(key: Key | undefined, b: Block): void {
    if (this.blocks.get(key) === b) this.blocks.delete(key);
    const now = performance.now();
    // Aged out (the key cooled) or its window ended: its leases go back to one block.
    this.grown.delete(key);
    if (b.left > 0 && now < b.countsUntil) {
      this.channel.giveBack(this, GIVE, key, b.left, b.takenUs);
    }
    b.left = 0;
  }

  /** Gives unspent blocks back once they expire (one unref'd timer per client). */
  private sweep(): void {
    if (this.sweeper) return;
    this.sweeper = setInterval(
      () => {
        const now = performance.now();
        for (const [key, b] of this.blocks) {
          if (b.expires <= now || b.countsUntil <= now) this.giveBack(key, b);
        }
        if (this.blocks.size === 0 && this.sweeper) {
          clearInterval(this.sweeper);
          this.sweeper = undefined;
        }
      },
      Math.max(1, this.blockTtlMs / 2),
    );
    this.sweeper.unref();
  }

  // ---- the limiter's methods ----------------------------------------------------------

  tryAcquire(key?: Key, permits = 1): Promise<boolean> {
    if (this.closed) return this.refusedWhenClosed();
    if (this.block > 0) {
      if (this.spend(key, permits)) return TRUE;
      return new Promise((resolve, reject) =>
        this.wait(key, permits, (d) => resolve(d.allowed), reject),
      );
    }
    return this.channel.call(this, TRY, key, permits, 0, this.checkCall) as Promise<boolean>;
  }

  consume(key?: Key, permits = 1): Promise<Decision> {
    if (this.closed) return this.refusedWhenClosed();
    if (this.block > 0) {
      const b = this.spend(key, permits);
      if (b) return Promise.resolve(this.localDecision(b));
      return new Promise((resolve, reject) => this.wait(key, permits, resolve, reject));
    }
    return this.channel.call(this, CONSUME, key, permits, 0, this.checkCall) as Promise<Decision>;
  }

  release(key?: Key, permits = 1): Promise<void> {
    if (this.closed) return this.refusedWhenClosed();
    return this.channel.call(this, RELEASE, key, permits, 0, this.checkRelease) as Promise<void>;
  }

  refund(key?: Key, permits = 1): Promise<void> {
    if (this.closed) return this.refusedWhenClosed();
    return this.channel.call(this, REFUND, key, permits, 0, this.checkRefund) as Promise<void>;
  }

  stats(key?: Key): Promise<Stats> {
    if (this.closed) return this.refusedWhenClosed();
    return this.channel.call(this, STATS, key, 1, 0, this.checkKeyOnly) as Promise<Stats>;
  }

  reset(key?: Key): Promise<void> {
    if (this.closed) return this.refusedWhenClosed();
    const done = this.channel.call(this, RESET, key, 1, 0, this.checkKeyOnly) as Promise<void>;
    this.forgetBlock(key);
    return done;
  }

  /**
   * reset() of `key`: the key starts afresh at the primary, so the permits of its block,
   * counted before the reset, go too — not given back, which would credit them to the
   * fresh key. A request already sent lands in nothing; the calls waiting for it ask
   * again, after the reset (their requests leave behind it, in call order). A top-up not
   * sent yet leaves behind the reset too, and stays.
   */
  private forgetBlock(key: Key | undefined): void {
    const b = this.blocks.get(key);
    if (b !== undefined) {
      this.blocks.delete(key);
      b.left = 0;
    }
    const f = this.fetching.get(key);
    if (f === undefined || f.sentAt < 0) return;
    f.stale = true;
    this.fetching.delete(key);
    for (const w of f.waiters) this.wait(key, w.permits, w.done, w.fail);
    f.waiters = [];
  }

  async acquire(
    key?: Key,
    permits = 1,
    options: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<Lease> {
    if (this.closed) return this.refusedWhenClosed();
    const check: Check = (d) => {
      acquireOptions(d.algorithm, options);
      this.checkCall(d, key, permits);
    };
    const d = this.description;
    if (d) check(d, key, permits); // throws into the returned promise (an async function)
    const { signal, timeoutMs } = options;
    if (signal?.aborted) throw signal.reason;
    if (this.block > 0) {
      // Through the block first; wait at the primary only when it has nothing now.
      if (this.spend(key, permits)) return NO_OP_LEASE;
      const decision = await new Promise<Decision>((resolve, reject) =>
        this.wait(key, permits, resolve, reject),
      );
      if (decision.allowed) return NO_OP_LEASE;
      if (signal?.aborted) throw signal.reason;
    }
    const ch = this.channel;
    const made = ch.acquire(this, key, permits, timeoutMs, check);
    const onAbort = () => {
      ch.abort(this.name, made.id);
      ch.settleAcquire(made.id, signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const leaseId = (await made.promise) as number;
      if (!this.concurrency) return NO_OP_LEASE;
      let held = true;
      const release = () => {
        if (!held) return;
        held = false;
        ch.drop(this.name, leaseId);
      };
      return { release, [Symbol.dispose]: release };
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Rejects this client's calls in flight, gives its unspent blocks back, refuses new calls. */
  close(): void {
    if (this.closed) return;
    for (const [key, b] of this.blocks) this.giveBack(key, b);
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
    this.closed = true;
    const closed = new ClusterUnavailableError(`${this.name}: the client was closed`);
    for (const f of this.fetching.values()) for (const w of f.waiters) w.fail(closed);
    for (const w of this.undescribed) w.fail(closed);
    this.undescribed.clear();
    this.channel.closeCaller(
      this,
      new ClusterUnavailableError(`${this.name}: the client was closed`),
    );
  }
}
