import { ManualClock } from '../clock.js';
import {
  BackendUnavailableError,
  LimiterClosedError,
  QueueFullError,
  warnGiveBackFailed,
} from '../errors.js';
import type { Key } from '../limiter.js';
import type { AcquireOptions, AlgorithmName, Decision, Lease, Stats } from '../options.js';
import { blockSettings } from '../permit-blocks.js';
import {
  acquireOptions,
  checkOptionsObject,
  integerOption,
  permitsError,
  rangeError,
  show,
  typeError,
} from '../validate.js';
import { Blocks, type BlocksHandle } from './blocks.js';
import { type Adapter, adapt } from './client.js';
import { composeScript, type Rule } from './compose.lua.js';
import { Fleet } from './fleet-mode.js';
import { slotOf, tagOf } from './keys.js';
import { failedFast, Runner, Script, Unavailable } from './runner.js';
import { sleepUs, Waiter } from './wait.js';

export type { AlgorithmName };

/** A limiter that decides in Redis's place while Redis cannot be reached. */
export interface LocalLimiter {
  consume(key?: Key, permits?: number): Decision | PromiseLike<Decision>;
  acquire?(key?: Key, permits?: number, options?: AcquireOptions): Lease | PromiseLike<Lease>;
}

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
  release(): Promise<void>;
}

/** What attach() opens in another thread: a Redis limiter's options and shared blocks. */
export interface RedisHandle {
  readonly kind: 'atomic-limiter/redis';
  readonly algorithm: AlgorithmName;
  readonly options: Record<string, unknown>;
  readonly clock: ManualClock['handle'] | undefined;
  readonly blocks: BlocksHandle | undefined;
}

/** A refusal or grant as the scripts report it. */
interface Reply {
  allowed: boolean;
  remaining: number;
  retryAfterUs: number;
  untilFreshUs: number;
  nowUs: number;
  /** Concurrency: µs until the earliest lease expires (−1: none). A lease ('b'): permits granted. */
  hintUs: number;
  /** A lease ('b'): µs its permits keep counting where they were counted (LeaseReply). */
  countedUs: number;
}

/** Slack added to TTLs under a ManualClock, whose time does not follow Redis's. */
export const MANUAL_SLACK_MS = 3_600_000;
const SLACK_ARG = String(MANUAL_SLACK_MS);
/**
 * Slack added to TTLs on Redis time. A script computes a TTL from `TIME`, but Redis counts
 * it from the time its event loop last cached, which trails `TIME` when the server was
 * descheduled between reading a command and running it (a loaded host: a key then
 * expired a few ms before its state ended, seen by test/redis-ttl.test.ts). A key living
 * 25 ms longer than its state needs costs nothing.
 */
export const REDIS_TIME_SLACK_MS = 25;
const REDIS_SLACK_ARG = String(REDIS_TIME_SLACK_MS);
/** The scripts carry their limiter's parameters in their source: no ARGV[6…]. */
const NO_PARAMS: readonly string[] = [];

/**
 * What the six Redis limiters share: options, the script runner, the failure policy, the
 * per-key local wait queues of acquire(). Each subclass names its script, keys and
 * parameters, and how acquire() waits.
 *
 * Room for fleet mode (`block: n`, later): a block is one more op of the same scripts
 * (take up to n permits), spent locally; nothing here assumes one permit per round trip.
 */
export abstract class RedisLimiter {
  abstract readonly algorithm: AlgorithmName;
  abstract readonly limit: number;
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly whenUnavailable: WhenUnavailable;
  readonly queueLimit: number;
  /** The ManualClock given, or undefined: time comes from Redis TIME. */
  readonly clock: ManualClock | undefined;
  /** @internal The slack added to every TTL this limiter's scripts set: its clock's. */
  protected get ttlSlackMs(): number {
    return this.clock ? MANUAL_SLACK_MS : REDIS_TIME_SLACK_MS;
  }
  /** @internal */
  protected readonly adapter: Adapter;
  /** @internal */
  protected readonly runner: Runner;
  protected closed = false;
  /** @internal Waiters of this process per key, in arrival order; the head is the one asking Redis. */
  private readonly lines = new Map<string, Waiter[]>();
  /** @internal */
  private readonly waiters = new Set<Waiter>();
  /** @internal */
  private readonly keyPrefix: string;
  /** @internal */
  private readonly common: RedisCommon;
  /** Fleet mode: permits per block (0: off), and this thread's side of the shared blocks. */
  readonly block: number;
  readonly blockTtlMs: number;
  /** @internal */
  private fleet: Fleet | undefined;
  /** @internal True for the limiter that made the blocks (its close() gives them back). */
  private ownsBlocks = false;
  /** @internal */
  private sweep: ReturnType<typeof setInterval> | undefined;

  /** @internal */
  protected constructor(
    protected readonly owner: string,
    common: RedisCommon,
  ) {
    this.adapter = common.adapter;
    this.prefix = common.prefix;
    this.timeoutMs = common.timeoutMs;
    this.whenUnavailable = common.whenUnavailable;
    this.queueLimit = common.queueLimit;
    this.clock = common.clock;
    this.runner = new Runner(this.adapter, this.timeoutMs);
    this.keyPrefix = `${this.prefix}:${owner}:`;
    this.common = common;
    this.block = common.block;
    this.blockTtlMs = common.blockTtlMs;
  }

  /**
   * Opens fleet mode's blocks; subclasses call it once `limit` is known. `leasesGrow`: a hot
   * key's leases may grow past one block, up to `maxBlock` (LeakyBucket: no, a lease is a
   * burst there).
   * @internal
   */
  protected startFleet(leasesGrow = true): void {
    const c = this.common;
    if (c.block === 0) return;
    if (c.block > this.limit) {
      throw rangeError(
        `${this.owner}: option "block" must be from 1 to the limit (${this.limit}), got ${show(c.block)}`,
      );
    }
    // A LeakyBucket's lease is a burst: its leases never grow, so maxBlock is refused there,
    // even equal to block (README).
    if (c.maxBlock > this.limit || (!leasesGrow && c.options.maxBlock !== undefined)) {
      throw rangeError(
        leasesGrow
          ? `${this.owner}: option "maxBlock" must be from "block" to the limit (${this.limit}), got ${show(c.maxBlock)}`
          : `${this.owner}: option "maxBlock" is not for a LeakyBucket (its lease is a burst: leases stay one block), got ${show(c.maxBlock)}`,
      );
    }
    const most = leasesGrow ? c.maxBlock : c.block;
    // What fleet mode asks of this limiter (fleet-mode.ts), bound once.
    const host = {
      limit: this.limit,
      block: this.block,
      blockTtlMs: this.blockTtlMs,
      timeoutMs: this.timeoutMs,
      closed: () => this.closed,
      localMs: () => this.localMs(),
      manualTime: this.clock !== undefined,
      call: (op: string, tag: string, permits: number, extra: string) =>
        this.call(op, tag, permits, extra),
      sendNow: () => this.runner.flushNow(),
      parse: (reply: unknown) => this.parse(reply),
      badReply: (reply: unknown) => this.badReply(reply),
      fallback: (error: unknown, key: Key | undefined, permits: number) =>
        this.fallback(error, key, permits),
      direct: (tag: string, key: Key | undefined, permits: number) =>
        this.directConsume(tag, key, permits),
      giveBack: (tag: string, permits: number, takenUs: string) =>
        this.giveBack(tag, permits, takenUs),
      lost: reportLost,
    };
    if (c.blocks) {
      this.fleet = new Fleet(new Blocks(c.blocks), host, most, leasesGrow, c.leaseAhead);
      return;
    }
    const fleet = new Fleet(new Blocks(c.blockKeys), host, most, leasesGrow, c.leaseAhead);
    this.fleet = fleet;
    this.ownsBlocks = true;
    // Blocks nobody touches still age out: their permits go back. Nobody awaits the sweep,
    // so a give-back that cannot reach Redis is reported as a warning, never an unhandled
    // rejection (which would end the host process).
    this.sweep = setInterval(() => fleet.giveBack(true).catch(reportLost), this.blockTtlMs);
    this.sweep.unref();
  }

  /**
   * What another thread needs to open this limiter over the same blocks with
   * `attach(handle, { redis })`: structured-cloneable. A `whenUnavailable` limiter does not
   * travel (attach() may give one).
   */
  get handle(): RedisHandle {
    const options: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(this.common.options)) {
      if (k === 'redis' || k === 'clock') continue;
      if (k === 'whenUnavailable' && typeof v === 'object') continue;
      options[k] = v;
    }
    return {
      kind: 'atomic-limiter/redis',
      algorithm: this.algorithm,
      options,
      clock: this.clock?.handle,
      blocks: this.fleet?.blocks.handle,
    };
  }

  /** @internal Local time in ms for block ages and cached refusals (the ManualClock's when given). */
  private localMs(): number {
    return this.clock ? this.clock.nowUs() / 1000 : performance.timeOrigin + performance.now();
  }

  /** @internal */
  private directConsume(tag: string, key: Key | undefined, permits: number): Promise<Decision> {
    const id = this.grantId();
    return this.grantCall('c', tag, permits, id).then(
      (reply) => this.decision(this.parse(reply)),
      (error) => this.fallback(error, key, permits),
    );
  }

  /** @internal Redis keys of a tag; every one carries `{tag}`, so all share one slot. */
  protected keysOf(tag: string): readonly string[] {
    return [`${this.keyPrefix}{${tag}}`];
  }

  /** The Redis key names of `key` (for inspection and tests). */
  redisKeys(key?: Key): readonly string[] {
    return this.keysOf(tagOf(this.owner, key));
  }

  /** @internal The limiter's script: every op (its batch form decides calls beside others). */
  protected script!: Script;
  /**
   * Single-call forms for tryAcquire() ('t'), consume() ('c') and a fleet lease ('b'): what
   * such a call runs when it goes alone (not in a batch).
   * @internal
   */
  protected tryScript: Script | undefined;
  /** @internal */
  protected consumeScript: Script | undefined;
  /** @internal */
  protected leaseScript: Script | undefined;

  /**
   * @internal Sets the limiter's scripts, composed from its algorithm's rule (compose.lua.ts);
   * `singles`: whether calls alone take the single-call forms.
   */
  protected useRule(rule: Rule, singles = true): void {
    const forms = composeScript(rule, this.ttlSlackMs);
    const name = `atomic-limiter:${rule.name}`;
    this.script = new Script(name, forms.driver, forms.batch);
    if (!singles) return;
    this.tryScript = new Script(`${name}-try`, forms.single('t'), undefined, true);
    this.consumeScript = new Script(`${name}-consume`, forms.single('c'), undefined, true);
    if (this.block > 0) {
      this.leaseScript = new Script(`${name}-lease`, forms.single('b'), undefined, true);
    }
  }

  /** @internal Runs `op`; `force`: also after close() (give-backs: nothing taken is kept). */
  protected call(
    op: string,
    tag: string,
    permits: number,
    extra = '',
    force = false,
    late?: (reply: unknown) => void,
  ): Promise<unknown> {
    if (this.closed && !force) return Promise.reject(new LimiterClosedError());
    const head = [
      op,
      this.clock ? String(this.clock.nowUs()) : '',
      permits === 1 ? '1' : String(permits),
      extra,
      this.clock ? SLACK_ARG : REDIS_SLACK_ARG,
    ];
    // The slot only groups a Cluster's batches; standalone it is not computed.
    const alone =
      (op === 't'
        ? this.tryScript
        : op === 'c'
          ? this.consumeScript
          : op === 'b'
            ? this.leaseScript
            : undefined) ?? this.script;
    return this.runner.run(
      this.script,
      alone,
      this.keysOf(tag),
      head,
      NO_PARAMS,
      this.adapter.cluster ? slotOf(tag) : 0,
      late,
    );
  }

  /**
   * Runs a call that may grant ('t', 'c', 'w'). Where a grant has an id (Concurrency), a
   * call that got no answer may still have granted: lostGrant() is told.
   * @internal
   */
  private grantCall(op: 't' | 'c' | 'w', tag: string, permits: number, id: string) {
    const pending = this.call(op, tag, permits, id, false, this.lateGrant(op, tag, permits, id));
    if (id !== '') {
      pending.catch((error) => {
        if (error instanceof Unavailable && !failedFast(error)) {
          this.lostGrant(op, tag, permits, id);
        }
      });
    }
    return pending;
  }

  /**
   * A call that may have granted (`id`: its grant's) got no answer from Redis: its reply
   * was lost, came from elsewhere or not in time. Concurrency frees such a grant by its id.
   * @internal
   */
  protected lostGrant(_op: 't' | 'c' | 'w', _tag: string, _permits: number, _id: string): void {}

  /**
   * What to do with the reply of a grant ('t', 'c') that came after its call failed by
   * timeoutMs (undefined: nothing). Concurrency gives back a grant nobody holds.
   * @internal
   */
  protected lateGrant(_op: 't' | 'c' | 'w', _tag: string, _permits: number, _id: string) {
    return undefined as ((reply: unknown) => void) | undefined;
  }

  /** @internal */
  protected checkPermits(method: string, permits: unknown): void {
    if (this.closed) throw new LimiterClosedError();
    if (
      typeof permits !== 'number' ||
      !(permits >= 1 && permits <= this.limit) ||
      (permits | 0) !== permits
    ) {
      throw permitsError(method, permits, this.limit);
    }
  }

  /** @internal An error naming the script for a reply that is not what it returns. */
  protected badReply(reply: unknown): Error {
    let text: string;
    try {
      text = JSON.stringify(reply) ?? String(reply);
    } catch {
      text = String(reply);
    }
    return new Error(
      `atomic-limiter/redis: script ${this.script.name} returned an unexpected reply: ${text.slice(0, 200)}`,
    );
  }

  /** @internal The number at `reply[i]` (scripts send numbers as strings or integers). */
  protected num(reply: unknown, i: number): number {
    if (!Array.isArray(reply) || reply.length <= i) throw this.badReply(reply);
    const v = reply[i];
    if (typeof v === 'number') return v;
    if (typeof v === 'string') {
      if (v === 'inf') return Number.POSITIVE_INFINITY;
      const n = Number(v);
      if (v !== '' && !Number.isNaN(n)) return n;
    }
    throw this.badReply(reply);
  }

  /** @internal */
  protected parse(reply: unknown): Reply {
    if (!Array.isArray(reply) || reply.length < 5) throw this.badReply(reply);
    const flag = this.num(reply, 0);
    if (flag !== 0 && flag !== 1) throw this.badReply(reply);
    return {
      allowed: flag === 1,
      remaining: this.num(reply, 1),
      retryAfterUs: this.num(reply, 2),
      untilFreshUs: this.num(reply, 3),
      nowUs: this.num(reply, 4),
      hintUs: reply.length > 5 ? this.num(reply, 5) : 0,
      countedUs: reply.length > 6 ? this.num(reply, 6) : Number.POSITIVE_INFINITY,
    };
  }

  /** @internal */
  protected decision(r: Reply): Decision {
    // The same object, field for field, as the in-memory consume().
    const d: Decision = {
      allowed: r.allowed,
      remaining: r.remaining,
      limit: this.limit,
      retryAfterMs: r.allowed ? 0 : r.retryAfterUs / 1000,
      resetAfterMs: r.untilFreshUs / 1000,
    };
    return r.allowed ? d : { ...d, reason: 'limited' };
  }

  /** @internal */
  protected unavailableError(error: unknown): unknown {
    if (!(error instanceof Unavailable)) return error;
    return new BackendUnavailableError(`${this.owner}: Redis is unavailable: ${error.message}`, {
      cause: error.cause ?? error,
    });
  }

  /** @internal The failure policy, for a call whose answer Redis could not give. */
  protected fallback(
    error: unknown,
    key: Key | undefined,
    permits: number,
  ): Decision | PromiseLike<Decision> {
    if (!(error instanceof Unavailable)) throw error;
    const policy = this.whenUnavailable;
    if (policy === 'allow') {
      return {
        allowed: true,
        remaining: this.limit - permits,
        limit: this.limit,
        retryAfterMs: 0,
        resetAfterMs: 0,
        reason: 'unavailable',
      };
    }
    if (policy === 'deny') {
      return {
        allowed: false,
        remaining: 0,
        limit: this.limit,
        retryAfterMs: this.timeoutMs,
        resetAfterMs: 0,
        reason: 'unavailable',
      };
    }
    if (policy === 'throw') throw this.unavailableError(error);
    return policy.consume(key, permits);
  }

  /** Takes `permits` for `key` if the limit allows; never waits. */
  tryAcquire(key?: Key, permits = 1): Promise<boolean> {
    let tag: string;
    try {
      this.checkPermits(this.owner, permits);
      tag = tagOf(this.owner, key);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.fleet && permits <= this.block) return this.fleet.tryAcquire(tag, key, permits);
    const id = this.grantId();
    return this.grantCall('t', tag, permits, id).then(
      this.tryReply,
      async (error) => (await this.fallback(error, key, permits)).allowed,
    );
  }

  /** @internal A tryAcquire() reply as its answer (made once: no closure per call). */
  private readonly tryReply = (reply: unknown): boolean => {
    if (reply === 1) return true;
    if (reply === 0) return false;
    throw this.badReply(reply);
  };

  /** Like `tryAcquire`, and explains the outcome: the same Decision as in memory. */
  consume(key?: Key, permits = 1): Promise<Decision> {
    let tag: string;
    try {
      this.checkPermits(this.owner, permits);
      tag = tagOf(this.owner, key);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.fleet && permits <= this.block) return this.fleet.consume(tag, key, permits);
    return this.directConsume(tag, key, permits);
  }

  /** @internal Lease id of a grant (Concurrency); '' for rate limiters. */
  protected grantId(): string {
    return '';
  }

  /**
   * Gives `permits` back to `key` (never above its limit), as permits taken just now.
   * Rejects with BackendUnavailableError when Redis cannot be reached: never dropped.
   */
  refund(key?: Key, permits = 1): Promise<void> {
    let tag: string;
    try {
      this.checkPermits(`${this.owner}.refund`, permits);
      tag = tagOf(this.owner, key);
    } catch (error) {
      return Promise.reject(error);
    }
    const back = this.giveBack(tag, permits, '');
    const fleet = this.fleet;
    if (!fleet) return back;
    // Fleet mode: the key may have permits again, so this process's cached refusal of it
    // goes, for every thread: the next decision asks Redis. Cleared once Redis has answered
    // (a refusal cached meanwhile was Redis's word before the refund), or failed to.
    return back.finally(() => {
      const s = fleet.blocks.slotOf(tag);
      if (s >= 0) fleet.blocks.refuse(s, 0);
    });
  }

  /** @internal Runs a refund; `takenUs` ('' for now) is when the permits were taken. */
  protected giveBack(tag: string, permits: number, takenUs: string): Promise<void> {
    return this.call('r', tag, permits, takenUs, true).then(
      (reply) => {
        if (this.num(reply, 0) !== 1) throw this.badReply(reply);
      },
      (error) => {
        throw this.unavailableError(error);
      },
    );
  }

  /** The key's counters and the permits available now; `queued` counts this process's waiters. */
  stats(key?: Key): Promise<Stats> {
    let tag: string;
    try {
      tag = tagOf(this.owner, key);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.call('s', tag, 1).then(
      (reply) => ({
        available: this.num(reply, 0),
        queued: this.queuedPermits(tag),
        // Exact, wrapping at 2^32, as in memory (Redis keeps them whole).
        admitted: this.num(reply, 1) % 2 ** 32,
        rejected: this.num(reply, 2) % 2 ** 32,
      }),
      (error) => {
        throw this.unavailableError(error);
      },
    );
  }

  /** Puts `key` back in its initial state and zeroes its counters (deletes its keys). */
  reset(key?: Key): Promise<void> {
    let tag: string;
    try {
      tag = tagOf(this.owner, key);
      if (this.closed) throw new LimiterClosedError();
    } catch (error) {
      return Promise.reject(error);
    }
    // Fleet mode: the key starts afresh, so this process's block and cached refusal go too,
    // and leases still out land in nothing (Blocks.add()): now, for those sent before the
    // reset, and again once Redis has run it, for those sent meanwhile (their permits may
    // have been taken before it; one taken after it is dropped unspent, the safe direction).
    const blocks = this.fleet?.blocks;
    const s = blocks ? blocks.slotOf(tag) : -1;
    if (s >= 0) blocks!.forget(s);
    return this.call('x', tag, 1).then(
      () => {
        if (s >= 0) blocks!.forget(s);
      },
      (error) => {
        if (s >= 0) blocks!.forget(s);
        throw this.unavailableError(error);
      },
    );
  }

  /**
   * Stops this limiter's own work: every later call rejects with LimiterClosedError, and so
   * do its pending acquire() calls. The Redis client stays the caller's.
   */
  close(): Promise<void> {
    const first = !this.closed;
    this.closed = true;
    for (const w of [...this.waiters]) w.stop(new LimiterClosedError());
    if (this.sweep) clearInterval(this.sweep);
    // Fleet mode: this thread's leases still out land in the blocks first; then the limiter
    // that made the blocks gives their unspent permits back (attach()ed ones leave them to
    // it: other threads may still be spending them).
    const fleet = this.fleet;
    const back =
      first && fleet
        ? fleet.settled().then(() => (this.ownsBlocks ? fleet.giveBack(false) : undefined))
        : Promise.resolve();
    return Promise.all([back, this.onClose()]).then(() => {});
  }

  /** @internal */
  protected onClose(): Promise<void> {
    return Promise.resolve();
  }

  // ---- acquire() -------------------------------------------------------------------

  /**
   * Takes `permits` for `key`, waiting when they are not there yet. Resolves with a Lease;
   * rejects with QueueFullError past `queueLimit`, LimiterClosedError on close(), the
   * signal's reason on abort, a TimeoutError after `timeoutMs`.
   */
  acquire(key?: Key, permits = 1, options: AcquireOptions = {}): Promise<RedisLease> {
    let tag: string;
    let w: Waiter;
    try {
      const { signal, timeoutMs } = acquireOptions(this.owner, options);
      this.checkPermits(this.owner, permits);
      tag = tagOf(this.owner, key);
      if (signal?.aborted) return Promise.reject(signal.reason);
      w = new Waiter(tag, permits, signal, timeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
    // One deadline bounds the whole call: a fallback gets what the Redis wait left of it.
    const deadline = options.timeoutMs === undefined ? 0 : performance.now() + options.timeoutMs;
    this.waiters.add(w);
    return this.waitFor(w).then(
      (lease) => {
        this.waiters.delete(w);
        w.finish();
        return lease;
      },
      (error) => {
        this.waiters.delete(w);
        w.finish();
        if (error instanceof Unavailable)
          return this.acquireUnavailable(error, key, permits, options, deadline);
        throw error;
      },
    );
  }

  /** @internal */
  private acquireUnavailable(
    error: Unavailable,
    key: Key | undefined,
    permits: number,
    options: AcquireOptions,
    deadline: number,
  ): RedisLease | PromiseLike<RedisLease> {
    const policy = this.whenUnavailable;
    if (policy === 'allow') return NO_OP_LEASE;
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
        }),
      );
    }
    throw this.unavailableError(error);
  }

  /** @internal How this algorithm waits; the default waits in line and retries after retryAfterMs. */
  protected waitFor(w: Waiter): Promise<RedisLease> {
    return this.waitInLine(w);
  }

  /** @internal */
  protected lease(_tag: string, _permits: number, _id: string): RedisLease {
    return NO_OP_LEASE;
  }

  /** @internal Permits this process has waiting for `tag`. */
  protected queuedPermits(tag: string): number {
    let n = 0;
    for (const w of this.lines.get(tag) ?? []) n += w.permits;
    return n;
  }

  /**
   * Windows, log and Concurrency: this process's waiters for a key form a FIFO line; only
   * its head asks Redis, after each refusal's retryAfterMs (Concurrency: when a release is
   * published or the earliest lease expires). Across processes heads race: see README.
   * @internal
   */
  private async waitInLine(w: Waiter): Promise<RedisLease> {
    const line = this.lines.get(w.tag);
    if (!line || line.length === 0) {
      // Nobody of ours waits: one try before queueing.
      const r = await this.attempt(w);
      if (r.lease) return r.lease;
    }
    if (this.queueLimit === 0) {
      throw new QueueFullError(`${this.owner}: option "queueLimit" is 0, so acquire() never waits`);
    }
    if (this.queuedPermits(w.tag) + w.permits > this.queueLimit) {
      throw new QueueFullError(
        `${this.owner}: ${this.queuedPermits(w.tag)} permits already wait for this key (option "queueLimit" is ${this.queueLimit})`,
      );
    }
    const mine = this.lines.get(w.tag) ?? [];
    this.lines.set(w.tag, mine);
    mine.push(w);
    try {
      // Wait for our turn: the head leaving wakes the next one.
      while (mine[0] !== w) {
        await w.race(new Promise<void>((resolve) => (w.wake = resolve)));
      }
      for (;;) {
        const r = await this.attempt(w);
        if (r.lease) return r.lease;
        await w.race(this.pause(w, r.reply!));
      }
    } finally {
      const i = mine.indexOf(w);
      if (i >= 0) mine.splice(i, 1);
      if (mine.length === 0) this.lines.delete(w.tag);
      else if (i === 0) mine[0]!.wake?.();
    }
  }

  /** @internal One waiter's try; a grant that lands after the waiter was cancelled is given back. */
  private async attempt(w: Waiter): Promise<{ lease?: RedisLease; reply?: Reply }> {
    if (this.closed) throw new LimiterClosedError();
    const id = this.grantId();
    w.woken = false;
    // 'w': a caller about to wait is not counted as refused (as in memory).
    const pending = this.grantCall('w', w.tag, w.permits, id).then((reply) => this.parse(reply));
    pending.then(
      (r) => {
        if (r.allowed && w.done) this.undoGrant(w.tag, w.permits, id, r.nowUs);
      },
      () => {},
    );
    const r = await w.race(pending);
    return r.allowed ? { lease: this.lease(w.tag, w.permits, id) } : { reply: r };
  }

  /** @internal Gives back what a cancelled waiter was granted. */
  protected undoGrant(tag: string, permits: number, _id: string, nowUs: number): void {
    this.giveBack(tag, permits, String(nowUs)).catch(reportLost);
  }

  /** @internal How the head waits after a refusal: the refusal's retryAfterMs. */
  protected pause(w: Waiter, r: Reply): Promise<void> {
    return sleepUs(this.clock, Number.isFinite(r.retryAfterUs) ? r.retryAfterUs : 1000, w);
  }
}

/** A give-back that could not reach Redis, where nobody awaits it: a process warning. */
export function reportLost(error: unknown): void {
  warnGiveBackFailed('atomic-limiter/redis', 'ATOMIC_LIMITER_REDIS_GIVE_BACK', error);
}

export const NO_OP_LEASE: RedisLease = Object.freeze({
  release: (): Promise<void> => Promise.resolve(),
  [Symbol.dispose](): void {},
});
