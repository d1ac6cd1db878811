import { type Clock, type ClockHandle, ManualClock, monotonicClock } from './clock.js';
import { LimiterClosedError } from './errors.js';
import {
  computeLayout,
  F64_EPOCH_US,
  F64_PARAMS,
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_ALGO,
  H_BYTES_DIV64,
  H_CONTROL,
  H_KEYS,
  H_LOG_RING,
  H_MAGIC,
  H_QUEUE_LIMIT,
  H_QUEUE_ORDER,
  H_SEED0,
  H_SEED1,
  H_SLOTS,
  H_STRIPES,
  H_VERSION,
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
  STAMP_US,
  slotOfHotWord,
} from './layout.js';
import { type Key, NO_SLOT, type SlotPolicy, SlotTable } from './table.js';
import { checkOptionsObject, enumOption, integerOption, permitsError, show } from './validate.js';

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
  /** Why a refusal happened: the limit, or no slot for a new key (`'table-full'`). */
  readonly reason?: 'limited' | 'table-full';
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

/** Options every limiter takes. */
export interface CommonOptions {
  /**
   * Distinct keys the shared table holds at once (minimum 1, default 10 000). Keys idle
   * in their initial state are reclaimed when space is needed; when every candidate slot
   * of a new key is busy, decisions for it are refused with `reason: 'table-full'`.
   */
  keys?: number;
  /** Permits that may wait per key in `acquire()`; 0 (default) means never wait. */
  queueLimit?: number;
  /** `'oldest-first'` (default, FIFO) or `'newest-first'` (evicts the oldest waiter). */
  queueOrder?: QueueOrder;
  /** The clock (default: the host's monotonic clock). Pass a `ManualClock` in tests. */
  clock?: Clock;
}

/** What travels to another thread: `new Worker(file, { workerData: limiter.handle })`. */
export interface LimiterHandle {
  readonly kind: 'atomic-limiter';
  readonly version: number;
  readonly buffer: SharedArrayBuffer;
  readonly clock: ClockHandle;
}

export const COMMON_OPTIONS = ['keys', 'queueLimit', 'queueOrder', 'clock'] as const;
const MAX_KEYS = 1 << 22;

/** A buffer and clock to attach to (from `attach()`); never built by users. */
export class Attached {
  constructor(
    readonly buffer: SharedArrayBuffer,
    readonly clock: Clock,
  ) {}
}

/** A validated new limiter: its options packed for the header. */
export interface Fresh {
  readonly params: readonly number[];
  readonly logRing: number;
  readonly keys: number;
  readonly queueLimit: number;
  readonly queueOrder: QueueOrder;
  readonly clock: Clock;
}

export function readCommon(
  owner: string,
  options: unknown,
  own: readonly string[],
): { opts: Record<string, unknown>; common: Omit<Fresh, 'params' | 'logRing'> } {
  const opts = checkOptionsObject(owner, options, [...own, ...COMMON_OPTIONS]);
  const keys = integerOption(owner, 'keys', opts.keys, 1, MAX_KEYS, 10_000);
  const queueLimit = integerOption(owner, 'queueLimit', opts.queueLimit, 0, 2 ** 31 - 1, 0);
  const queueOrder = enumOption<QueueOrder>(
    owner,
    'queueOrder',
    opts.queueOrder,
    ['oldest-first', 'newest-first'],
    'oldest-first',
  );
  const clock = opts.clock ?? monotonicClock;
  if (
    typeof clock !== 'object' ||
    clock === null ||
    typeof (clock as Clock).nowUs !== 'function' ||
    !(clock === monotonicClock || clock instanceof ManualClock)
  ) {
    throw new TypeError(
      `${owner}: option "clock" must be a ManualClock (or omitted for the monotonic clock), got ${show(clock)}`,
    );
  }
  return { opts, common: { keys, queueLimit, queueOrder, clock: clock as Clock } };
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
  readonly keys: number;
  readonly queueLimit: number;
  readonly queueOrder: QueueOrder;
  protected readonly i32: Int32Array;
  protected readonly f64: Float64Array;
  protected readonly layout: Layout;
  protected readonly table: SlotTable;
  protected readonly epochUs: number;
  protected readonly buffer: SharedArrayBuffer;
  protected readonly defaultRef: number;
  // Written by attempt() for consume(): the word, state and stamp the decision used.
  // Plain fields on a per-thread object: nothing allocated per call. `lastWord` is also
  // the slot every algorithm function is called for (SlidingLog reads its ring there).
  protected lastWord = 0;
  protected lastState = 0;
  protected lastStamp = 0;
  /** The time of the last attempt() (SlidingLog reads it while probing future times). */
  protected decisionUs = 0;
  /** True while retryAfterUs() evaluates step() at future times. */
  protected probing = false;

  protected constructor(
    protected readonly owner: string,
    algo: number,
    source: Fresh | Attached,
  ) {
    if (source instanceof Attached) {
      this.buffer = source.buffer;
      this.clock = source.clock;
      this.i32 = new Int32Array(this.buffer);
      this.f64 = new Float64Array(this.buffer, 0, 16);
      const i32 = this.i32;
      this.layout = computeLayout(i32[H_KEYS]!, i32[H_LOG_RING]!);
      if (i32[H_ALGO] !== algo || this.layout.bytes !== this.buffer.byteLength) {
        throw new TypeError(`${owner}: the buffer does not belong to a ${owner}`);
      }
    } else {
      const layout = computeLayout(source.keys, source.logRing);
      if (layout.bytes > MAX_BUFFER_BYTES) {
        throw new RangeError(
          `${owner}: ${show(source.keys)} keys need ${layout.bytes} bytes of shared memory, more than the ${MAX_BUFFER_BYTES} allowed; lower "keys"`,
        );
      }
      this.layout = layout;
      this.buffer = new SharedArrayBuffer(layout.bytes);
      this.clock = source.clock;
      this.i32 = new Int32Array(this.buffer);
      this.f64 = new Float64Array(this.buffer, 0, 16);
      const i32 = this.i32;
      i32[H_VERSION] = LAYOUT_VERSION;
      i32[H_ALGO] = algo;
      i32[H_SLOTS] = layout.slots;
      i32[H_STRIPES] = layout.stripes;
      i32[H_SEED0] = randomSeed();
      i32[H_SEED1] = randomSeed();
      i32[H_KEYS] = source.keys;
      i32[H_QUEUE_LIMIT] = source.queueLimit;
      i32[H_QUEUE_ORDER] = source.queueOrder === 'newest-first' ? 1 : 0;
      i32[H_LOG_RING] = source.logRing;
      i32[H_BYTES_DIV64] = layout.bytes / 64;
      source.params.forEach((p, k) => {
        this.f64[F64_PARAMS + k] = p;
      });
      this.f64[F64_EPOCH_US] = Math.floor(this.clock.nowUs());
      for (let s = 0; s <= layout.slots; s++) i32[hotWord(layout, s) + S_STATE] = FRESH;
      // Magic last: a thread that sees it sees a complete header.
      Atomics.store(i32, H_MAGIC, MAGIC);
    }
    this.keys = this.i32[H_KEYS]!;
    this.queueLimit = this.i32[H_QUEUE_LIMIT]!;
    this.queueOrder = this.i32[H_QUEUE_ORDER] === 1 ? 'newest-first' : 'oldest-first';
    this.epochUs = this.f64[F64_EPOCH_US]!;
    this.table = new SlotTable(this.i32, this.layout, owner);
    this.defaultRef = this.table.defaultSlot;
  }

  /** The algorithm's stored options, in the order the subclass wrote them. */
  protected param(k: number): number {
    return this.f64[F64_PARAMS + k]!;
  }

  /** Pass to another thread and `attach()` it there: same limiter, same state. */
  get handle(): LimiterHandle {
    return {
      kind: 'atomic-limiter',
      version: LAYOUT_VERSION,
      buffer: this.buffer,
      clock: this.clock.handle,
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
  /** The state after giving `permits` back (never above the limit), or `state` itself. */
  protected abstract giveBack(state: number, stamp: number, nowUs: number, permits: number): number;
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
    this.lastWord = w;
    return (
      (state & PAYLOAD_MASK) === FRESH ||
      this.untilFreshUs(state, this.stampOf(w, nowUs), nowUs) <= 0
    );
  }

  initSlot(_s: number): void {}

  /** Hook after a successful CAS (SlidingLog writes its entries here). */
  protected admitted(_w: number, _before: number, _nowUs: number, _permits: number): void {}

  // ---- the decision path --------------------------------------------------------------

  /**
   * Takes `permits` for `key` if the limit allows, at once; never waits, never allocates.
   * With `queueOrder: 'oldest-first'` it never takes permits ahead of waiting callers.
   */
  tryAcquire(key?: Key, permits = 1): boolean {
    return this.attempt(key, permits, this.clock.nowUs());
  }

  /** Like `tryAcquire`, and explains the outcome. */
  consume(key?: Key, permits = 1): Decision {
    const nowUs = this.clock.nowUs();
    const allowed = this.attempt(key, permits, nowUs);
    if (this.lastWord === NO_SLOT) {
      return {
        allowed: false,
        remaining: 0,
        limit: this.limit,
        retryAfterMs: Number.POSITIVE_INFINITY,
        resetAfterMs: 0,
        reason: 'table-full',
      };
    }
    const state = this.lastState;
    const stamp = this.lastStamp;
    const decision: Decision = {
      allowed,
      remaining: this.available(state, stamp, nowUs),
      limit: this.limit,
      retryAfterMs: allowed ? 0 : this.retryAfterUs(state, stamp, nowUs, permits) / 1000,
      resetAfterMs: this.untilFreshUs(state, stamp, nowUs) / 1000,
    };
    return allowed ? decision : { ...decision, reason: 'limited' };
  }

  protected attempt(key: Key | undefined, permits: number, nowUs: number): boolean {
    const i32 = this.i32;
    // One read of the control word serves the closed check and the cache's epoch check.
    const control = i32[H_CONTROL]!;
    if (
      (control & 1) !== 0 ||
      !(permits >= 1 && permits <= this.limit) ||
      (permits | 0) !== permits
    ) {
      throw this.callError(permits);
    }
    this.decisionUs = nowUs;
    let ref = key === undefined ? this.defaultRef : this.table.slotOf(key, control, nowUs, this);
    // Stamps are 2^20 µs: multiplying by 2^-20 is exact.
    const stampNow = Math.floor((nowUs - this.epochUs) * STAMP_PER_US);
    for (;;) {
      if (ref === NO_SLOT) {
        this.lastWord = NO_SLOT;
        return false;
      }
      const w = ref >>> 4;
      // A plain read is enough: the CAS below validates it.
      const s = i32[w + S_STATE]!;
      if (s >>> GEN_SHIFT !== (ref & 15) || (s & PAYLOAD_MASK) === RESERVED) {
        // The slot went to another key (or is being rebuilt): look the key up again.
        ref = this.table.refresh(key, nowUs, this);
        continue;
      }
      // Read after the state: a stamp is stored before its state's CAS, so this stamp is
      // as new as the write that produced `s`, or (reordered) older by nanoseconds; the
      // decode tolerates a stamp minutes old.
      const raw = i32[w + S_STAMP]!;
      const stamp = stampNow + ((raw - stampNow) | 0);
      this.lastWord = w;
      this.lastState = s;
      this.lastStamp = stamp;
      const next = this.step(s, stamp, nowUs, permits);
      if (next === REJECT) {
        Atomics.add(i32, w + S_REJECTED, permits);
        return false;
      }
      if (stampNow > stamp) this.raiseStamp(w, raw, stampNow);
      if (Atomics.compareExchange(i32, w + S_STATE, s, next) === s) {
        this.lastState = next;
        Atomics.add(i32, w + S_ADMITTED, permits);
        this.admitted(w, s, nowUs, permits);
        return true;
      }
    }
  }

  /** Moves the slot's stamp up to `stampNow` (once a second per active key at most). */
  private raiseStamp(w: number, raw: number, stampNow: number): void {
    Atomics.compareExchange(this.i32, w + S_STAMP, raw, stampNow | 0);
    this.lastStamp = stampNow;
  }

  /** The error for a call refused before deciding: closed limiter or bad permits. */
  private callError(permits: unknown): Error {
    if ((Atomics.load(this.i32, H_CONTROL) & 1) !== 0) return new LimiterClosedError();
    return permitsError(this.owner, permits, this.limit);
  }

  /** Exact wait in whole µs: step succeeds at now + r and fails at now + r − 1. */
  protected retryAfterUs(state: number, stamp: number, nowUs: number, permits: number): number {
    const guess = this.retryEstimateUs(state, stamp, nowUs, permits);
    if (!Number.isFinite(guess)) return Number.POSITIVE_INFINITY;
    const ok = (r: number) => this.step(state, stamp, nowUs + r, permits) !== REJECT;
    this.probing = true;
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
      this.probing = false;
    }
  }

  // ---- the rest of the API ------------------------------------------------------------

  /** Gives `permits` back to `key` (never above its limit). Unknown keys are a no-op. */
  refund(key?: Key, permits = 1): void {
    const nowUs = this.clock.nowUs();
    this.checkOpen();
    if (!(permits >= 1 && permits <= this.limit) || (permits | 0) !== permits) {
      throw permitsError(`${this.owner}.refund`, permits, this.limit);
    }
    this.update(key, nowUs, (s, stamp) => this.giveBack(s, stamp, nowUs, permits));
  }

  /** The key's counters and the permits available now; a key never seen reads as fresh. */
  stats(key?: Key): Stats {
    const nowUs = this.clock.nowUs();
    const ref = this.table.find(key);
    if (ref === NO_SLOT)
      return { available: this.limitWhenFresh(), queued: 0, admitted: 0, rejected: 0 };
    const w = ref >>> 4;
    this.lastWord = w;
    const s = Atomics.load(this.i32, w + S_STATE);
    const stamp = this.stampOf(w, nowUs);
    return {
      available: this.available(s, stamp, nowUs),
      queued: 0,
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
      if (s >>> GEN_SHIFT !== (ref & 15) || (s & PAYLOAD_MASK) === RESERVED) {
        ref = this.table.find(key);
        continue;
      }
      this.lastWord = w;
      const next = f(s, this.stampOf(w, nowUs));
      if (next === s || Atomics.compareExchange(this.i32, w + S_STATE, s, next) === s) return next;
    }
  }

  /** The slot's stamp, unwrapped relative to `nowUs` (see STAMP_US). */
  protected stampOf(w: number, nowUs: number): number {
    const stampNow = Math.floor((nowUs - this.epochUs) / STAMP_US);
    return stampNow + ((this.i32[w + S_STAMP]! - stampNow) | 0);
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

/** Reads a limiter's header for attach(): algorithm id, or throws a clear error. */
export function headerAlgo(buffer: SharedArrayBuffer): number {
  const i32 = new Int32Array(buffer, 0, Math.min(16, buffer.byteLength >> 2));
  if (buffer.byteLength < 256 || Atomics.load(i32, H_MAGIC) !== MAGIC) {
    throw new TypeError('attach: the buffer is not an atomic-limiter buffer (wrong magic)');
  }
  const version = Atomics.load(i32, H_VERSION);
  if (version !== LAYOUT_VERSION) {
    throw new TypeError(
      `attach: the buffer has layout version ${version}; this copy of atomic-limiter reads version ${LAYOUT_VERSION}`,
    );
  }
  if (Atomics.load(i32, H_BYTES_DIV64) * 64 !== buffer.byteLength) {
    throw new TypeError('attach: the buffer size does not match its header');
  }
  return Atomics.load(i32, H_ALGO);
}
