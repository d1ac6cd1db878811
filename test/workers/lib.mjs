// Shared helpers for worker scripts (plain ESM: vitest does not transform worker files).
import { workerData } from 'node:worker_threads';

/**
 * Waits until all `workerData.count` workers have arrived at the barrier
 * (workerData.barrier: a SharedArrayBuffer whose word 0 counts arrivals).
 */
export function arrive() {
  const b = new Int32Array(workerData.barrier);
  Atomics.add(b, 0, 1);
  Atomics.notify(b, 0);
  for (;;) {
    const seen = Atomics.load(b, 0);
    if (seen >= workerData.count) return;
    Atomics.wait(b, 0, seen);
  }
}

/** A small deterministic PRNG (mulberry32), so each thread's order is reproducible. */
export function prng(seed) {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** 0..n-1 in an order shuffled by `seed` (Fisher–Yates). */
export function shuffled(n, seed) {
  const order = Array.from({ length: n }, (_, i) => i);
  const random = prng(seed);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

// ---- wait-queue tests: a shared log of acquire() outcomes --------------------------------
// `events` is an Int32Array on a SharedArrayBuffer: [EV_ENQUEUED] counts acquire() calls
// made (the waiter is queued once acquire() returns), [EV_CLAIMED] log positions taken,
// [EV_WRITTEN] log entries written; entries from EV_LOG on are `id * 8 + outcome code`, in
// the order the acquire() calls settled across all threads. test/queue-threads.test.ts
// decodes them with the same numbers.
export const EV_ENQUEUED = 0;
export const EV_CLAIMED = 1;
export const EV_WRITTEN = 2;
export const EV_LOG = 3;
export const OUTCOME = {
  granted: 1,
  'queue-full': 2,
  closed: 3,
  aborted: 4,
  'timed-out': 5,
  other: 6,
};

/** The outcome name of a rejected acquire(). */
export function outcomeOf(error) {
  if (error?.code === 'ERR_QUEUE_FULL') return 'queue-full';
  if (error?.code === 'ERR_LIMITER_CLOSED') return 'closed';
  if (error instanceof DOMException && error.name === 'AbortError') return 'aborted';
  if (error instanceof DOMException && error.name === 'TimeoutError') return 'timed-out';
  return 'other';
}

/** Appends `id`'s outcome to the shared log and wakes whoever waits for entries. */
export function logOutcome(events, id, code) {
  const position = Atomics.add(events, EV_CLAIMED, 1);
  Atomics.store(events, EV_LOG + position, id * 8 + code);
  Atomics.add(events, EV_WRITTEN, 1);
  Atomics.notify(events, EV_WRITTEN);
}
