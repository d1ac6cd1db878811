import { diff31, monotonicClock } from '../clock.js';
import { H_LOCK_STEALS } from './layout.js';

// A lock is a deadline (real monotonic ms, low 31 bits, never 0). A thread that dies
// holding it delays the others by at most LOCK_LEASE_MS; the next one then takes the lock
// over (and, for a stripe lock, voids the slot the dead thread had reserved).
const LOCK_LEASE_MS = 500;

function nowMsLow(): number {
  return (Math.floor(monotonicClock.nowUs() / 1000) & 0x7fffffff) | 1;
}

/**
 * Takes lock word `word` of `i32` (a stripe's, the default key's, a wait queue's); returns
 * the token to unlock with. A lock held past its lease is taken over.
 */
export function lock(i32: Int32Array, word: number): number {
  for (let spins = 0; ; spins++) {
    const cur = Atomics.load(i32, word);
    const now = nowMsLow();
    const token = ((now + LOCK_LEASE_MS) & 0x7fffffff) | 1;
    if (cur === 0) {
      if (Atomics.compareExchange(i32, word, 0, token) === 0) return token;
      continue;
    }
    if (diff31(now, cur) > 0) {
      // The holder overstayed its lease (it died, or stalled for half a second).
      if (Atomics.compareExchange(i32, word, cur, token) === cur) {
        Atomics.add(i32, H_LOCK_STEALS, 1);
        return token;
      }
      continue;
    }
    if (spins > 16) Atomics.wait(i32, word, cur, 1);
  }
}

/** Releases lock word `word` if `token` still holds it, and wakes a thread waiting for it. */
export function unlock(i32: Int32Array, word: number, token: number): void {
  if (Atomics.compareExchange(i32, word, token, 0) === token) Atomics.notify(i32, word);
}
