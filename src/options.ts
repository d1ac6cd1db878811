import {
  type Clock,
  type ClockHandle,
  ManualClock,
  MonotonicClock,
  monotonicClock,
} from './clock.js';
import { CoarseClock } from './coarse-clock.js';
import {
  checkOptionsObject,
  enumOption,
  integerOption,
  rangeError,
  show,
  typeError,
} from './validate.js';

/** Hard ceiling of a limiter's buffer (the layout keeps byte offsets below 2^31). */
export const MAX_BUFFER_BYTES = 2 ** 31 - 2 ** 16;
/** Default budget of shared memory per limiter (option `maxBytes`). */
export const DEFAULT_MAX_BYTES = 256 * 2 ** 20;

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
   * `whenUnavailable` `'allow'` / `'deny'`, and a fallback limiter's grant); `'table-full'`
   * also on a new key allowed without state by `whenFull: 'allow'`. A grant with a reason
   * took nothing from the limiter: chain() and refundWhen give it nothing back.
   */
  readonly reason?: 'limited' | 'table-full' | 'unavailable';
}

/** Per-key counters and the permits available now. */
export interface Stats {
  /** Permits a call could take now (for Concurrency: the limit less those held). */
  readonly available: number;
  /** Permits waiting in `acquire()` for this key, on every thread. */
  readonly queued: number;
  /** Permits granted since the key entered the table (wraps at 2^32). */
  readonly admitted: number;
  /** Permits refused since the key entered the table (wraps at 2^32). */
  readonly rejected: number;
}

/** Who `acquire()` serves first: the oldest waiter, or the newest (which evicts the oldest when full). */
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
  /**
   * Where the shared state lives (default: a new SharedArrayBuffer of this process).
   * `hostMemory(name)` from `atomic-limiter/host` puts it in a named region every process
   * of the host can open: the first creates it, the others attach to it.
   */
  memory?: MemoryProvider;
}

/**
 * A source of shared memory for a limiter (or a ManualClock) other than a new
 * SharedArrayBuffer: `hostMemory()` of `atomic-limiter/host` is one. The core never loads
 * one itself; it calls `open()` once, from the constructor.
 */
export interface MemoryProvider {
  /** What kind of memory this is, for messages ('host'). */
  readonly kind: string;
  /** Largest bytes the region may hold; a limiter's "maxBytes" defaults to it. */
  readonly maxBytes?: number;
  /**
   * Creates the region and calls `request.init` on its buffers, or attaches to the region
   * of that name and checks it holds `request.owner` with the same options and layout
   * version (an error naming the option and both values if not). Every buffer returned
   * behaves like a growable SharedArrayBuffer: `byteLength` is the part's length now,
   * `grow()` lengthens it (within `maxBytes`) for every process at once.
   */
  open(request: MemoryRequest): MemoryRegion;
}

/** What a limiter asks of a MemoryProvider. */
export interface MemoryRequest {
  /** The class whose state the region holds ('TokenBucket', …, 'ManualClock'). */
  readonly owner: string;
  /** The layout version of this copy of the engine: a region of another one is refused. */
  readonly layoutVersion: number;
  /** The options that must be equal in every process sharing the region, by name. */
  readonly options: Readonly<Record<string, string | number | boolean>>;
  /** The buffers to hold, in order: each one's bytes at creation and at most. */
  readonly parts: readonly { readonly bytes: number; readonly maxBytes: number }[];
  /** Writes the initial state; called only in the process that creates the region. */
  init(buffers: readonly SharedArrayBuffer[]): void;
}

/** An opened region. */
export interface MemoryRegion {
  /** One buffer per requested part, in order. */
  readonly buffers: readonly SharedArrayBuffer[];
  /** True in the process that created (and initialised) it. */
  readonly created: boolean;
  /** The region's name, for messages and for recording which clock a limiter reads. */
  readonly name: string;
  /**
   * Called once the creator's constructor has finished writing: processes attaching
   * meanwhile wait for it. A no-op when attached.
   */
  publish(): void;
  /** Judges the threads of other processes by their process, not only by heartbeat age. */
  readonly liveness?: Liveness;
  /** Waiting that crosses processes (Atomics.wait and notify reach one process only). */
  readonly waits?: Waits;
}

/**
 * What `Atomics.waitAsync` returns, spelled out so that the published types need no
 * `lib` newer than the user's.
 */
export type WaitAsyncResult =
  | { async: false; value: 'not-equal' | 'timed-out' }
  | { async: true; value: Promise<'ok' | 'timed-out'> };

/** Waiting on words of a memory shared with other processes. */
export interface Waits {
  /** After `Atomics.notify(words, index)`: wakes the waiters of other processes too. */
  notify(words: Int32Array, index: number): void;
  /** As `Atomics.waitAsync`, and also woken by notify() from any process. */
  waitAsync(words: Int32Array, index: number, value: number, timeoutMs?: number): WaitAsyncResult;
}

/**
 * Tells that the thread behind an entry of a limiter's thread table is gone sooner than
 * its heartbeat's age can: host memory knows each entry's process and asks the system.
 */
export interface Liveness {
  /** This thread took thread-table entry `entry` with `token`. */
  claimed(entry: number, token: number): void;
  /** True only when the owner of `entry`'s `token` is known to have exited; else false. */
  dead(entry: number, token: number): boolean;
}

/** What travels to another thread: `new Worker(file, { workerData: limiter.handle })`. */
export interface LimiterHandle {
  /** Marks a limiter's handle. */
  readonly kind: 'atomic-limiter';
  /** The shared buffer's layout version, checked by `attach()`. */
  readonly version: number;
  /** The limiter's shared state. */
  readonly buffer: SharedArrayBuffer;
  /** The clock every thread of the limiter reads. */
  readonly clock: ClockHandle;
  /** SlidingLog only: the pool of its log rings (a second buffer that grows with use). */
  readonly logs?: SharedArrayBuffer;
}

/** What a new key gets when the table has no slot for it: a refusal, or a pass. */
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
  'memory',
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
  /** Where the state lives when not in a new buffer (see CommonOptions.memory). */
  readonly memory?: MemoryProvider;
  /** The options, by name, every process sharing `memory` must give alike. */
  readonly described?: Readonly<Record<string, string | number | boolean>>;
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
  const memory = memoryOption(owner, opts.memory);
  const ceiling = memory?.maxBytes ?? MAX_BUFFER_BYTES;
  const maxBytes = integerOption(
    owner,
    'maxBytes',
    opts.maxBytes,
    2 ** 16,
    MAX_BUFFER_BYTES,
    Math.min(DEFAULT_MAX_BYTES, ceiling),
  );
  if (memory && maxBytes > ceiling) {
    throw rangeError(
      `${owner}: option "maxBytes" (${maxBytes}) is past the ${memory.kind} memory's ceiling (its "maxBytes", ${ceiling})`,
    );
  }
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
  if (memory && clock instanceof ManualClock && clock.region === undefined) {
    throw typeError(
      `${owner}: option "clock": a ManualClock read by a limiter on ${memory.kind} memory must be on it too (new ManualClock(0, { memory }))`,
    );
  }
  const common = {
    keys,
    maxKeys,
    maxKeysGiven,
    queueLimit,
    queueOrder,
    maxWaiters,
    whenFull,
    maxBytes,
    clock: clock as Clock,
  };
  return {
    opts,
    common: memory
      ? { ...common, memory, described: describe(opts, own, common, clock as Clock) }
      : common,
  };
}

function memoryOption(owner: string, memory: unknown): MemoryProvider | undefined {
  if (memory === undefined) return undefined;
  const m = memory as Partial<MemoryProvider> | null;
  if (typeof m !== 'object' || m === null || typeof m.open !== 'function') {
    throw typeError(
      `${owner}: option "memory" must be a memory provider (hostMemory(name) from atomic-limiter/host), got ${show(memory)}`,
    );
  }
  return m as MemoryProvider;
}

/**
 * The options that decide a limiter's behaviour, by name: the class's own as given, the
 * common ones as read (defaults filled in), and the clock's kind (a ManualClock by its
 * region): every process sharing one region must give the same.
 */
function describe(
  opts: Record<string, unknown>,
  own: readonly string[],
  common: Omit<Fresh, 'params' | 'logRing'>,
  clock: Clock,
): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const name of own) {
    const v = opts[name];
    if (typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean') out[name] = v;
  }
  out.keys = common.keys;
  out.maxKeys = common.maxKeys;
  out.queueLimit = common.queueLimit;
  out.queueOrder = common.queueOrder;
  out.maxWaiters = common.maxWaiters;
  out.whenFull = common.whenFull;
  out.maxBytes = common.maxBytes;
  out.clock =
    clock instanceof ManualClock
      ? `ManualClock(${clock.region})`
      : clock instanceof CoarseClock
        ? 'CoarseClock'
        : 'MonotonicClock';
  return out;
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
