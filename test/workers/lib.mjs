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
