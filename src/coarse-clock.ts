import { isMainThread, Worker } from 'node:worker_threads';
import { type Clock, type ClockHandle, monotonicClock } from './clock.js';
import { checkOptionsObject, positiveNumberOption, typeError } from './validate.js';

/** Options of `new CoarseClock(options)`. */
export interface CoarseClockOptions {
  /**
   * How often the ticker publishes the time, in milliseconds: from 0.1 to 1000, default 1.
   * The clock reads up to about one resolution late (never early).
   */
  resolutionMs?: number;
}

/** The handle of a CoarseClock: its shared buffer. */
export type CoarseClockHandle = Extract<ClockHandle, { kind: 'coarse' }>;

// The shared buffer (64 bytes: one cache line):
//   Int32 [0]  TIME: the published time, STARTING or STOPPED. If ≥ 0: bits 29..30 are the era
//              (0..3), bits 0..28 the ticks (units of `unitUs`) since that era's base.
//   Int32 [1]  CONTROL: 0 while the ticker should run; 1 asks it to stop (it waits on this).
//   Int32 [2]  magic, [3] layout version
//   Float64 [2] resolutionMs, [3] unitUs, [4..8) the base of each era, in µs on the
//              monotonic clock's time line.
// A reader decodes `base[era] + ticks × unitUs` from one read of TIME and a plain read of
// the base. The ticker writes an era's base before it publishes the first word of that era,
// and rewrites it only when that era number comes round again, three eras later. A reader
// reads TIME with a plain read while the word is in the era of, and not below, the word
// this reader last read with Atomics.load (seq-cst store → load orders the ticker's write of
// that era's base before the reader's reads of it); any other word, or a stop, sends it to
// Atomics.load. (Atomics.load is a call into a builtin: most of a coarse
// read.) "Not below" covers a reader that read nothing while the era number came round
// again (28 h at 1 ms): that era's new words start from 0 ticks, below the one it saw.
// Without it, on a CPU that may reorder two plain loads (Arm), a read at the very moment of
// that switch could pair the new word with the base of four eras before.
const W_TIME = 0;
const W_CONTROL = 1;
const W_MAGIC = 2;
const W_VERSION = 3;
const F_RESOLUTION_MS = 2;
const F_UNIT_US = 3;
const F_BASES = 4;
const BYTES = 64;
const MAGIC = 0x43434c4b; // 'CCLK'
const VERSION = 1;
const TICK_BITS = 29;
const TICK_MASK = (1 << TICK_BITS) - 1;
/** TIME once the clock stopped (close(), a dead ticker): readers use the precise clock. */
const STOPPED = -1;
/** TIME until the ticker's first publication: readers use the precise clock meanwhile. */
const STARTING = -2;
/** A unit of a sixteenth of the resolution: rounding down to it adds ≤ 1/16 to the lag. */
const UNITS_PER_RESOLUTION = 16;
/**
 * Subtracted from every published time. Each thread's monotonic clock is calibrated against
 * process.hrtime to within about a microsecond; the margin keeps the coarse time behind
 * every thread's precise clock, not just behind the ticker's.
 */
const MARGIN_US = 10;
/** Reads between two checks that the ticker is alive (one precise clock read each). */
const CHECK_EVERY = 1024;

/**
 * Publishes `nowUs` (µs on the monotonic time line, already read) in the TIME word of a
 * CoarseClock buffer (`words` and `f64`: Int32 and Float64 views of all of it), unless it is
 * not later than what is published or the clock stopped. Returns the word now in TIME
 * (-1: stopped). The ticker thread runs it from its source text, so it uses nothing but
 * its arguments and literals: 29 = TICK_BITS, 3 = F_UNIT_US, 4 = F_BASES, 3 = last era.
 */
export function publishTime(words: Int32Array, f64: Float64Array, nowUs: number): number {
  const seen = Atomics.load(words, 0);
  if (seen === -1) return seen; // STOPPED
  const unitUs = f64[3] as number;
  // STARTING (-2): nothing published yet; era 0's base is the creation time.
  let era = seen < 0 ? 0 : seen >>> 29;
  let ticks = Math.floor((nowUs - (f64[4 + era] as number)) / unitUs);
  if (seen >= 0 && !(ticks > (seen & 0x1fffffff))) return seen; // time never goes back
  if (ticks > 0x1fffffff) {
    // The era is full (2^29 units): the next one starts at this very time (the decoded
    // value is the same float either way) and ticks restart from 0. Any jump fits.
    const next = (era + 1) & 3;
    f64[4 + next] = (f64[4 + era] as number) + ticks * unitUs;
    era = next;
    ticks = 0;
  }
  const word = (era << 29) | ticks;
  const was = Atomics.compareExchange(words, 0, seen, word);
  // Only the ticker publishes times; a failed exchange means the clock was stopped.
  if (was !== seen) return was;
  // Head waiters of limiters on this clock may park on TIME until the next publication.
  Atomics.notify(words, 0);
  return word;
}

// The ticker: a small worker thread that sleeps with Atomics.wait, not a timer on the
// creating thread's event loop, so time moves while that loop is blocked. It is unref'd: it
// never keeps a process alive. CommonJS source, evaluated (no file to resolve from dist/).
const TICKER_SOURCE = `'use strict';
const { workerData } = require('node:worker_threads');
const publishTime = ${publishTime.toString()};
const words = new Int32Array(workerData.buffer);
const f64 = new Float64Array(workerData.buffer);
const { periodMs, marginUs } = workerData;
for (;;) {
  Atomics.wait(words, ${W_CONTROL}, 0, periodMs);
  if (Atomics.load(words, ${W_CONTROL}) !== 0) break;
  // Read before publishing: the published time is never ahead of the real one.
  const nowUs = Number(process.hrtime.bigint() / 1000n) - marginUs;
  if (publishTime(words, f64, nowUs) < 0) break;
}
`;

/** µs on the host's CLOCK_MONOTONIC (the time line of `monotonicClock`), rounded down. */
function hrtimeUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/**
 * A clock whose time is a word in shared memory that a ticker thread keeps fresh: a read is
 * a load of that word, a plain read and a multiply-add (several times cheaper than the
 * precise clock; the bench's CoarseClock rows measure it). Pass it as the
 * `clock` option of any limiter; it travels in the limiter's `handle`, so every thread that
 * attaches reads the same word.
 *
 * - It reads late, never early: up to about one `resolutionMs` behind the monotonic clock
 *   (plus the ticker thread's wake-up delay), so limits refill and windows turn a little
 *   late — late time only under-admits. It never goes back.
 * - The ticker is a worker thread of the thread that created the clock, sleeping with
 *   `Atomics.wait`: time moves while that thread's event loop is blocked. It is unref'd and
 *   keeps no process alive.
 * - Until the ticker's first tick (tens of ms after construction), reads are precise.
 * - `close()` (or `Symbol.dispose`) stops the ticker, on any thread. From then on every
 *   reader, in every thread, reads the precise monotonic clock instead: limiters keep
 *   working, at the precise clock's cost. The same happens if the ticker thread dies (the
 *   creating worker thread ends, or is terminated: readers notice a time far behind within
 *   1024 reads, hold their time still for up to 1 s plus ten resolutions while the ticker
 *   could still catch up, then switch). The ticker runs until then, whether or not this
 *   object is still referenced.
 *
 * @example
 * const clock = new CoarseClock({ resolutionMs: 1 });
 * const limiter = new TokenBucket({ capacity: 100, refillPerSecond: 50, clock });
 * // …at shutdown (optional: it keeps nothing alive)
 * clock.close();
 */
export class CoarseClock implements Clock {
  /** What another thread's limiter needs to read this clock (travels in a limiter's handle). */
  readonly handle: CoarseClockHandle;
  /** How often the ticker publishes the time, in milliseconds. */
  readonly resolutionMs: number;
  private readonly words: Int32Array;
  private readonly bases: Float64Array;
  private readonly unitUs: number;
  private readonly staleLimitUs: number;
  private countdown = CHECK_EVERY;
  /**
   * The words this reader may decode after a plain read: from the last word it read with
   * Atomics.load to the last word of that word's era (none while that was a stop or a
   * start, or before any).
   */
  private lowWord = 0;
  private lastWord = -1;
  /** While the time seems stuck: this reader's time, held still; NaN otherwise. */
  private heldUs = Number.NaN;
  private ticker: Worker | undefined;
  private readonly onExit = (): void => this.close();

  /**
   * @param options `{ resolutionMs }`, or a CoarseClock's `handle` to read the same clock
   * in this thread (what `attach()` does with a limiter's handle).
   */
  constructor(options: CoarseClockOptions | CoarseClockHandle = {}) {
    const o = options as Partial<CoarseClockHandle> | undefined;
    if (typeof o === 'object' && o !== null && o.kind === 'coarse') {
      const buffer = o.buffer;
      if (!(buffer instanceof SharedArrayBuffer) || buffer.byteLength !== BYTES) {
        throw typeError('CoarseClock: the handle does not hold a CoarseClock buffer');
      }
      this.words = new Int32Array(buffer, 0, 4);
      if (
        Atomics.load(this.words, W_MAGIC) !== MAGIC ||
        Atomics.load(this.words, W_VERSION) !== VERSION
      ) {
        throw typeError('CoarseClock: the handle does not hold a CoarseClock buffer');
      }
      const f64 = new Float64Array(buffer);
      this.bases = new Float64Array(buffer, F_BASES * 8, 4);
      this.resolutionMs = f64[F_RESOLUTION_MS]!;
      this.unitUs = f64[F_UNIT_US]!;
      this.staleLimitUs = staleLimitUs(this.resolutionMs);
      this.handle = { kind: 'coarse', buffer };
      return;
    }
    const opts = checkOptionsObject('CoarseClock', options, ['resolutionMs']);
    const resolutionMs =
      opts.resolutionMs === undefined
        ? 1
        : positiveNumberOption('CoarseClock', 'resolutionMs', opts.resolutionMs, 0.1, 1000);
    const buffer = new SharedArrayBuffer(BYTES);
    const f64 = new Float64Array(buffer);
    this.words = new Int32Array(buffer, 0, 4);
    this.bases = new Float64Array(buffer, F_BASES * 8, 4);
    this.resolutionMs = resolutionMs;
    this.unitUs = (resolutionMs * 1000) / UNITS_PER_RESOLUTION;
    this.staleLimitUs = staleLimitUs(resolutionMs);
    f64[F_RESOLUTION_MS] = resolutionMs;
    f64[F_UNIT_US] = this.unitUs;
    // Era 0 starts now. Until the ticker thread has started and published (tens of ms,
    // more on a loaded machine) readers read the precise clock: time never stands still.
    this.bases[0] = hrtimeUs() - MARGIN_US;
    this.words[W_TIME] = STARTING;
    Atomics.store(this.words, W_VERSION, VERSION);
    Atomics.store(this.words, W_MAGIC, MAGIC);
    this.handle = { kind: 'coarse', buffer };
    const ticker = new Worker(TICKER_SOURCE, {
      eval: true,
      workerData: { buffer, periodMs: resolutionMs, marginUs: MARGIN_US },
      // Not the parent's flags (loaders, --require'd agents): the ticker needs none.
      execArgv: [],
    });
    ticker.unref();
    // A ticker that fails or ends by itself stops the clock: readers switch to the precise
    // clock rather than see time stand still.
    ticker.on('error', () => this.close());
    ticker.on('exit', () => this.close());
    this.ticker = ticker;
    // A worker thread that created the clock takes the ticker with it when it ends.
    if (!isMainThread) process.once('exit', this.onExit);
  }

  /** Microseconds on the monotonic clock's time line, up to about a resolution late. */
  nowUs(): number {
    // A plain read (see the buffer's layout above); a stopped or starting clock's word is
    // negative, never in [lowWord, lastWord].
    const w = this.words[W_TIME]!;
    if (w < this.lowWord || w > this.lastWord || --this.countdown < 0) return this.checkedNowUs();
    return this.bases[w >>> TICK_BITS]! + (w & TICK_MASK) * this.unitUs;
  }

  /** The current time in milliseconds. */
  nowMs(): number {
    return this.nowUs() / 1000;
  }

  /** True while the ticker publishes the time; false once the clock stopped. */
  get ticking(): boolean {
    return Atomics.load(this.words, W_TIME) >= 0;
  }

  /**
   * Stops the ticker, for every thread reading this clock: they all read the precise
   * monotonic clock from then on. Idempotent; any thread may call it.
   */
  close(): void {
    Atomics.store(this.words, W_TIME, STOPPED);
    Atomics.store(this.words, W_CONTROL, 1);
    Atomics.notify(this.words, W_CONTROL);
    // Wake anything parked on the time word: it will not change again.
    Atomics.notify(this.words, W_TIME);
    if (this.ticker) {
      this.ticker = undefined;
      if (!isMainThread) process.removeListener('exit', this.onExit);
    }
  }

  /** `close()`, for `using clock = new CoarseClock()`. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** @internal The word every publication changes and notifies (for waiters). */
  get tickWord(): { readonly words: Int32Array; readonly index: number } {
    return { words: this.words, index: W_TIME };
  }

  // Every CHECK_EVERY reads, on a word outside [lowWord, lastWord], and on every read while
  // the time seems stuck or after a stop.
  private checkedNowUs(): number {
    const w = Atomics.load(this.words, W_TIME);
    this.lowWord = w;
    this.lastWord = w < 0 ? w - 1 : w | TICK_MASK;
    if (w < 0) {
      const preciseUs = monotonicClock.nowUs();
      if (w === STARTING) {
        // Once the first time is published (behind this one), hold still until it catches
        // up: never back.
        this.heldUs = preciseUs;
        this.countdown = 0;
      }
      return preciseUs;
    }
    const coarseUs = this.bases[w >>> TICK_BITS]! + (w & TICK_MASK) * this.unitUs;
    if (Number.isNaN(this.heldUs)) {
      this.countdown = CHECK_EVERY;
      const preciseUs = monotonicClock.nowUs();
      if (preciseUs - coarseUs <= this.staleLimitUs) return coarseUs;
      // Far behind: the ticker may be dead, or only starved or paused. Hold this reader's
      // time still (never ahead, never back) until the ticker catches up with it.
      this.heldUs = preciseUs;
      this.countdown = 0;
      return preciseUs;
    }
    if (coarseUs >= this.heldUs) {
      this.heldUs = Number.NaN;
      this.countdown = CHECK_EVERY;
      return coarseUs;
    }
    this.countdown = 0;
    const preciseUs = monotonicClock.nowUs();
    if (preciseUs - this.heldUs <= this.staleLimitUs) return this.heldUs;
    // It did not catch up: its thread is gone. Stop the clock for every reader.
    Atomics.compareExchange(this.words, W_TIME, w, STOPPED);
    Atomics.store(this.words, W_CONTROL, 1);
    Atomics.notify(this.words, W_CONTROL);
    this.heldUs = Number.NaN;
    return preciseUs;
  }
}

/** A lag past which the ticker is presumed stuck: 1 s plus ten resolutions. */
function staleLimitUs(resolutionMs: number): number {
  return 1_000_000 + 10_000 * resolutionMs;
}
