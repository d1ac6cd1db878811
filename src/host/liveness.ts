import { readFileSync, statSync } from 'node:fs';
import { THREAD_ENTRIES } from '../engine/layout.js';
import type { Liveness } from '../options.js';

// Which process owns each entry of a limiter's thread table, kept in the region, so that a
// process that exits or is killed is known dead at once — its Concurrency permits and its
// waiters come back on the next reap — rather than after its heartbeat goes silent.
//
// Per entry, three 64-bit words, each the entry's token (high half) beside one fact (low
// half): the process id, its start time, its PID namespace. Each word is written whole, so
// a reader that finds the token it asks about in a word knows that word's fact belongs to
// that token's owner, whoever claims the entry meanwhile. A fact that cannot be read or
// compared (another PID namespace: another container) says nothing: heartbeat age decides.

/** Bytes of the table: one record of three words per thread-table entry. */
export const LIVENESS_BYTES = THREAD_ENTRIES * 3 * 8;

/** Process state and start time (clock ticks after boot) from /proc, or null if gone. */
function procStat(pid: number): { state: string; start: number } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return null;
  }
  // "pid (comm) state ppid …": comm may hold spaces and parentheses; fields follow the last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0]!, start: Number(fields[19]) % 2 ** 32 };
}

function pidNamespace(): number {
  try {
    return statSync('/proc/self/ns/pid').ino % 2 ** 32;
  } catch {
    return 0;
  }
}

const me = {
  pid: process.pid,
  start: procStat(process.pid)?.start ?? 0,
  ns: pidNamespace(),
};

function pack(token: number, fact: number): bigint {
  return (BigInt(token) << 32n) | BigInt(fact >>> 0);
}

/** The fact in `word` if it belongs to `token`, else −1. */
function fact(word: bigint, token: number): number {
  return Number(word >> 32n) === token ? Number(word & 0xffffffffn) : -1;
}

/** The liveness table over `buffer` (LIVENESS_BYTES, zero when the region was created). */
export function processLiveness(buffer: SharedArrayBuffer): Liveness {
  const words = new BigInt64Array(buffer, 0, THREAD_ENTRIES * 3);
  return {
    claimed(entry, token) {
      if (entry < 0 || entry >= THREAD_ENTRIES || me.ns === 0) return;
      const w = entry * 3;
      Atomics.store(words, w + 1, pack(token, me.start));
      Atomics.store(words, w + 2, pack(token, me.ns));
      Atomics.store(words, w, pack(token, me.pid));
    },
    dead(entry, token) {
      if (entry < 0 || entry >= THREAD_ENTRIES) return false;
      const w = entry * 3;
      const pid = fact(Atomics.load(words, w), token);
      // This process is alive; its threads are judged by their heartbeats.
      if (pid <= 0 || pid === me.pid) return false;
      if (fact(Atomics.load(words, w + 2), token) !== me.ns) return false;
      const stat = procStat(pid);
      if (stat === null || stat.state === 'Z' || stat.state === 'X') return true;
      // The id now belongs to a newer process: the owner is gone.
      const start = fact(Atomics.load(words, w + 1), token);
      return start >= 0 && start !== stat.start;
    },
  };
}
