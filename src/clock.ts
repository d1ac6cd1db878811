import { performance } from 'node:perf_hooks';
import type { MemoryProvider, Waits } from './options.js';
import { rangeError, show, typeError } from './validate.js';

/**
 * A clock gives microseconds as a JavaScript number. Every limiter reads it once per
 * decision. Values are integers or fractions of a microsecond; numbers stay exact far
 * beyond any uptime (2^53 µs is 285 years), so nothing here wraps.
 */
export interface Clock {
  /** Microseconds on this clock's shared time line. */
  nowUs(): number;
  /** A structured-cloneable description that `attach()` turns back into the same clock. */
  readonly handle: ClockHandle;
}

/** A clock as it travels in a limiter's handle to other threads. */
export type ClockHandle =
  /** The process's monotonic clock (`CLOCK_MONOTONIC`, shared by every thread and process). */
  | { readonly kind: 'monotonic' }
  /** A ManualClock: its time lives in `buffer`, so every thread reads the same time. */
  | { readonly kind: 'manual'; readonly buffer: SharedArrayBuffer }
  /** A CoarseClock: its ticker publishes the time into `buffer`. */
  | { readonly kind: 'coarse'; readonly buffer: SharedArrayBuffer };

// performance.now() is cheap (no BigInt, no allocation) but its origin is this process's
// start. process.hrtime is CLOCK_MONOTONIC, whose origin is shared by every thread and
// every process of the host. So each thread measures, once, the offset between the two;
// the bracketing read with the smallest gap bounds the calibration error (about a
// microsecond here), and from then on a read costs one performance.now().
function calibrate(): number {
  let best = Number.POSITIVE_INFINITY;
  let offset = 0;
  for (let i = 0; i < 64; i++) {
    const before = performance.now();
    const hr = Number(process.hrtime.bigint() / 1000n);
    const after = performance.now();
    const gap = after - before;
    if (gap < best) {
      best = gap;
      offset = hr - ((before + after) / 2) * 1000;
    }
  }
  return offset;
}

const OFFSET_US = calibrate();

/**
 * The default clock: CLOCK_MONOTONIC in microseconds, the same time line on every thread
 * and process of the host. It never jumps with the wall clock.
 */
export class MonotonicClock implements Clock {
  readonly handle: ClockHandle = { kind: 'monotonic' };
  nowUs(): number {
    return performance.now() * 1000 + OFFSET_US;
  }
}

export const monotonicClock = new MonotonicClock();

/**
 * `a − b` for two times kept modulo 2^31 ms (heartbeats, lock and fetch-claim deadlines),
 * as a signed difference: right for any two within 2^30 ms (12.4 days) of each other,
 * across the wrap every 24.8 days — where `(a − b) | 0` reads a deadline just before the
 * wrap as 2^31 ms away once the clock has wrapped.
 */
export function diff31(a: number, b: number): number {
  return ((a - b) << 1) >> 1;
}

// ManualClock buffer: [0..8) time in µs as BigInt64, [8..12) a tick counter every change
// bumps (waiters park on it), [12..16) magic.
const MANUAL_MAGIC = 0x4d434c4b; // 'MCLK'
const M_TICK = 2;
const M_MAGIC = 3;

/**
 * A clock that moves only when told to. Its time lives in a SharedArrayBuffer, so every
 * thread holding the same ManualClock (pass `clock.handle`, or a limiter's `handle`, to
 * another thread) sees `advance()` and `set()` at once. Times are milliseconds at the
 * API, kept with microsecond resolution.
 *
 * @example
 * const clock = new ManualClock();
 * const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1, clock });
 * clock.advance(1000); // one more token, for every thread
 */
export class ManualClock implements Clock {
  readonly handle: ClockHandle;
  /** The name of the memory region its time lives in (`options.memory`), if any. */
  readonly region: string | undefined;
  private readonly big: BigInt64Array;
  private readonly words: Int32Array;
  /** Wakes waiters of other processes on a tick (a clock in host memory). */
  private readonly waits: Waits | undefined;

  /**
   * @param startMs the initial time in milliseconds (default 0).
   * @param options `memory`: keep the time in that region (e.g. `hostMemory('test-clock')`),
   *   so that every process opening it reads one clock; the first one sets `startMs`.
   */
  constructor(
    startMs: number | { readonly kind: 'manual'; readonly buffer: SharedArrayBuffer } = 0,
    options: { readonly memory?: MemoryProvider } = {},
  ) {
    if (options.memory !== undefined) {
      const us = toUs('ManualClock', 'startMs', startMs);
      const region = options.memory.open({
        owner: 'ManualClock',
        layoutVersion: 1,
        options: {},
        parts: [{ bytes: 16, maxBytes: 16 }],
        init: ([buffer]) => {
          Atomics.store(new BigInt64Array(buffer!, 0, 1), 0, BigInt(us));
          Atomics.store(new Int32Array(buffer!, 0, 4), M_MAGIC, MANUAL_MAGIC);
        },
      });
      region.publish();
      const buffer = region.buffers[0]!;
      this.words = new Int32Array(buffer, 0, 4);
      this.big = new BigInt64Array(buffer, 0, 1);
      this.region = region.name;
      this.waits = region.waits;
      this.handle = { kind: 'manual', buffer };
      return;
    }
    this.region = undefined;
    this.waits = undefined;
    if (typeof startMs === 'object' && startMs !== null) {
      const buffer = startMs.buffer;
      if (!(buffer instanceof SharedArrayBuffer) || buffer.byteLength !== 16) {
        throw typeError('ManualClock: the handle does not hold a ManualClock buffer');
      }
      this.words = new Int32Array(buffer);
      if (Atomics.load(this.words, M_MAGIC) !== MANUAL_MAGIC) {
        throw typeError('ManualClock: the handle does not hold a ManualClock buffer');
      }
      this.big = new BigInt64Array(buffer, 0, 1);
      this.handle = { kind: 'manual', buffer };
      return;
    }
    const buffer = new SharedArrayBuffer(16);
    this.words = new Int32Array(buffer);
    this.big = new BigInt64Array(buffer, 0, 1);
    Atomics.store(this.big, 0, BigInt(toUs('ManualClock', 'startMs', startMs)));
    Atomics.store(this.words, M_MAGIC, MANUAL_MAGIC);
    this.handle = { kind: 'manual', buffer };
  }

  nowUs(): number {
    return Number(Atomics.load(this.big, 0));
  }

  /** The current time in milliseconds. */
  nowMs(): number {
    return this.nowUs() / 1000;
  }

  /** Moves time forward by `ms` (≥ 0, microsecond resolution) for every thread. */
  advance(ms: number): void {
    const us = toUs('ManualClock.advance', 'ms', ms);
    if (us < 0) throw rangeError(`ManualClock.advance: ms must be ≥ 0, got ${show(ms)}`);
    Atomics.add(this.big, 0, BigInt(us));
    this.tick();
  }

  /** Sets the time to `ms`; it may go backwards (limiters never mint permits from that). */
  set(ms: number): void {
    Atomics.store(this.big, 0, BigInt(toUs('ManualClock.set', 'ms', ms)));
    this.tick();
  }

  /** @internal Wakes every waiter parked on this clock (time moved, or permits came back). */
  tick(): void {
    Atomics.add(this.words, M_TICK, 1);
    Atomics.notify(this.words, M_TICK);
    this.waits?.notify(this.words, M_TICK);
  }

  /** @internal The word that changes on every `advance()`/`set()`, for waiters. */
  get tickWord(): { readonly words: Int32Array; readonly index: number } {
    return { words: this.words, index: M_TICK };
  }
}

function toUs(owner: string, name: string, ms: unknown): number {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) {
    throw typeError(`${owner}: ${name} must be a finite number of milliseconds, got ${show(ms)}`);
  }
  const us = Math.round(ms * 1000);
  if (!Number.isSafeInteger(us)) {
    throw rangeError(`${owner}: ${name} is out of range, got ${show(ms)}`);
  }
  return us;
}
