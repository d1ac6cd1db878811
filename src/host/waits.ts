import type { Waits } from '../options.js';
import { type Addon, addon } from './addon.js';

// Waiting across processes. Atomics.waitAsync and Atomics.notify reach the waiters of one
// process only (V8 keeps its waiter lists per process), so on host memory each wait is
// also handed to the addon's waiter thread (a futex on the same word, shared between
// processes), and each notify also wakes that futex. Whichever fires first settles it.

// The addon takes one settler per thread, the first set: an ESM and a CommonJS copy of this
// module in one thread load the same addon, so the copy whose settler it kept settles the
// other's waits too. Their waits are kept in one map, the addon's (its ids are its own).
const PENDING = Symbol.for('atomic-limiter.host-waits');
const shared = addon as Addon & { [PENDING]?: Map<number, (result: 'ok' | 'timed-out') => void> };
shared[PENDING] ??= new Map();
const pending = shared[PENDING];
let settlerSet = false;

function settle(id: number, result: 'ok' | 'timed-out' | 'not-equal'): void {
  const resolve = pending.get(id);
  if (resolve === undefined) return;
  pending.delete(id);
  resolve(result === 'timed-out' ? 'timed-out' : 'ok');
}

/** @internal This thread's waits handed to the addon's waiter thread and not settled yet. */
export function parkedWaits(): number {
  return pending.size;
}

/** The waits of every host region of this thread. */
export const hostWaits: Waits = {
  notify(words, index) {
    addon.wake(words.buffer as SharedArrayBuffer, words.byteOffset + index * 4);
  },
  waitAsync(words, index, value, timeoutMs = Number.POSITIVE_INFINITY) {
    const here = Atomics.waitAsync(words, index, value, timeoutMs);
    if (!here.async) return here;
    if (!settlerSet) {
      addon.setSettler(settle);
      settlerSet = true;
    }
    const id = addon.wait(
      words.buffer as SharedArrayBuffer,
      words.byteOffset + index * 4,
      value,
      timeoutMs,
    );
    const across = new Promise<'ok' | 'timed-out'>((resolve) => pending.set(id, resolve));
    return { async: true, value: Promise.race([here.value, across]) };
  },
};
