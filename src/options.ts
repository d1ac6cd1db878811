import {
  type Clock,
  type ClockHandle,
  ManualClock,
  MonotonicClock,
  monotonicClock,
} from './clock.js';
import { CoarseClock } from './coarse-clock.js';
import { DEFAULT_MAX_BYTES, MAX_BUFFER_BYTES } from './layout.js';
import {
  checkOptionsObject,
  enumOption,
  integerOption,
  rangeError,
  show,
  typeError,
} from './validate.js';

// The public shapes of a limiter (its options, decisions, handle, leases), and the
// reading of the options every limiter takes.

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
  | 'Concurrency'
  | 'WarmingBucket';

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
  /** A wide table: the options need more than the 32-bit state word holds. */
  readonly wide?: boolean;
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
  // Every MonotonicClock reads the one monotonic time line: any of them is the default.
  const given = opts.clock ?? monotonicClock;
  const clock = given instanceof MonotonicClock ? monotonicClock : given;
  if (
    typeof clock !== 'object' ||
    clock === null ||
    typeof (clock as Clock).nowUs !== 'function' ||
    !(clock === monotonicClock || clock instanceof ManualClock || clock instanceof CoarseClock)
  ) {
    throw typeError(
      `${owner}: option "clock" must be a ManualClock, a CoarseClock or a MonotonicClock (the default), got ${show(clock)}`,
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
