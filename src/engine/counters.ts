import type { Algorithm } from './algorithm.js';
import type { Core } from './core.js';
import {
  FRESH,
  H_INSERTS,
  H_RECLAIMS,
  H_RETIRED_ADMITTED,
  H_RETIRED_REJECTED,
  H_SEGMENTS,
  H_TABLE_FULL,
  PAYLOAD_MASK,
  RESERVED,
  S_ADMITTED,
  S_STATE,
} from './layout.js';
import { forEachHotWord, slotCount } from './table-walk.js';

/** @internal What Limiter.totals() reads for atomic-limiter/metrics (see there). */
export interface LimiterTotals {
  admitted: number;
  rejected: number;
  queued: number;
  held: number;
  active: number;
  slots: number;
}

/** The key table's counters (Limiter.tableStats()). */
export interface TableStats {
  slots: number;
  segments: number;
  inserts: number;
  reclaims: number;
  tableFull: number;
}

/** The key table's counters, shared by every thread. */
export function tableStatsOf(core: Core): TableStats {
  const i32 = core.i32;
  return {
    slots: slotCount(core.table),
    segments: Atomics.load(i32, H_SEGMENTS),
    inserts: Atomics.load(i32, H_INSERTS) >>> 0,
    reclaims: Atomics.load(i32, H_RECLAIMS) >>> 0,
    tableFull: Atomics.load(i32, H_TABLE_FULL) >>> 0,
  };
}

/**
 * Totals over every key, read when a meter collects (never on the decision path).
 * `admitted` and `rejected` are permits modulo 2^32, those of keys since reclaimed or reset
 * included; `queued` permits waiting now; `held` keys holding a slot (the default key while
 * it has state), `active` slots whose key is not idle (could not be reclaimed now), `slots`
 * the table's slots now.
 */
export function totalsOf(core: Core, algo: Algorithm): LimiterTotals {
  const nowUs = core.clock.nowUs();
  const i32 = core.i32;
  const table = core.table;
  let admitted = Atomics.load(i32, H_RETIRED_ADMITTED) >>> 0;
  let rejected = Atomics.load(i32, H_RETIRED_REJECTED) >>> 0;
  let queued = 0;
  let active = 0;
  const word = core.last.word;
  forEachHotWord(table, (w) => {
    admitted += Atomics.load(i32, w + S_ADMITTED) >>> 0;
    rejected += Atomics.load(i32, table.rejectedWord(w)) >>> 0;
    queued += core.queues.waitingPermits(w);
    const s = Atomics.load(i32, w + S_STATE);
    if ((s & PAYLOAD_MASK) !== RESERVED && !algo.isIdle(s, w, nowUs)) active++;
  });
  core.last.word = word; // isIdle() sets it
  // Keyed slots are counted as they are given to a key; the default key while it has state.
  const d = Atomics.load(i32, table.defaultSlot >>> 4);
  return {
    admitted: admitted % 2 ** 32,
    rejected: rejected % 2 ** 32,
    queued,
    held: (Atomics.load(i32, H_INSERTS) >>> 0) + ((d & PAYLOAD_MASK) === FRESH ? 0 : 1),
    active,
    slots: slotCount(table),
  };
}
