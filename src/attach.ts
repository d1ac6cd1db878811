import { Concurrency } from './algorithms/concurrency.js';
import { FixedWindow } from './algorithms/fixed-window.js';
import {
  ALGO_CONCURRENCY,
  ALGO_FIXED_WINDOW,
  ALGO_LEAKY_BUCKET,
  ALGO_SLIDING_LOG,
  ALGO_SLIDING_WINDOW,
  ALGO_TOKEN_BUCKET,
  ALGO_WARMING_BUCKET,
} from './algorithms/ids.js';
import { LeakyBucket } from './algorithms/leaky-bucket.js';
import { SlidingLog } from './algorithms/sliding-log.js';
import { SlidingWindow } from './algorithms/sliding-window.js';
import { TokenBucket } from './algorithms/token-bucket.js';
import { WarmingBucket } from './algorithms/warming-bucket.js';
import { type Clock, type ClockHandle, ManualClock, monotonicClock } from './clock.js';
import { CoarseClock } from './coarse-clock.js';
import { headerAlgo } from './engine/buffer.js';
import { LAYOUT_VERSION } from './engine/layout.js';
import { Attached, type LimiterHandle } from './options.js';
import { show, typeError } from './validate.js';

export type AnyLimiter =
  | TokenBucket
  | LeakyBucket
  | FixedWindow
  | SlidingWindow
  | SlidingLog
  | Concurrency
  | WarmingBucket;

// biome-ignore lint/suspicious/noExplicitAny: each class takes an Attached internally
const CLASSES: Record<number, new (source: any) => AnyLimiter> = {
  [ALGO_TOKEN_BUCKET]: TokenBucket,
  [ALGO_LEAKY_BUCKET]: LeakyBucket,
  [ALGO_FIXED_WINDOW]: FixedWindow,
  [ALGO_SLIDING_WINDOW]: SlidingWindow,
  [ALGO_SLIDING_LOG]: SlidingLog,
  [ALGO_CONCURRENCY]: Concurrency,
  [ALGO_WARMING_BUCKET]: WarmingBucket,
};

/**
 * Opens, in this thread, the limiter behind `handle` (a limiter's `.handle`, received
 * through `workerData` or `postMessage`): an instance of the same class, over the same
 * shared state, with the same clock. Throws a TypeError for anything else.
 */
export function attach<L extends AnyLimiter = AnyLimiter>(handle: LimiterHandle): L {
  const h = handle as Partial<LimiterHandle> | null | undefined;
  if (typeof h !== 'object' || h === null || h.kind !== 'atomic-limiter') {
    throw typeError(`attach: expected a limiter's handle (limiter.handle), got ${show(handle)}`);
  }
  if (h.version !== LAYOUT_VERSION) {
    throw typeError(
      `attach: the handle has layout version ${show(h.version)}; this copy of atomic-limiter reads version ${LAYOUT_VERSION}`,
    );
  }
  if (!(h.buffer instanceof SharedArrayBuffer)) {
    throw typeError(`attach: handle.buffer must be a SharedArrayBuffer, got ${show(h.buffer)}`);
  }
  const algo = headerAlgo(h.buffer);
  const Cls = CLASSES[algo];
  if (!Cls) throw typeError(`attach: the buffer holds an unknown algorithm (${algo})`);
  const logs = h.logs instanceof SharedArrayBuffer ? h.logs : undefined;
  return new Cls(new Attached(h.buffer, clockFromHandle(h.clock), logs)) as L;
}

/** The clock a handle describes, in this thread: the same time line as the sender's. */
function clockFromHandle(handle: unknown): Clock {
  const h = handle as ClockHandle | undefined;
  if (h && h.kind === 'monotonic') return monotonicClock;
  if (h && h.kind === 'manual') return new ManualClock(h);
  if (h && h.kind === 'coarse') return new CoarseClock(h);
  throw typeError(`attach: unknown clock in handle: ${show(handle)}`);
}
