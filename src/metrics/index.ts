/**
 * atomic-limiter/metrics: OpenTelemetry instruments for in-memory limiters. Nothing runs on
 * the decision path: counters are read from the limiter's shared memory when the meter
 * collects, and an acquire() wait is recorded by the thread that waited, when it settles.
 * `@opentelemetry/api` (1.9 or later) is an optional peer dependency: this module uses its
 * types alone, the Meter is the caller's.
 */

import type {
  Attributes,
  BatchObservableResult,
  Histogram,
  Meter,
  Observable,
} from '@opentelemetry/api';
import type { LimiterTotals } from '../engine/counters.js';
import { show, typeError } from '../validate.js';

/** The instruments' names, as exported. */
export const INSTRUMENTS = {
  decisions: 'atomic_limiter.decisions',
  queued: 'atomic_limiter.queued',
  keys: 'atomic_limiter.keys',
  waitDuration: 'atomic_limiter.wait.duration',
} as const;

/** What observeLimiters() reads of a limiter (the in-memory classes and their attached copies). */
interface Observed {
  totals(): LimiterTotals;
  waitObservers: Set<(waitedMs: number, granted: boolean) => void> | undefined;
}

/** Options of `observe()`. */
export interface ObserveOptions {
  /**
   * Whether to report the shared counters (decisions, queued, keys): true by default. They
   * count across every thread of a limiter, so observe them in one thread only; a worker
   * whose acquire() waits should be recorded too passes `counters: false` to its own meter.
   */
  counters?: boolean;
}

/** Bucket boundaries of the wait histogram, in seconds (100 µs to 1 min). */
const WAIT_BUCKETS_S = [
  0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];

/**
 * Reports the limiters given (`{ name: limiter, … }`, the name becoming the `limiter`
 * attribute) through `meter`:
 *
 * - `atomic_limiter.decisions` (counter, permits; `result`: `admitted` | `refused`), over
 *   every key and every thread sharing the limiter;
 * - `atomic_limiter.queued` (up-down counter, permits waiting in acquire() now);
 * - `atomic_limiter.keys` (gauge; `state`: `active` keys not idle, `held` slots given to a
 *   key, `slots` the table's slots now);
 * - `atomic_limiter.wait.duration` (histogram, seconds; `result`: `admitted` | `refused`):
 *   each acquire() that waited in this thread, from its refused attempt to its outcome.
 *
 * Returns a function that unregisters all of it.
 */
export function observeLimiters(
  meter: Meter,
  limiters: Record<string, unknown>,
  options: ObserveOptions = {},
): () => void {
  if (
    typeof meter !== 'object' ||
    meter === null ||
    typeof (meter as Partial<Meter>).createObservableCounter !== 'function' ||
    typeof (meter as Partial<Meter>).createHistogram !== 'function'
  ) {
    throw typeError(`observeLimiters: meter must be an OpenTelemetry Meter, got ${show(meter)}`);
  }
  if (typeof limiters !== 'object' || limiters === null || Array.isArray(limiters)) {
    throw typeError(
      `observeLimiters: limiters must be an object of name → limiter, got ${show(limiters)}`,
    );
  }
  const counters = options.counters ?? true;
  if (typeof counters !== 'boolean') {
    throw typeError(`observeLimiters: option "counters" must be a boolean, got ${show(counters)}`);
  }
  const entries = Object.entries(limiters).map(([name, l]) => {
    // Not `instanceof`: each entry point of the package bundles its own copy of the classes.
    const o = l as Partial<Observed> | null;
    if (typeof o !== 'object' || o === null || typeof o.totals !== 'function') {
      throw typeError(
        `observeLimiters: limiters.${name} must be an in-memory limiter of atomic-limiter, got ${show(l)}`,
      );
    }
    return { name, limiter: o as Observed, last: [0, 0], sum: [0, 0], seen: false };
  });

  const histogram: Histogram = meter.createHistogram(INSTRUMENTS.waitDuration, {
    description:
      'Time acquire() calls waited in the queue, from the refused attempt to their outcome',
    unit: 's',
    advice: { explicitBucketBoundaries: WAIT_BUCKETS_S },
  });
  const hooks = entries.map(({ name, limiter }) => {
    const admitted: Attributes = { limiter: name, result: 'admitted' };
    const refused: Attributes = { limiter: name, result: 'refused' };
    const hook = (ms: number, granted: boolean) =>
      histogram.record(Math.max(0, ms) / 1000, granted ? admitted : refused);
    limiter.waitObservers ??= new Set();
    limiter.waitObservers.add(hook);
    return { limiter, hook };
  });

  let unobserve = () => {};
  if (counters) {
    const decisions = meter.createObservableCounter(INSTRUMENTS.decisions, {
      description: 'Permits decided, by result, over every key and thread of the limiter',
      unit: '{permit}',
    });
    const queued = meter.createObservableUpDownCounter(INSTRUMENTS.queued, {
      description: 'Permits waiting in acquire() now',
      unit: '{permit}',
    });
    const keys = meter.createObservableGauge(INSTRUMENTS.keys, {
      description: 'Keys in the table: active (not idle), held (slots given to a key), slots',
      unit: '{key}',
    });
    const observables: Observable[] = [decisions, queued, keys];
    const callback = (result: BatchObservableResult) => {
      for (const e of entries) {
        const t = e.limiter.totals();
        // The shared counters are 32-bit (they wrap): accumulate their increase since the
        // last collection, so that the counter reported never goes back.
        const now = [t.admitted, t.rejected];
        for (let i = 0; i < 2; i++) {
          e.sum[i]! += e.seen ? (now[i]! - e.last[i]! + 2 ** 32) % 2 ** 32 : now[i]!;
          e.last[i] = now[i]!;
        }
        e.seen = true;
        result.observe(decisions, e.sum[0]!, { limiter: e.name, result: 'admitted' });
        result.observe(decisions, e.sum[1]!, { limiter: e.name, result: 'refused' });
        result.observe(queued, t.queued, { limiter: e.name });
        result.observe(keys, t.active, { limiter: e.name, state: 'active' });
        result.observe(keys, t.held, { limiter: e.name, state: 'held' });
        result.observe(keys, t.slots, { limiter: e.name, state: 'slots' });
      }
    };
    meter.addBatchObservableCallback(callback, observables);
    unobserve = () => meter.removeBatchObservableCallback(callback, observables);
  }

  let done = false;
  return () => {
    if (done) return;
    done = true;
    unobserve();
    for (const { limiter, hook } of hooks) {
      limiter.waitObservers?.delete(hook);
      if (limiter.waitObservers?.size === 0) limiter.waitObservers = undefined;
    }
  };
}
