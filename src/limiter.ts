import diagnosticsChannel from 'node:diagnostics_channel';
import { type Clock, type ClockHandle, ManualClock, monotonicClock } from './clock.js';
import { CoarseClock } from './coarse-clock.js';
import { type AttemptMode, Core, ENQUEUE, enter, HEAD, run, TRY, unwrapStamp } from './decision.js';
import { LimiterClosedError, QueueFullError } from './errors.js';
import {
  computeLayout,
  DEFAULT_MAX_BYTES,
  F64_EPOCH_US,
  F64_PARAMS,
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_ALGO,
  H_BYTES_DIV64,
  H_CONTROL,
  H_HOLDERS,
  H_INSERTS,
  H_KEYS,
  H_LOG_RING,
  H_MAGIC,
  H_MAX_KEYS,
  H_MAX_WAITERS,
  H_QUEUE_LIMIT,
  H_QUEUE_ORDER,
  H_RECLAIMS,
  H_SEED0,
  H_SEED1,
  H_SEGMENTS,
  H_SLOTS,
  H_STRIPES,
  H_TABLE_FULL,
  H_VERSION,
  H_WHEN_FULL,
  hotWord,
  LAYOUT_VERSION,
  type Layout,
  MAGIC,
  MAX_BUFFER_BYTES,
  PAYLOAD_MASK,
  REJECT,
  RESERVED,
  S_ADMITTED,
  S_REJECTED,
  S_STAMP,
  S_STATE,
  STAMP_PER_US,
  slotOfHotWord,
  W_CLOSED,
  W_EVICTED,
  W_FREE,
  W_WAITING,
} from './layout.js';
import { LogPool } from './log-pool.js';
import { HEARTBEAT_MS, MOVED, WaitQueues } from './queue.js';
import { GEN_SAFE_SPAN, type Key, NO_SLOT, type SlotPolicy, SlotTable } from './table.js';
import {
  acquireOptions,
  checkOptionsObject,
  enumOption,
  integerOption,
  permitsError,
  rangeError,
  show,
  typeError,
} from './validate.js';

export type { Key } from './table.js';

/** The outcome of `consume()`. A refusal is a value, not an exception. */
export interface Decision {
  /** Whether the permits were granted. */
  readonly allowed: boolean;
  /** Permits that could still be granted right now, after this decision. */
  readonly remaining: number;
  /** The limiter's limit (capacity, or permits per window, or concurrent permits). */
  readonly limit: number;
  /**
   * 0 when allowed. Otherwise the exact wait: retrying after it succeeds if nothing else
   * consumed meanwhile, retrying sooner fails. `Infinity` when waiting alone cannot help
   * (`Concurrency`: a holder must release).
   */
  readonly retryAfterMs: number;
  /** Time until the key is back to its initial state (full bucket, empty windows). */
  readonly resetAfterMs: number;
  /**
   * Why: on a refusal, the limit (`'limited'`), no slot for a new key (`'table-full'`), or
   * a backend that could not be reached (`'unavailable'`: Redis limiters with
   * `whenUnavailable` `'allow'` / `'deny'`, on allowed decisions too); `'table-full'` also
   * on a new key allowed without state by `whenFull: 'allow'`.
   */
  readonly reason?: 'limited' | 'table-full' | 'unavailable';
}

/** Per-key counters and the permits available now. */
export interface Stats {
  readonly available: number;
  readonly queued: number;
  /** Permits granted since the key entered the table (wraps at 2^32). */
  readonly admitted: number;
  /** Permits refused since the key entered the table (wraps at 2^32). */
  readonly rejected: number;
}

export type QueueOrder = 'oldest-first' | 'newest-first';

/** The six algorithms, by class name. */
export type AlgorithmName =
  | 'TokenBucket'
  | 'LeakyBucket'
  | 'FixedWindow'
  | 'SlidingWindow'
  | 'SlidingLog'
  | 'Concurrency';

/** Options every limiter takes. */
export interface CommonOptions {
  /**
   * Distinct keys the shared table has room for when created (minimum 1, default 1024).
   * Keys idle in their initial state are reclaimed when space is needed; when none is, the
   * table grows (by segments of 1.5 slots per key, doubling) up to `maxKeys`.
   */
  keys?: number;
  /**
   * The most keys the table may grow to (default 1 048 576, or as many as `maxBytes`
   * holds). Beyond it, when every candidate slot of a new key holds an active key,
   * `whenFull` decides for it, with `reason: 'table-full'`. At least `keys`.
   */
  maxKeys?: number;
  /**
   * What a new key gets when no slot can be had for it: `'deny'` (default: a refusal with
   * `reason: 'table-full'` and the time until the soonest candidate slot can be reclaimed)
   * or `'allow'` (granted without any state: no limit applies to it until a slot frees —
   * the choice of an HTTP API that would rather serve a new client than refuse it).
   */
  whenFull?: WhenFull;
  /**
   * Largest shared buffer this limiter may reserve, in bytes (default 256 MiB, at most
   * 2^31 − 2^16). A configuration needing more is refused with a RangeError saying how much.
   */
  maxBytes?: number;
  /** Permits that may wait per key in `acquire()`; 0 (default) means never wait. */
  queueLimit?: number;
  /** `'oldest-first'` (default, FIFO) or `'newest-first'` (evicts the oldest waiter). */
  queueOrder?: QueueOrder;
  /**
   * Waiters that may be queued at once across all keys and threads (default 4096; each
   * costs 32 bytes of shared memory). Past it, `acquire()` rejects with QueueFullError.
   */
  maxWaiters?: number;
  /** The clock (default: the host's monotonic clock). Pass a `ManualClock` in tests. */
  clock?: Clock;
}

/** What travels to another thread: `new Worker(file, { workerData: limiter.handle })`. */
export interface LimiterHandle {
  readonly kind: 'atomic-limiter';
  readonly version: number;
  readonly buffer: SharedArrayBuffer;
  readonly clock: ClockHandle;
  /** SlidingLog only: the pool of its log rings (a second buffer that grows with use). */
  readonly logs?: SharedArrayBuffer;
}

export type WhenFull = 'deny' | 'allow';

export const COMMON_OPTIONS = [
  'keys',
  'maxKeys',
  'queueLimit',
  'queueOrder',
  'maxWaiters',
  'clock',
  'whenFull',
  'maxBytes',
] as const;

/**
 * Published (only when someone subscribes) each time a new key finds no slot:
 * `{ limiter, key, whenFull }`. Subscribe with `diagnostics_channel.subscribe(name, f)`.
 */
export const TABLE_FULL_CHANNEL = 'atomic-limiter:table-full';
const tableFullChannel = diagnosticsChannel.channel(TABLE_FULL_CHANNEL);
/** retryAfterMs of a table-full refusal when no candidate slot frees by time alone. */
const TABLE_FULL_RETRY_MS = 1000;
const MAX_KEYS = 1 << 22;
const DEFAULT_KEYS = 1024;
const DEFAULT_MAX_KEYS = 1 << 20;

/** A buffer and clock to attach to (from `attach()`); never built by users. */
export class Attached {
  constructor(
    readonly buffer: SharedArrayBuffer,
    readonly clock: Clock,
    /** SlidingLog's log pool (see LimiterHandle.logs). */
    readonly logs?: SharedArrayBuffer,
  ) {}
}

/** A validated new limiter: its options packed for the header. */
export interface Fresh {
  readonly params: readonly number[];
  readonly logRing: number;
  readonly keys: number;
  readonly maxKeys: number;
  /** Whether the user chose maxKeys (else it shrinks to fit maxBytes). */
  readonly maxKeysGiven: boolean;
  readonly queueLimit: number;
  readonly queueOrder: QueueOrder;
  readonly maxWaiters: number;
  readonly clock: Clock;
  readonly whenFull: WhenFull;
  readonly maxBytes: number;
  /** Holder records to keep (Concurrency: who holds permits), 0 for none. */
  readonly holdersPerSlot?: number;
}

export function readCommon(
  owner: string,
  options: unknown,
  own: readonly string[],
): { opts: Record<string, unknown>; common: Omit<Fresh, 'params' | 'logRing'> } {
  const opts = checkOptionsObject(owner, options, [...own, ...COMMON_OPTIONS]);
  const keys = integerOption(owner, 'keys', opts.keys, 1, MAX_KEYS, DEFAULT_KEYS);
  const maxKeysGiven = opts.maxKeys !== undefined;
  const maxKeys = integerOption(
    owner,
    'maxKeys',
    opts.maxKeys,
    1,
    MAX_KEYS,
    Math.max(keys, DEFAULT_MAX_KEYS),
  );
  if (maxKeys < keys) {
    throw rangeError(
      `${owner}: option "maxKeys" (${maxKeys}) must be at least "keys" (${keys}): the table starts at "keys" and grows up to "maxKeys"`,
    );
  }
  const queueLimit = integerOption(owner, 'queueLimit', opts.queueLimit, 0, 2 ** 31 - 1, 0);
  const maxWaiters = integerOption(owner, 'maxWaiters', opts.maxWaiters, 1, 1 << 20, 4096);
  const queueOrder = enumOption<QueueOrder>(
    owner,
    'queueOrder',
    opts.queueOrder,
    ['oldest-first', 'newest-first'],
    'oldest-first',
  );
  const whenFull = enumOption<WhenFull>(
    owner,
    'whenFull',
    opts.whenFull,
    ['deny', 'allow'],
    'deny',
  );
  const maxBytes = integerOption(
    owner,
    'maxBytes',
    opts.maxBytes,
    2 ** 16,
    MAX_BUFFER_BYTES,
    DEFAULT_MAX_BYTES,
  );
  const clock = opts.clock ?? monotonicClock;
  if (
    typeof clock !== 'object' ||
    clock === null ||
    typeof (clock as Clock).nowUs !== 'function' ||
    !(clock === monotonicClock || clock instanceof ManualClock || clock instanceof CoarseClock)
  ) {
    throw typeError(
      `${owner}: option "clock" must be a ManualClock or a CoarseClock (or omitted for the monotonic clock), got ${show(clock)}`,
    );
  }
  return {
    opts,
    common: {
      keys,
      maxKeys,
      maxKeysGiven,
      queueLimit,
      queueOrder,
      maxWaiters,
      whenFull,
      maxBytes,
      clock: clock as Clock,
    },
  };
}

function randomSeed(): number {
  return (Math.random() * 2 ** 32) | 0;
}

/**
 * The machinery every limiter shares: the buffer, the key table, the clock, the CAS loop.
 * Each algorithm supplies `step()` (a pure function of state, stamp, time and permits)
 * and the few functions that explain a state.
 */
export abstract class Limiter implements SlotPolicy {
  /** The limiter's clock. */
  readonly clock: Clock;
  /** Largest permits one call may ask for. */
  abstract readonly limit: number;
  /** The algorithm, as the class's name: what other parts (HTTP headers, Redis) key on. */
  abstract readonly algorithm: AlgorithmName;
  /** Keys the table held room for when created; it grows from there up to `maxKeys`. */
  readonly keys: number;
  /** Keys the table may hold once grown to its ceiling. */
  readonly maxKeys: number;
  /** What a new key gets when the table has no slot for it. */
  readonly whenFull: WhenFull;
  readonly queueLimit: number;
  readonly queueOrder: QueueOrder;
  /**
   * A fixed-length view of the buffer as far as this thread has mapped it: Atomics on a
   * length-tracking view of a growable buffer cost twice as much, so a thread maps the
   * buffer again (remap) when its table finds a segment beyond its view.
   */
  protected i32: Int32Array;
  protected readonly f64: Float64Array;
  protected readonly layout: Layout;
  protected readonly table: SlotTable;
  protected readonly epochUs: number;
  protected readonly buffer: SharedArrayBuffer;
  protected readonly queues: WaitQueues;
  /** Per-slot memory sized by the options (SlidingLog's rings), when `layout.logRing` > 0. */
  protected readonly pool: LogPool | undefined;
  /** What every decision reads and writes, in one shape for every class (decision.ts). */
  protected readonly core: Core;
  /** This thread's pending acquire() calls on this limiter. */
  private readonly waiting = new Set<Waiter>();
  private heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  protected constructor(
    protected readonly owner: string,
    algo: number,
    source: Fresh | Attached,
  ) {
    if (source instanceof Attached) {
      this.buffer = source.buffer;
      this.clock = source.clock;
      this.i32 = fixedView(this.buffer);
      this.f64 = new Float64Array(this.buffer, 0, 16);
      const i32 = this.i32;
      this.layout = computeLayout(
        i32[H_KEYS]!,
        i32[H_LOG_RING]!,
        i32[H_MAX_WAITERS]!,
        i32[H_HOLDERS]!,
        i32[H_MAX_KEYS]!,
      );
      const length = this.buffer.byteLength;
      if (i32[H_ALGO] !== algo || length < this.layout.bytes || length > this.layout.maxBytes) {
        throw typeError(`${owner}: the buffer does not belong to a ${owner}`);
      }
      if (this.layout.logRing > 0 && !(source.logs instanceof SharedArrayBuffer)) {
        throw typeError(`${owner}: the handle has no log pool (handle.logs)`);
      }
    } else {
      const slots = computeLayout(source.keys, 0, 1, 0).slots + 1;
      const layoutFor = (maxKeys: number) =>
        computeLayout(
          source.keys,
          source.logRing,
          source.maxWaiters,
          slots * (source.holdersPerSlot ?? 0),
          maxKeys,
        );
      let layout = layoutFor(source.maxKeys);
      // What `keys` reserve without growing (a log's pool may take a ring for every slot).
      const least = layoutFor(source.keys).totalMaxBytes;
      if (least > source.maxBytes) {
        throw rangeError(
          `${owner}: ${show(source.keys)} keys need ${mib(least)} of shared memory, more than "maxBytes" allows (${mib(source.maxBytes)}); lower "keys"${source.logRing > 0 ? ' or "limit"' : ''}, or raise "maxBytes"`,
        );
      }
      if (layout.totalMaxBytes > source.maxBytes && source.maxKeysGiven) {
        throw rangeError(
          `${owner}: a table growing to ${show(source.maxKeys)} keys reserves ${mib(layout.totalMaxBytes)} of shared memory, more than "maxBytes" allows (${mib(source.maxBytes)}); lower "maxKeys"${source.logRing > 0 ? ' or "limit"' : ''}, or raise "maxBytes"`,
        );
      }
      // Without an explicit maxKeys, the ceiling is as many segments as maxBytes holds.
      while (layout.totalMaxBytes > source.maxBytes) {
        layout = layoutFor(source.keys * 2 ** (layout.segments.length - 2));
      }
      this.layout = layout;
      // A growable buffer reserves its maximum (address space) and commits what exists.
      this.buffer =
        layout.maxBytes > layout.bytes
          ? new SharedArrayBuffer(layout.bytes, { maxByteLength: layout.maxBytes })
          : new SharedArrayBuffer(layout.bytes);
      this.clock = source.clock;
      this.i32 = fixedView(this.buffer);
      this.f64 = new Float64Array(this.buffer, 0, 16);
      const i32 = this.i32;
      i32[H_VERSION] = LAYOUT_VERSION;
      i32[H_ALGO] = algo;
      i32[H_SLOTS] = layout.slots;
      i32[H_STRIPES] = layout.stripes;
      i32[H_SEED0] = randomSeed();
      i32[H_SEED1] = randomSeed();
      i32[H_KEYS] = source.keys;
      i32[H_MAX_KEYS] = layout.maxKeys;
      i32[H_SEGMENTS] = 1;
      i32[H_QUEUE_LIMIT] = source.queueLimit;
      i32[H_QUEUE_ORDER] = source.queueOrder === 'newest-first' ? 1 : 0;
      i32[H_LOG_RING] = source.logRing;
      i32[H_MAX_WAITERS] = source.maxWaiters;
      i32[H_HOLDERS] = layout.holders;
      i32[H_WHEN_FULL] = source.whenFull === 'allow' ? 1 : 0;
      i32[H_BYTES_DIV64] = layout.bytes / 64;
      source.params.forEach((p, k) => {
        this.f64[F64_PARAMS + k] = p;
      });
      this.f64[F64_EPOCH_US] = Math.floor(this.clock.nowUs());
      for (let s = 0; s <= layout.slots; s++) i32[hotWord(layout, s) + S_STATE] = FRESH;
      // Magic last: a thread that sees it sees a complete header.
      Atomics.store(i32, H_MAGIC, MAGIC);
    }
    if (this.layout.logRing > 0) {
      const logs = source instanceof Attached ? source.logs! : LogPool.create(this.layout);
      this.pool = new LogPool(logs, this.layout);
    }
    this.keys = this.i32[H_KEYS]!;
    this.maxKeys = this.layout.maxKeys;
    this.whenFull = this.i32[H_WHEN_FULL] === 1 ? 'allow' : 'deny';
    this.queueLimit = this.i32[H_QUEUE_LIMIT]!;
    this.queueOrder = this.i32[H_QUEUE_ORDER] === 1 ? 'newest-first' : 'oldest-first';
    this.epochUs = this.f64[F64_EPOCH_US]!;
    this.table = new SlotTable(this.i32, this.layout, owner, () => this.remap());
    this.queues = new WaitQueues(this.i32, this.layout, this.table);
    this.core = new Core(
      this.i32,
      this.clock,
      this.epochUs,
      this.param(0), // every algorithm stores its limit (or capacity) first
      this.table,
      this.queues,
      this.queueOrder === 'oldest-first',
      owner,
      source instanceof Attached,
    );
  }

  /**
   * Maps the buffer again as far as it has grown (the table grew, here or in another
   * thread): every view this thread's objects hold is replaced by one over the new length.
   */
  protected remap(): void {
    this.i32 = fixedView(this.buffer);
    this.table.i32 = this.i32;
    this.queues.i32 = this.i32;
    this.core.i32 = this.i32;
    this.remapped();
  }

  /** Hook after remap() (views an algorithm keeps of its own). */
  protected remapped(): void {}

  /** The algorithm's stored options, in the order the subclass wrote them. */
  protected param(k: number): number {
    return this.f64[F64_PARAMS + k]!;
  }

  /** Pass to another thread and `attach()` it there: same limiter, same state. */
  get handle(): LimiterHandle {
    // From now on another thread may write this buffer: counters need atomic adds.
    this.core.shared = true;
    const handle = {
      kind: 'atomic-limiter',
      version: LAYOUT_VERSION,
      buffer: this.buffer,
      clock: this.clock.handle,
    } as const;
    return this.pool ? { ...handle, logs: this.pool.buffer } : handle;
  }

  /**
   * Bytes of shared memory this limiter holds now (every thread shares them): the table's
   * buffer, and SlidingLog's pool of rings.
   */
  get byteLength(): number {
    return this.buffer.byteLength + (this.pool?.buffer.byteLength ?? 0);
  }

  /** Bytes the buffers may grow to (address space reserved; committed as they grow). */
  get maxByteLength(): number {
    return this.layout.totalMaxBytes;
  }

  /**
   * The key table's counters, shared by every thread: slots, keys inserted, idle slots
   * reclaimed for new keys, and new keys that found no slot (`tableFull`).
   */
  tableStats(): {
    slots: number;
    segments: number;
    inserts: number;
    reclaims: number;
    tableFull: number;
  } {
    const i32 = this.i32;
    return {
      slots: this.table.slotCount(),
      segments: Atomics.load(i32, H_SEGMENTS),
      inserts: Atomics.load(i32, H_INSERTS) >>> 0,
      reclaims: Atomics.load(i32, H_RECLAIMS) >>> 0,
      tableFull: Atomics.load(i32, H_TABLE_FULL) >>> 0,
    };
  }

  /** True once `close()` was called on any thread. */
  get closed(): boolean {
    return (Atomics.load(this.i32, H_CONTROL) & 1) !== 0;
  }

  // ---- what each algorithm provides ----------------------------------------------

  /**
   * The state after granting `permits` at `nowUs`, or REJECT. Pure: reads the state
   * word's payload (decoded relative to `stamp`), never shared memory it does not own.
   * Must keep the generation bits of `state`.
   */
  protected abstract step(state: number, stamp: number, nowUs: number, permits: number): number;
  /**
   * The state after giving back `permits` that were taken at `takenUs` (never above the
   * limit), or `state` itself. Windows credit the window the permits were taken in and drop
   * a give-back whose window has passed: crediting a newer window would over-admit.
   */
  protected abstract giveBack(
    state: number,
    stamp: number,
    nowUs: number,
    permits: number,
    takenUs: number,
  ): number;
  /** Permits grantable now from `state`. */
  protected abstract available(state: number, stamp: number, nowUs: number): number;
  /** Microseconds until `state` is equivalent to a fresh one (0 if it is). */
  protected abstract untilFreshUs(state: number, stamp: number, nowUs: number): number;
  /** A first guess, in µs from `nowUs`, of when `permits` could be granted; refined exactly. */
  protected abstract retryEstimateUs(
    state: number,
    stamp: number,
    nowUs: number,
    permits: number,
  ): number;

  isIdle(state: number, w: number, nowUs: number): boolean {
    this.core.lastWord = w;
    if (this.i32[w + S_STAMP]! < 0) return false; // waiters queued
    return (
      (state & PAYLOAD_MASK) === FRESH ||
      this.untilFreshUs(state, this.stampOf(w, nowUs), nowUs) <= 0
    );
  }

  initSlot(_s: number): void {}

  /**
   * step() for the head of the wait queue. The head wakes when its permits are due, but
   * always a little late (timers, the event loop); algorithms whose schedule is a time line
   * (GCRA) override this to grant at the due time, so the lateness is made up rather than
   * carried into every later waiter's turn.
   */
  protected stepQueued(state: number, stamp: number, nowUs: number, permits: number): number {
    return this.step(state, stamp, nowUs, permits);
  }

  /**
   * @internal Hook after a grant by CAS (SlidingLog writes its entries here, Concurrency
   * its holder record), run by whoever called run(): `before` is the state replaced.
   */
  admitted(_w: number, _before: number, _nowUs: number, _permits: number): void {}

  // ---- the decision path --------------------------------------------------------------

  /**
   * Takes `permits` for `key` if the limit allows, at once; never waits, never allocates.
   * With `queueOrder: 'oldest-first'` it never takes permits ahead of waiting callers.
   */
  tryAcquire(key?: Key, permits = 1): boolean {
    // Every class overrides this with the same call, in a method of its own: see enter().
    const core = this.core;
    const ref = enter(core, this, key, permits, core.clock.nowUs());
    return run(core, this, this.step, ref, permits, key, TRY);
  }

  /** Like `tryAcquire`, and explains the outcome. */
  consume(key?: Key, permits = 1): Decision {
    const allowed = this.tryAcquire(key, permits);
    const core = this.core;
    const nowUs = core.decisionUs;
    if (core.lastWord === NO_SLOT) {
      return {
        allowed,
        remaining: 0,
        limit: this.limit,
        retryAfterMs: allowed ? 0 : this.tableFullRetryUs(key!, nowUs) / 1000,
        resetAfterMs: 0,
        reason: 'table-full',
      };
    }
    const state = core.lastState;
    const stamp = core.lastStamp;
    const decision: Decision = {
      allowed,
      remaining: this.available(state, stamp, nowUs),
      limit: this.limit,
      retryAfterMs: allowed ? 0 : this.retryAfterUs(state, stamp, nowUs, permits) / 1000,
      resetAfterMs: this.untilFreshUs(state, stamp, nowUs) / 1000,
    };
    return allowed ? decision : { ...decision, reason: 'limited' };
  }

  /** A decision for acquire(): its first try, or the head waiter's turn. */
  private attempt(key: Key | undefined, permits: number, nowUs: number, mode: AttemptMode) {
    const core = this.core;
    const step = mode === HEAD ? this.stepQueued : this.step;
    if (!run(core, this, step, enter(core, this, key, permits, nowUs), permits, key, mode)) {
      return false;
    }
    // NO_SLOT: allowed without a slot by whenFull 'allow'.
    if (core.lastWord !== NO_SLOT) this.admitted(core.lastWord, core.priorState, nowUs, permits);
    return true;
  }

  /** @internal A new key found no slot: report it, and decide by `whenFull`. */
  tableFull(key: Key | undefined): boolean {
    if (tableFullChannel.hasSubscribers) {
      tableFullChannel.publish({ limiter: this, key, whenFull: this.whenFull });
    }
    return this.whenFull === 'allow';
  }

  /**
   * When a slot for `key` may be free: the soonest time one of its candidate slots
   * returns to its initial state (and so can be reclaimed). Whole µs, finite.
   */
  private tableFullRetryUs(key: Key, nowUs: number): number {
    const us = this.table.soonestIdleUs(key, (state, w) => {
      this.core.lastWord = w;
      return this.untilFreshUs(state, this.stampOf(w, nowUs), nowUs);
    });
    this.core.lastWord = NO_SLOT;
    return Number.isFinite(us) ? Math.max(1, Math.ceil(us)) : TABLE_FULL_RETRY_MS * 1000;
  }

  /** Exact wait in whole µs: step succeeds at now + r and fails at now + r − 1. */
  protected retryAfterUs(state: number, stamp: number, nowUs: number, permits: number): number {
    const guess = this.retryEstimateUs(state, stamp, nowUs, permits);
    if (!Number.isFinite(guess)) return Number.POSITIVE_INFINITY;
    const ok = (r: number) => this.step(state, stamp, nowUs + r, permits) !== REJECT;
    this.core.probing = true;
    try {
      let hi = Math.max(0, Math.ceil(guess));
      let lo = 0;
      if (ok(hi)) {
        if (hi === 0 || !ok(hi - 1)) return hi;
      } else {
        // The estimate was short (rounding): search upwards, doubling.
        let step = 1;
        do {
          lo = hi + 1;
          hi += step;
          step *= 2;
          if (hi > 2 ** 52) return Number.POSITIVE_INFINITY;
        } while (!ok(hi));
      }
      while (lo < hi) {
        const mid = Math.floor((lo + hi) / 2);
        if (ok(mid)) hi = mid;
        else lo = mid + 1;
      }
      return hi;
    } finally {
      this.core.probing = false;
    }
  }

  // ---- waiting ------------------------------------------------------------------------

  /**
   * Takes `permits` for `key`, waiting in the key's FIFO queue when they are not there
   * yet. Resolves with a Lease (for `Concurrency`, `lease.release()` gives the permits
   * back; for rate limiters it does nothing). Rejects with `QueueFullError` when the queue
   * has no room (or, with `queueOrder: 'newest-first'`, when a newer waiter evicts this
   * one), `LimiterClosedError` on `close()`, the signal's reason (an `AbortError`) when
   * `signal` aborts, and a `TimeoutError` after `timeoutMs`. A waiter that leaves gives
   * its place back; the one behind it is not skipped.
   */
  acquire(key?: Key, permits = 1, options: AcquireOptions = {}): Promise<Lease> {
    try {
      const { signal, timeoutMs } = acquireOptions(this.owner, options);
      if (signal?.aborted) return Promise.reject(signal.reason);
      let w = NO_SLOT;
      let r = MOVED;
      while (r === MOVED) {
        if (this.attempt(key, permits, this.clock.nowUs(), ENQUEUE)) {
          return Promise.resolve(this.leaseFor(key, permits));
        }
        if (this.core.lastWord === NO_SLOT) {
          throw new QueueFullError(
            `${this.owner}: no slot for this key: every candidate slot holds an active key (option "keys")`,
          );
        }
        w = this.core.lastWord;
        try {
          const queueLimit = this.effectiveQueueLimit();
          if (queueLimit === 0) {
            throw new QueueFullError(
              `${this.owner}: option "queueLimit" is 0, so acquire() never waits`,
            );
          }
          // MOVED: the slot went to another key between the attempt and the queue; the
          // waiter must queue where the key is now, so try again from the lookup.
          r = this.queues.enqueue(
            w,
            permits,
            queueLimit,
            !this.core.fifo,
            key === undefined ? -1 : this.core.lastState >>> GEN_SHIFT,
            this.table.epoch,
          );
        } catch (error) {
          Atomics.add(this.i32, w + S_REJECTED, permits); // refused: no room to wait
          throw error;
        }
      }
      return new Promise<Lease>((resolve, reject) => {
        const x: Waiter = {
          key,
          permits,
          sinceUs: this.core.decisionUs,
          w,
          r,
          id: this.queues.id(r),
          resolve,
          reject,
          done: false,
          signal,
          timer: undefined,
          onAbort: undefined,
        };
        if (signal) {
          x.onAbort = () => this.leaveQueue(x, signal.reason);
          signal.addEventListener('abort', x.onAbort, { once: true });
        }
        if (timeoutMs !== undefined) {
          x.timer = setTimeout(
            () => this.leaveQueue(x, new DOMException('The operation timed out.', 'TimeoutError')),
            timeoutMs,
          );
        }
        this.track(x);
        this.pump(x);
      });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The queue limit in permits (LeakyBucket: its capacity). */
  protected effectiveQueueLimit(): number {
    return this.queueLimit;
  }

  private leaseFor(key: Key | undefined, permits: number): Lease {
    return this.releasable ? new HeldLease(this, key, permits) : NO_OP_LEASE;
  }

  /** Whether a Lease gives its permits back on release (Concurrency). */
  protected get releasable(): boolean {
    return false;
  }

  /** @internal Gives a Concurrency lease's permits back. */
  giveLeaseBack(key: Key | undefined, permits: number): void {
    this.refund(key, permits);
  }

  /** Runs a waiter until it parks (Atomics.waitAsync) or settles. */
  private pump(x: Waiter): void {
    try {
      this.pumpOnce(x);
    } catch (error) {
      // close() from another thread between our checks and attempt() makes attempt()
      // throw; whatever it is, the waiter settles instead of hanging.
      this.leaveQueue(x, error);
    }
  }

  private pumpOnce(x: Waiter): void {
    const i32 = this.i32;
    const manual = this.clock instanceof ManualClock ? this.clock : undefined;
    for (let spins = 0; !x.done; spins++) {
      const status = this.queues.status(x.r);
      const ours = this.queues.id(x.r) === x.id;
      if ((Atomics.load(i32, H_CONTROL) & 1) !== 0 || (ours && status === W_CLOSED)) {
        this.leaveQueue(x, new LimiterClosedError());
        return;
      }
      if (!ours || status === W_EVICTED) {
        this.settle(x, ours ? this.evictedError() : this.skippedError());
        return;
      }
      // Read the words we may park on before looking: a wake-up after this read changes
      // them, so waitAsync returns at once instead of missing it.
      const futex = this.queues.futex(x.r);
      const seen = Atomics.load(i32, futex);
      const tick = manual?.tickWord;
      const tickSeen = tick ? Atomics.load(tick.words, tick.index) : 0;
      let timeoutMs = Number.POSITIVE_INFINITY;
      let head = false;
      if (this.queues.isHead(x.w, x.r)) {
        head = true;
        const nowUs = this.clock.nowUs();
        this.core.queuedSinceUs = x.sinceUs;
        if (this.attempt(x.key, x.permits, nowUs, HEAD)) {
          const was = this.queues.leave(x.w, x.r, x.id);
          if (was === W_WAITING) {
            this.settle(x, null, this.leaseFor(x.key, x.permits));
            return;
          }
          // Evicted, closed or swept while taking them: exactly one outcome, so give them
          // back.
          this.giveBackUnchecked(x.key, x.permits, nowUs);
          this.settle(
            x,
            was === W_EVICTED
              ? this.evictedError()
              : was === W_FREE
                ? this.skippedError()
                : new LimiterClosedError(),
          );
          return;
        }
        timeoutMs =
          this.retryAfterUs(this.core.lastState, this.core.lastStamp, nowUs, x.permits) / 1000;
        // A coarse clock moves once per resolution: waiting less would wake to the same
        // time and wait again, spinning until its next tick.
        if (this.clock instanceof CoarseClock) {
          timeoutMs = Math.max(timeoutMs, this.clock.resolutionMs);
        }
      }
      let result: ReturnType<typeof Atomics.waitAsync>;
      if (head && tick) {
        // Under a ManualClock time moves only by advance()/set(), which tick this word;
        // releases tick it too.
        result = Atomics.waitAsync(tick.words, tick.index, tickSeen);
      } else {
        result = Number.isFinite(timeoutMs)
          ? Atomics.waitAsync(i32, futex, seen, Math.max(timeoutMs, 0.001))
          : Atomics.waitAsync(i32, futex, seen);
      }
      if (result.async) {
        result.value.then(() => this.pump(x));
        return;
      }
      if (spins > 1000) {
        // Never expected; a guard against a livelock turning into a busy loop.
        setImmediate(() => this.pump(x));
        return;
      }
    }
  }

  private evictedError(): QueueFullError {
    return new QueueFullError(
      `${this.owner}: evicted by a newer waiter (queueOrder "newest-first")`,
    );
  }

  private skippedError(): QueueFullError {
    return new QueueFullError(
      `${this.owner}: the waiter was skipped: its thread was silent for too long`,
    );
  }

  /** The waiter leaves (abort, timeout, close): out of the queue, then settled. */
  private leaveQueue(x: Waiter, error: unknown): void {
    if (x.done) return;
    this.queues.leave(x.w, x.r, x.id);
    this.settle(x, error);
  }

  private settle(x: Waiter, error: unknown, lease?: Lease): void {
    if (x.done) return;
    x.done = true;
    if (x.timer) clearTimeout(x.timer);
    if (x.onAbort) x.signal?.removeEventListener('abort', x.onAbort);
    if (this.queues.id(x.r) === x.id) this.queues.free(x.r);
    this.untrack(x);
    if (lease) x.resolve(lease);
    else x.reject(error);
  }

  // A pending Atomics.waitAsync does not keep Node's event loop alive. While this thread
  // has waiters, one interval per limiter (not per key) does: it also proves the thread
  // alive to the others, and removes dead threads' waiters from the heads of our queues.
  private track(x: Waiter): void {
    this.waiting.add(x);
    if (this.heartbeatTimer) return;
    this.heartbeatTimer = setInterval(() => {
      this.queues.heartbeat();
      this.onHeartbeat();
      const seen = new Set<number>();
      for (const y of this.waiting) {
        if (!seen.has(y.w)) {
          seen.add(y.w);
          this.queues.sweep(y.w);
        }
      }
    }, HEARTBEAT_MS);
  }

  private untrack(x: Waiter): void {
    this.waiting.delete(x);
    if (this.waiting.size === 0 && this.heartbeatTimer) {
      clearInterval(this.heartbeatTimer);
      this.heartbeatTimer = undefined;
    }
  }

  /** After permits came back to slot `w`: wake its head waiter, if it has waiters. */
  protected wakeWaiters(w: number): void {
    if (this.i32[w + S_STAMP]! >= 0) return; // nobody waits: no notify (it costs ~50 ns)
    this.queues.wakeHead(w);
    if (this.clock instanceof ManualClock) this.clock.tick();
  }

  // ---- the rest of the API ------------------------------------------------------------

  /**
   * Gives `permits` back to `key` (never above its limit), as permits taken just now: a
   * window credits its current window. Unknown keys are a no-op.
   */
  refund(key?: Key, permits = 1): void {
    this.refundTaken(key, permits, Number.NaN);
  }

  /**
   * @internal refund() of permits taken at `takenUs` on this limiter's clock (NaN: now).
   * The chain's rollback, acquire()'s give-back and the cluster's blocks use it, so that a
   * give-back reaching a window after the one the permits came from is dropped.
   */
  refundTaken(key: Key | undefined, permits: number, takenUs: number): void {
    this.checkOpen();
    if (!(permits >= 1 && permits <= this.limit) || (permits | 0) !== permits) {
      throw permitsError(`${this.owner}.refund`, permits, this.limit);
    }
    this.giveBackUnchecked(key, permits, takenUs);
  }

  /** @internal The clock time of this thread's last decision (the chain's rollback reads it). */
  get lastDecisionUs(): number {
    return this.core.decisionUs;
  }

  /** refund() without the closed check: a waiter settling during close() still returns what it took. */
  protected giveBackUnchecked(key: Key | undefined, permits: number, takenUs: number): void {
    const nowUs = this.clock.nowUs();
    const at = Number.isNaN(takenUs) ? nowUs : takenUs;
    let before = 0;
    const next = this.update(key, nowUs, (s, stamp) => {
      before = s;
      return this.giveBack(s, stamp, nowUs, permits, at);
    });
    if (next !== NO_SLOT && next !== before) this.gaveBack(this.core.lastWord, before, next);
  }

  /** Hook after permits went back to slot word `w` (Concurrency updates its holder records). */
  protected gaveBack(_w: number, _before: number, _after: number): void {}

  /** Hook on every heartbeat of a thread with waiters (Concurrency looks for dead holders). */
  protected onHeartbeat(): void {}

  /** The key's counters and the permits available now; a key never seen reads as fresh. */
  stats(key?: Key): Stats {
    const nowUs = this.clock.nowUs();
    const ref = this.table.find(key);
    if (ref === NO_SLOT)
      return { available: this.limitWhenFresh(), queued: 0, admitted: 0, rejected: 0 };
    const w = ref >>> 4;
    this.core.lastWord = w;
    const s = Atomics.load(this.i32, w + S_STATE);
    const stamp = this.stampOf(w, nowUs);
    return {
      available: this.available(s, stamp, nowUs),
      queued: this.queues.waitingPermits(w),
      admitted: Atomics.load(this.i32, w + S_ADMITTED) >>> 0,
      rejected: Atomics.load(this.i32, w + S_REJECTED) >>> 0,
    };
  }

  /** Puts `key` back in its initial state and zeroes its counters. */
  reset(key?: Key): void {
    this.checkOpen();
    const ref = this.table.find(key);
    if (ref === NO_SLOT) return;
    this.resetSlot(ref);
    Atomics.store(this.i32, (ref >>> 4) + S_ADMITTED, 0);
    Atomics.store(this.i32, (ref >>> 4) + S_REJECTED, 0);
    this.wakeWaiters(ref >>> 4);
  }

  protected resetSlot(ref: number): void {
    const w = ref >>> 4;
    for (;;) {
      const s = Atomics.load(this.i32, w + S_STATE);
      if (s >>> GEN_SHIFT !== (ref & 15) || (s & PAYLOAD_MASK) === RESERVED) return;
      if (Atomics.compareExchange(this.i32, w + S_STATE, s, (s & GEN_MASK) | FRESH) === s) return;
    }
  }

  /**
   * Closes the limiter for every thread sharing it: every later call, on any thread,
   * throws `LimiterClosedError`.
   */
  close(): void {
    Atomics.or(this.i32, H_CONTROL, 1);
    this.queues.closeAll();
    if (this.clock instanceof ManualClock) this.clock.tick();
  }

  protected checkOpen(): void {
    if ((Atomics.load(this.i32, H_CONTROL) & 1) !== 0) throw new LimiterClosedError();
  }

  protected limitWhenFresh(): number {
    return this.available(FRESH, 0, this.clock.nowUs());
  }

  /** Applies `f` to the key's state by CAS until it sticks; no-op for unknown keys. */
  protected update(
    key: Key | undefined,
    nowUs: number,
    f: (state: number, stamp: number) => number,
  ): number {
    let ref = this.table.find(key);
    for (;;) {
      if (ref === NO_SLOT) return NO_SLOT;
      const w = ref >>> 4;
      const s = Atomics.load(this.i32, w + S_STATE);
      if (
        s >>> GEN_SHIFT !== (ref & 15) ||
        (s & PAYLOAD_MASK) === RESERVED ||
        (key !== undefined && Atomics.load(this.i32, H_CONTROL) - this.table.epoch >= GEN_SAFE_SPAN)
      ) {
        ref = this.table.find(key);
        continue;
      }
      this.core.lastWord = w;
      const next = f(s, this.stampOf(w, nowUs));
      if (next === s) return next;
      if (Atomics.compareExchange(this.i32, w + S_STATE, s, next) === s) {
        this.wakeWaiters(w);
        return next;
      }
    }
  }

  /** The slot's stamp, unwrapped relative to `nowUs` (see STAMP_US). */
  protected stampOf(w: number, nowUs: number): number {
    const stampNow = Math.floor((nowUs - this.epochUs) * STAMP_PER_US);
    return unwrapStamp(this.i32[w + S_STAMP]!, stampNow);
  }

  /** Slot number of a packed reference (for algorithms with per-slot memory). */
  protected slotOfRef(ref: number): number {
    return slotOfHotWord(this.layout, ref >>> 4);
  }

  /** Decodes a time-like payload field of `bits` bits relative to `ref` (any integer). */
  protected static near(field: number, ref: number, bits: number): number {
    const shift = 32 - bits;
    return ref + (((field - ref) << shift) >> shift);
  }
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** A fixed-length Int32 view of the whole buffer as long as it is now. */
function fixedView(buffer: SharedArrayBuffer): Int32Array {
  return new Int32Array(buffer, 0, buffer.byteLength >> 2);
}

/** Reads a limiter's header for attach(): algorithm id, or throws a clear error. */
export function headerAlgo(buffer: SharedArrayBuffer): number {
  const i32 = new Int32Array(buffer, 0, Math.min(16, buffer.byteLength >> 2));
  if (buffer.byteLength < 256 || Atomics.load(i32, H_MAGIC) !== MAGIC) {
    throw typeError('attach: the buffer is not an atomic-limiter buffer (wrong magic)');
  }
  const version = Atomics.load(i32, H_VERSION);
  if (version !== LAYOUT_VERSION) {
    throw typeError(
      `attach: the buffer has layout version ${version}; this copy of atomic-limiter reads version ${LAYOUT_VERSION}`,
    );
  }
  if (Atomics.load(i32, H_BYTES_DIV64) * 64 > buffer.byteLength) {
    throw typeError('attach: the buffer size does not match its header');
  }
  return Atomics.load(i32, H_ALGO);
}

/** Options of `acquire()`. */
export interface AcquireOptions {
  /** Aborting it removes the waiter; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Longest wait in milliseconds; then the promise rejects with a `TimeoutError`. */
  timeoutMs?: number;
}

/** What `acquire()` resolves with. Releasing twice is harmless. */
export interface Lease {
  /** Gives the permits back (`Concurrency`); a no-op for rate limiters. */
  release(): void;
  [Symbol.dispose](): void;
}

interface Waiter {
  key: Key | undefined;
  permits: number;
  /** The time of the refused attempt that queued it. */
  sinceUs: number;
  w: number;
  r: number;
  id: number;
  resolve: (lease: Lease) => void;
  reject: (error: unknown) => void;
  done: boolean;
  signal: AbortSignal | undefined;
  timer: ReturnType<typeof setTimeout> | undefined;
  onAbort: (() => void) | undefined;
}

const NO_OP_LEASE: Lease = Object.freeze({
  release(): void {},
  [Symbol.dispose](): void {},
});

class HeldLease implements Lease {
  private held = true;
  constructor(
    private readonly limiter: Limiter,
    private readonly key: Key | undefined,
    private readonly permits: number,
  ) {}
  release(): void {
    if (!this.held) return;
    this.held = false;
    this.limiter.giveLeaseBack(this.key, this.permits);
  }
  [Symbol.dispose](): void {
    this.release();
  }
}
