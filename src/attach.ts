import { Concurrency } from './algorithms/concurrency.js';
import { FixedWindow } from './algorithms/fixed-window.js';
import {
  ALGO_CONCURRENCY,
  ALGO_FIXED_WINDOW,
  ALGO_LEAKY_BUCKET,
  ALGO_SLIDING_LOG,
  ALGO_SLIDING_WINDOW,
  ALGO_TOKEN_BUCKET,
} from './algorithms/ids.js';
import { LeakyBucket } from './algorithms/leaky-bucket.js';
import { SlidingLog } from './algorithms/sliding-log.js';
import { SlidingWindow } from './algorithms/sliding-window.js';
import { TokenBucket } from './algorithms/token-bucket.js';
import { clockFromHandle } from './clock.js';
import { LAYOUT_VERSION } from './layout.js';
import { Attached, headerAlgo, type LimiterHandle } from './limiter.js';
import { show, typeError } from './validate.js';

export type AnyLimiter =
  | TokenBucket
  | LeakyBucket
  | FixedWindow
  | SlidingWindow
  | SlidingLog
  | Concurrency;

// biome-ignore lint/suspicious/noExplicitAny: each class takes an Attached internally
const CLASSES: Record<number, new (source: any) => AnyLimiter> = {
  [ALGO_TOKEN_BUCKET]: TokenBucket,
  [ALGO_LEAKY_BUCKET]: LeakyBucket,
  [ALGO_FIXED_WINDOW]: FixedWindow,
  [ALGO_SLIDING_WINDOW]: SlidingWindow,
  [ALGO_SLIDING_LOG]: SlidingLog,
  [ALGO_CONCURRENCY]: Concurrency,
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
  return new Cls(new Attached(h.buffer, clockFromHandle(h.clock))) as L;
}
