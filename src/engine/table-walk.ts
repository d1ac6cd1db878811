import {
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_DEFAULT_LOCK,
  hotWordIn,
  type Layout,
  PAYLOAD_MASK,
  RESERVED,
  S_STATE,
  STRIPE_SLOTS,
  segmentOfSlot,
  slotOfHotWord,
} from './layout.js';
import { lock, unlock } from './lease-lock.js';
import type { Key, SlotPolicy, SlotTable } from './table.js';

// Work on the table's slots themselves rather than on a key's: every slot's hot word, each
// stripe under its lock, a slot rebuilt in place (reset()). Finding
// and inserting keys is table.ts's.

/**
 * Rebuilds slot `ref` in place, fresh, for the same key (reset()): under the slot's lock,
 * so that inserters do not mistake the RESERVED state for an abandoned one, and so that
 * nobody can reassign the slot meanwhile: the slot's fingerprint, checked here, proves it
 * is still `key`'s however many generations went by since `ref` was derived.
 */
export function rebuildSlot(
  table: SlotTable,
  ref: number,
  policy: SlotPolicy,
  key: Key | undefined,
): boolean {
  const w = ref >>> 4;
  const s = slotOfHotWord(table.layout, w);
  const word = lockWordOf(table.layout, s);
  const token = lock(table.i32, word);
  try {
    if (key !== undefined && !table.holds(w, ref & 15, key)) return false;
    for (;;) {
      const st = Atomics.load(table.i32, w + S_STATE);
      if ((st & PAYLOAD_MASK) === RESERVED || st >>> GEN_SHIFT !== (ref & 15)) return false;
      const reserved = (st & GEN_MASK) | RESERVED;
      if (Atomics.compareExchange(table.i32, w + S_STATE, st, reserved) !== st) continue;
      policy.rebuilding(w);
      policy.initSlot(s);
      Atomics.store(table.i32, w + S_STATE, (st & GEN_MASK) | FRESH);
      return true;
    }
  } finally {
    unlock(table.i32, word, token);
  }
}

/**
 * Calls `f` holding the lock of the stripe of hot word `w`: meanwhile nobody converts
 * (reconfigure()), rebuilds or reassigns the slot, so its generation stays as `f` reads it.
 */
export function withSlotLocked(table: SlotTable, w: number, f: () => void): void {
  const word = lockWordOf(table.layout, slotOfHotWord(table.layout, w));
  const token = lock(table.i32, word);
  try {
    f();
  } finally {
    unlock(table.i32, word, token);
  }
}

/** The lock word guarding slot `s` (its stripe's, or the default key's). */
function lockWordOf(layout: Layout, s: number): number {
  if (s === 0) return H_DEFAULT_LOCK;
  const seg = segmentOfSlot(layout, s);
  return seg.lockBase + Math.floor((s - seg.first) / STRIPE_SLOTS);
}

/**
 * Calls `visit` with the hot words of each stripe's slots, the default key's first, each
 * while holding the stripe's lock (the default key's lock): nobody inserts a key into the
 * stripe or rebuilds one of its slots meanwhile. Segments added meanwhile are visited too.
 */
export function forEachLockedStripe(table: SlotTable, visit: (words: number[]) => void): void {
  const lockAnd = (word: number, words: number[]) => {
    const token = lock(table.i32, word);
    try {
      visit(words);
    } finally {
      unlock(table.i32, word, token);
    }
  };
  lockAnd(H_DEFAULT_LOCK, [table.layout.hotBase + table.layout.hotOffset]);
  for (let k = 0; k < table.mapped(); k++) {
    const seg = table.layout.segments[k]!;
    for (let stripe = 0; stripe < seg.stripes; stripe++) {
      const first = seg.first + stripe * STRIPE_SLOTS;
      const words: number[] = [];
      for (let s = first; s < first + STRIPE_SLOTS; s++)
        words.push(hotWordIn(table.layout, seg, s - seg.first));
      lockAnd(seg.lockBase + stripe, words);
    }
  }
}

/** The hot (state) word of every slot in the segments that exist now, the default key's first. */
export function forEachHotWord(table: SlotTable, visit: (w: number) => void): void {
  visit(table.layout.hotBase + table.layout.hotOffset);
  const n = table.mapped();
  for (let k = 0; k < n; k++) {
    const seg = table.layout.segments[k]!;
    for (let s = seg.first; s < seg.first + seg.slots; s++)
      visit(hotWordIn(table.layout, seg, s - seg.first));
  }
}

/** Slots in the segments that exist now. */
export function slotCount(table: SlotTable): number {
  const n = table.mapped();
  let slots = 0;
  for (let k = 0; k < n; k++) slots += table.layout.segments[k]!.slots;
  return slots;
}
