import { ManualClock } from '../clock.js';
import type { Key } from '../limiter.js';
import type { AcquireOptions, AlgorithmName, Decision, Lease } from '../options.js';
import { blockSettings } from '../permit-blocks.js';
import { checkOptionsObject, integerOption, rangeError, show, typeError } from '../validate.js';
import { type Adapter, adapt } from './client.js';
import type { BlocksHandle } from './fleet/blocks.js';

/*
 * The options every Redis limiter takes, how they are read and checked (before any Redis
 * call), and what a limiter's handle carries to another thread.
 */

export type { AlgorithmName };

/** A limiter that decides in Redis's place while Redis cannot be reached. */
export interface LocalLimiter {
  /** Decides in Redis's place. */
  consume(key?: Key, permits?: number): Decision | PromiseLike<Decision>;
  /** Waits in Redis's place (needed for the Redis limiter's `acquire()`). */
  acquire?(key?: Key, permits?: number, options?: AcquireOptions): Lease | PromiseLike<Lease>;
}

/** What a call does while Redis cannot be reached: reject, admit, refuse, or ask a local limiter. */
export type WhenUnavailable = 'throw' | 'allow' | 'deny' | LocalLimiter;

/** Options every Redis limiter takes. */
export interface RedisOptions {
  /** An ioredis `Redis` or `Cluster`, or a node-redis client or cluster (v5, v6), connected. */
  redis: unknown;
  /** Namespace of this limiter's keys (default 'atomic-limiter'); no `{` or `}`. */
  prefix?: string;
  /** Longest wait for Redis per call in ms, 1 to 2^31−1 (default 1000). */
  timeoutMs?: number;
  /** What a call does when Redis cannot answer in time (default 'throw'). */
  whenUnavailable?: WhenUnavailable;
  /** Permits that may wait per key in `acquire()` (default 0: never wait). */
  queueLimit?: number;
  /** A ManualClock (tests): its time goes to the scripts instead of Redis TIME. */
  clock?: ManualClock;
  /**
   * Fleet mode: permits leased per Redis round trip into this process's shared memory,
   * 1 to the limit (default: none, every decision asks Redis). Not for Concurrency.
   */
  block?: number;
  /**
   * Fleet mode: how long a leased block may be spent before it goes back, ms (default 1000);
   * only with `block`.
   */
  blockTtlMs?: number;
  /** Fleet mode: keys with a block at once in this process (default 4096); only with `block`. */
  blockKeys?: number;
  /**
   * Fleet mode: the largest lease, `block` to the limit (default `block`: every lease is one
   * block). A key spent faster than a round trip brings permits gets leases doubling up to
   * this (back to one block once it cools), for more decisions per round trip at the price
   * of more permits held unspent (README, "Fleet mode"). Not for LeakyBucket.
   */
  maxBlock?: number;
  /**
   * Fleet mode: whether to lease the next block in the background as one runs low (default
   * false). False: a block is leased only when one is empty, and a process holds at most
   * `block − 1` of a key (`maxBlock − 1` when leases grow): the accuracy `block` states.
   * True: a busy key's threads need not wait for a round trip each time a block runs out,
   * and a process may hold up to `2 × L + L / 4` of a hot key (README, "Fleet mode").
   * Only with `block`.
   */
  leaseAhead?: boolean;
  /**
   * How often, at most, the limiter reads its options record for another process's
   * `reconfigure()`, ms on its clock (default 1000; 0: before every call).
   */
  configRefreshMs?: number;
}

/** Internal: the shared blocks an attach()ed limiter opens (a symbol: not an option name). */
export const BLOCKS = Symbol('atomic-limiter/redis blocks');

export const REDIS_OPTIONS = [
  'redis',
  'prefix',
  'timeoutMs',
  'whenUnavailable',
  'queueLimit',
  'clock',
  'block',
  'blockTtlMs',
  'blockKeys',
  'maxBlock',
  'leaseAhead',
  'configRefreshMs',
] as const;

export interface RedisCommon {
  readonly adapter: Adapter;
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly whenUnavailable: WhenUnavailable;
  readonly queueLimit: number;
  readonly clock: ManualClock | undefined;
  /** Fleet mode: permits per block (0: off), checked against the limit by the subclass. */
  readonly block: number;
  /** Fleet mode: the largest lease (≥ block; = block: leases never grow). */
  readonly maxBlock: number;
  readonly blockTtlMs: number;
  readonly blockKeys: number;
  /** Fleet mode: whether blocks are leased ahead (see RedisOptions.leaseAhead). */
  readonly leaseAhead: boolean;
  /** Longest time between two reads of the options record, ms (0: every call). */
  readonly configRefreshMs: number;
  /** The blocks to open (attach()), or undefined: new ones. */
  readonly blocks: BlocksHandle | undefined;
  /** The options as given (the handle carries them to other threads). */
  readonly options: Record<string, unknown>;
}

/** Reads and checks the common options; `queue` gives the queueLimit default and maximum. */
export function readRedisCommon(
  owner: string,
  options: unknown,
  own: readonly string[],
  queue: { fallback: number; max: number } = { fallback: 0, max: 2 ** 31 - 1 },
): { opts: Record<string, unknown>; common: RedisCommon } {
  const opts = checkOptionsObject(owner, options, [...own, ...REDIS_OPTIONS]);
  const adapter = adapt(owner, opts.redis);
  const prefix = opts.prefix ?? 'atomic-limiter';
  if (typeof prefix !== 'string') {
    throw typeError(`${owner}: option "prefix" must be a string, got ${show(prefix)}`);
  }
  if (prefix === '' || /[{}]/.test(prefix) || prefix.length > 256) {
    throw rangeError(
      `${owner}: option "prefix" must be 1 to 256 characters without "{" or "}" (they would choose the hash slot), got ${show(prefix)}`,
    );
  }
  const timeoutMs = integerOption(owner, 'timeoutMs', opts.timeoutMs, 1, 2 ** 31 - 1, 1000);
  const policy = opts.whenUnavailable ?? 'throw';
  if (
    !(policy === 'throw' || policy === 'allow' || policy === 'deny') &&
    !(
      typeof policy === 'object' &&
      policy !== null &&
      typeof (policy as LocalLimiter).consume === 'function'
    )
  ) {
    throw typeError(
      `${owner}: option "whenUnavailable" must be "throw", "allow", "deny" or a limiter, got ${show(policy)}`,
    );
  }
  const queueLimit = integerOption(
    owner,
    'queueLimit',
    opts.queueLimit,
    0,
    queue.max,
    queue.fallback,
  );
  let clock = opts.clock;
  // A ManualClock of another copy of the package (dist/index.js beside dist/redis.js):
  // opened over its shared time.
  const other = (clock as { handle?: { kind?: unknown } } | undefined)?.handle;
  if (clock !== undefined && !(clock instanceof ManualClock) && other?.kind === 'manual') {
    clock = new ManualClock(other as never);
  }
  if (clock !== undefined && !(clock instanceof ManualClock)) {
    throw typeError(
      `${owner}: option "clock" must be a ManualClock (or omitted: time comes from Redis TIME), got ${show(clock)}`,
    );
  }
  const blockKeys = integerOption(owner, 'blockKeys', opts.blockKeys, 1, 2 ** 24, 4096);
  const configRefreshMs = integerOption(
    owner,
    'configRefreshMs',
    opts.configRefreshMs,
    0,
    2 ** 31 - 1,
    1000,
  );
  // The options permit blocks share with the cluster client (permit-blocks.ts).
  const blocks = blockSettings(owner, opts, 'fleet mode', ['blockKeys']);
  return {
    opts,
    common: {
      block: blocks.block,
      maxBlock: blocks.maxBlock,
      blockTtlMs: blocks.blockTtlMs,
      blockKeys,
      leaseAhead: blocks.leaseAhead,
      configRefreshMs,
      blocks: (options as { [BLOCKS]?: BlocksHandle })[BLOCKS],
      options: opts,
      adapter,
      prefix,
      timeoutMs,
      whenUnavailable: policy as WhenUnavailable,
      queueLimit,
      clock: clock as ManualClock | undefined,
    },
  };
}

/**
 * What a Redis limiter's acquire() resolves with: a Lease whose release() returns a promise
 * (Concurrency: it rejects when Redis cannot be reached; rate limiters: resolves at once).
 */
export interface RedisLease extends Lease {
  /** Gives the permits back (Concurrency: in Redis). */
  release(): Promise<void>;
  /**
   * `'unavailable'` when `whenUnavailable` granted it (`'allow'`, or the fallback limiter):
   * Redis took nothing, so chain() and `refundWhen` give it nothing back.
   */
  readonly reason?: 'unavailable';
}

/** What attach() opens in another thread: a Redis limiter's options and shared blocks. */
export interface RedisHandle {
  /** Marks the object as a Redis limiter's handle. */
  readonly kind: 'atomic-limiter/redis';
  /** The limiter's class. */
  readonly algorithm: AlgorithmName;
  /** The options it was made with, but `redis` and a `whenUnavailable` limiter. */
  readonly options: Record<string, unknown>;
  /** Its ManualClock's handle, if it has one. */
  readonly clock: ManualClock['handle'] | undefined;
  /** Fleet mode's shared blocks, if `block` is set. */
  readonly blocks: BlocksHandle | undefined;
}

/** Slack added to TTLs under a ManualClock, whose time does not follow Redis's. */
export const MANUAL_SLACK_MS = 3_600_000;
/**
 * Slack added to TTLs on Redis time. A script computes a TTL from `TIME`, but Redis counts
 * it from the time its event loop last cached, which trails `TIME` when the server was
 * descheduled between reading a command and running it (a loaded host: a key then
 * expired a few ms before its state ended: test/redis/ttl.test.ts). A key living
 * 25 ms longer than its state needs costs nothing.
 */
export const REDIS_TIME_SLACK_MS = 25;
