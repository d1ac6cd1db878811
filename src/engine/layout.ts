/**
 * The shared buffer's layout, in one place. Offsets are Int32 word indices into the whole
 * buffer unless named `…_F64` (Float64 indices) or `…Bytes`.
 *
 *   header (256 B)  magic, version, algorithm, sizes, hash seed, options, epoch, control,
 *                   counters — each group that changes at run time on a line of its own
 *   stripe locks    one Int32 per stripe (insert path only)
 *   hot slots       16 B per slot: [state, stamp, admitted, rejected]; the default key's
 *                   slot has a 64-byte line to itself. Wide tables (limits past the
 *                   state word's 28-bit payload): three slots to a 64-byte line,
 *                   [ext, state, stamp, admitted] × 3 and then the three slots'
 *                   `rejected` and a spare word, so that every decision touches one line;
 *                   ext and state form one 64-bit word changed by one 64-bit CAS (see
 *                   WIDE_LOW_BITS). See hotWord() and rejectedWord()
 *   cold slots      8 B per keyed slot: the key's 64-bit fingerprint
 *   queues          16 B per slot: [lock, head record, tail record, permits waiting]
 *   waiter records  32 B each, `maxWaiters` of them, shared by every key's queue
 *   threads         8 B per thread that waits or holds: [token, heartbeat ms], THREAD_ENTRIES
 *   holders         Concurrency only: 16 B records [slot ref, permits, thread, token],
 *                   2 per slot, of the permits each thread holds (given back if it dies);
 *                   every segment the table grows into brings 2 per slot of its own
 *   ring numbers    SlidingLog only: 4 B per slot, the number (+ 1) of the slot's log ring
 *
 * The key table (locks, hot, cold, queues, ring numbers) is segment 0 of a table that
 * grows by appending segments past the end of the buffer (see Segment).
 *
 * SlidingLog's rings of 16-byte entries live in a second buffer, the log pool (see
 * LogPool in log-pool.ts): a slot takes a ring from it the first time a key
 * claims the slot and keeps it, so the pool holds as many rings as slots ever used.
 *
 * Bump LAYOUT_VERSION whenever any of this changes meaning.
 */

export const MAGIC = 0x41544c4d; // 'ATLM'
export const LAYOUT_VERSION = 8;

// Header words (line 0: written once at creation, read-only afterwards).
export const H_MAGIC = 0;
export const H_VERSION = 1;
export const H_ALGO = 2;
export const H_SLOTS = 3; // keyed slots, not counting the default key's
export const H_STRIPES = 4;
export const H_SEED0 = 5;
export const H_SEED1 = 6;
export const H_KEYS = 7;
export const H_QUEUE_LIMIT = 8;
export const H_QUEUE_ORDER = 9;
export const H_LOG_RING = 10;
export const H_BYTES_DIV64 = 11;
export const H_MAX_WAITERS = 12;
export const H_HOLDERS = 13; // holder records (Concurrency), 0 for the rate limiters
export const H_WHEN_FULL = 14; // 1: a new key with no slot is allowed (whenFull: 'allow')
export const H_MAX_KEYS = 15; // the table's ceiling of keys (it grows from H_KEYS)
// Line 1 (bytes 64..128): algorithm options and the epoch, as Float64. The options change
// only by reconfigure(), under H_CONFIG's sequence lock; the epoch never.
export const F64_PARAMS = 8; // 7 params: F64 indices 8..14
export const F64_EPOCH_US = 15;
// Line 2 (bytes 128..192): the control word, read on every decision. Bit 0: closed.
// Bits 1..31: a count of slot-generation bumps (reclaims), in steps of 2; threads clear
// their key → slot caches when it moved far enough that a 4-bit generation could wrap.
export const H_CONTROL = 32;
export const H_DEFAULT_LOCK = 33;
// The table's segments that exist (≥ 1), and the lease lock of growing it (rarely written).
export const H_SEGMENTS = 34;
export const H_GROW_LOCK = 35;
/** 1: a wide table (a 64-bit state per slot, three slots to a line; read-only after creation). */
export const H_WIDE = 36;
/**
 * The options' sequence lock: even while the options (F64_PARAMS) are stable, odd while a
 * reconfigure() rewrites them and converts every slot's state; +2 per reconfigure. Threads
 * compare it with the value their copy of the options was read at, on slow paths only.
 */
export const H_CONFIG = 37;
// Line 3 (bytes 192..256): counters, written only on the insert path.
export const H_INSERTS = 48;
export const H_RECLAIMS = 49;
export const H_TABLE_FULL = 50;
export const H_LOCK_STEALS = 51;
export const H_HOLDERS_LOST = 52; // permits granted unrecorded: holder pool or thread table full
export const H_GROWTHS = 53; // segments added to the table
// What the counters of slots reclaimed for another key, or reset, held when zeroed (modulo
// 2^32): with every slot's own counters, the limiter's totals (atomic-limiter/metrics),
// which then never go back.
export const H_RETIRED_ADMITTED = 54;
export const H_RETIRED_REJECTED = 55;
export const HEADER_WORDS = 64;

// Hot slot fields.
export const S_STATE = 0;
export const S_STAMP = 1;
export const S_ADMITTED = 2;
export const S_REJECTED = 3;
export const HOT_WORDS = 4;

// State word: 4 generation bits on top of a 28-bit payload. The generation changes when
// a slot is given to another key, so a thread holding a stale slot index fails its CAS.
export const GEN_SHIFT = 28;
export const GEN_MASK = 0xf0000000 | 0;
export const PAYLOAD_MASK = 0x0fffffff;
/** Payload of a slot whose algorithm state is initial (full bucket, empty window). */
export const FRESH = 0x0fffffff;
/** Payload of a slot being (re)assigned under its stripe lock; never decided on. */
export const RESERVED = 0x0ffffffe;
/**
 * A step() result meaning "refused": not an integer, so no result of a grant equals it —
 * neither a 32-bit state word nor a wide table's payload (any integer from 0 to 2^53, 2^32
 * included: a wide bucket's new TAT can be that).
 */
export const REJECT = -0.5;

/**
 * Wide tables: a slot's state is a payload P (an integer below 2^53, exact in a double)
 * split over two words, the state word (generation, then bit 27 clear, then P's low 27
 * bits) and the ext word before it (P's high bits); one 64-bit CAS changes both. Bit 27
 * is set only in the two reserved payloads (FRESH, RESERVED), so no P looks like them.
 * Algorithms see P itself, or W_FRESH for a fresh slot.
 */
export const WIDE_LOW_BITS = 27;
export const WIDE_LOW = 2 ** 27;
export const WIDE_LOW_MASK = 0x07ffffff;
/** The payload algorithms see for a fresh wide slot: no packed payload equals it. */
export const W_FRESH = 2 ** 53;
/** Largest wide payload + 1. */
export const WIDE_SPAN = 2 ** 53;

/**
 * Stamp: the coarse time of the slot's last admission, floor(µs since the limiter's
 * epoch / 2^20) (about 1.05 s) in the low 31 bits of its word, written (only ever
 * increased) before the state CAS. Payloads keep time modulo 2^28 or fewer bits and are
 * decoded relative to the stamp, and the stamp itself is decoded relative to now
 * (differences modulo 2^31): so uptime is unbounded and a key idle for any time up to
 * 2^30 stamps (34 years) decodes exactly.
 */
export const STAMP_US = 2 ** 20;
export const STAMP_PER_US = 2 ** -20;

export const STRIPE_SLOTS = 16;
export const LINE_WORDS = 16;
/** Slots per 64-byte line of a wide table's hot region (see rejectedWord()). */
const WIDE_LINE_SLOTS = 3;
/** The first of a wide line's three rejected words (after its three hot slots). */
const WIDE_LINE_REJECTED = WIDE_LINE_SLOTS * HOT_WORDS;

// Queue fields, at queueBase + 4 × slot.
export const Q_LOCK = 0;
export const Q_HEAD = 1; // record index + 1, 0 when empty
export const Q_TAIL = 2;
export const Q_PERMITS = 3;
export const QUEUE_WORDS = 4;

// Waiter record fields, at poolBase + 8 × record.
export const R_STATUS = 0;
export const R_NEXT = 1; // record index + 1, 0 at the tail
export const R_SLOT = 2; // hot word of the slot the waiter queues on
export const R_PERMITS = 3;
export const R_THREAD = 4; // thread table entry
export const R_FUTEX = 5; // the word the waiter parks on; bumped to wake it
export const R_TOKEN = 6; // the thread entry's token when the record was made
export const R_ID = 7; // unique per allocation: tells an owner its record was swept
export const RECORD_WORDS = 8;

export const W_FREE = 0;
export const W_WAITING = 1;
export const W_SERVING = 2;
export const W_EVICTED = 3;
export const W_CLOSED = 4;
export const W_RESERVED = 5; // being filled in by its owner

/**
 * Threads that may wait on, or hold Concurrency permits of, one limiter at once (an entry
 * whose thread fell silent for HOLDER_DEAD_MS is taken over). Past it, acquire() cannot
 * wait (QueueFullError, before anything is granted) and a grant is not recorded as a
 * holder's: it stays counted and comes back only by release.
 */
export const THREAD_ENTRIES = 1024;
export const HOLDER_WORDS = 4;
export const T_TOKEN = 0;
export const T_HEARTBEAT = 1;

/**
 * Top bit of the stamp word: "this key has waiters". Set and cleared under the key's
 * queue lock; read by every decision (it shares the stamp's word, so it costs nothing).
 */
export const QUEUED_FLAG = 0x80000000 | 0;
export const STAMP_MASK = 0x7fffffff;

/**
 * One segment of the key table: its own stripes, stripe locks, hot slots, fingerprints,
 * queue words and (SlidingLog) ring numbers. Segment 0 is laid out with the rest of the
 * buffer; when it is full of active keys the table grows by appending segment 1, 2, … at
 * the end of the (growable) buffer, each twice the capacity of the one before (segment 1:
 * `keys`), so slot indices, and every thread's references to them, never move.
 * Slots are numbered across segments: segment k holds slots first … first + slots − 1.
 */
export interface Segment {
  readonly index: number;
  readonly first: number;
  readonly slots: number;
  readonly stripes: number;
  readonly lockBase: number;
  /** Hot (state) word of slot `first` (its line's first word + `hotOffset`). */
  readonly hotStart: number;
  readonly coldBase: number;
  /** Queue words of slot `first` (segment 0: of the default slot, slot 0). */
  readonly queueBase: number;
  /** Ring-number word of slot `first` (segment 0: of slot 0), 0 without a log. */
  readonly ringBase: number;
  /** First word of the segment's holder records (Concurrency), and how many it has. */
  readonly holderBase: number;
  readonly holders: number;
  /** Byte offset just past the segment: the buffer's length once it exists. */
  readonly endBytes: number;
}

export interface Layout {
  /** A wide table: the state word second in its hot slot (see WIDE_LOW_BITS). */
  wide: boolean;
  /** The state word's offset in its hot slot (0, or 1 when wide: the ext word first). */
  hotOffset: number;
  /** Segment 0's slots and stripes (the table as created). */
  slots: number;
  stripes: number;
  lockBase: number;
  hotBase: number;
  coldBase: number;
  queueBase: number;
  poolBase: number;
  maxWaiters: number;
  threadBase: number;
  holderBase: number;
  holders: number;
  /** Entries per SlidingLog ring (0: no log). */
  logRing: number;
  /** Bytes of the log pool as created, and once it holds a ring for every slot. */
  poolBytes: number;
  poolMaxBytes: number;
  /** Bytes of the buffer as created (segment 0 and everything shared). */
  bytes: number;
  /** Every segment the table may ever have; the first `H_SEGMENTS` of them exist. */
  segments: readonly Segment[];
  /** Bytes of the buffer once every segment exists: what it reserves. */
  maxBytes: number;
  /** Both buffers as created, and what they reserve together (the `maxBytes` budget). */
  totalBytes: number;
  totalMaxBytes: number;
  /** Keys the table may hold once every segment exists. */
  maxKeys: number;
}

function alignWords(words: number): number {
  return Math.ceil(words / LINE_WORDS) * LINE_WORDS;
}

function stripesFor(keys: number): number {
  return Math.max(2, Math.ceil((keys * 1.5) / STRIPE_SLOTS));
}

/**
 * Slots per key: 1.5×, so that with two candidate stripes per key (the less loaded one
 * wins) a stripe of 16 overflows with negligible probability at full occupancy. The table
 * starts with room for `keys` and may grow to `maxKeys` (≥ keys).
 */
export function computeLayout(
  keys: number,
  logRing: number,
  maxWaiters: number,
  holders: number,
  maxKeys = keys,
  wide = false,
): Layout {
  const hotOffset = wide ? 1 : 0;
  const stripes = stripesFor(keys);
  const slots = stripes * STRIPE_SLOTS;
  const lockBase = HEADER_WORDS;
  const hotBase = alignWords(lockBase + stripes);
  // Default slot: one whole line; keyed slot s (1..slots) from hotBase + 16 (see hotWord()).
  const coldBase = alignWords(hotBase + LINE_WORDS + hotRegionWords(slots, wide));
  const queueBase = alignWords(coldBase + slots * 2);
  const poolBase = alignWords(queueBase + (slots + 1) * QUEUE_WORDS);
  const threadBase = alignWords(poolBase + maxWaiters * RECORD_WORDS);
  const holderBase = alignWords(threadBase + THREAD_ENTRIES * 2);
  const ringBase = logRing > 0 ? alignWords(holderBase + holders * HOLDER_WORDS) : 0;
  const end = alignWords(logRing > 0 ? ringBase + slots + 1 : holderBase + holders * HOLDER_WORDS);
  const bytes = end * 4;
  // Holder records per slot (segment 0 has them for its slots and the default key's).
  const holdersPerSlot = holders / (slots + 1);
  const segments: Segment[] = [
    {
      index: 0,
      first: 1,
      slots,
      stripes,
      lockBase,
      hotStart: hotBase + LINE_WORDS + hotOffset,
      coldBase,
      queueBase,
      ringBase,
      holderBase,
      holders,
      endBytes: bytes,
    },
  ];
  let capacity = keys;
  let first = slots + 1;
  let startWords = bytes / 4;
  for (let k = 1; capacity < maxKeys; k++) {
    const segKeys = keys * 2 ** (k - 1);
    capacity += segKeys;
    const segStripes = stripesFor(segKeys);
    const segSlots = segStripes * STRIPE_SLOTS;
    const segLock = alignWords(startWords);
    const segHot = alignWords(segLock + segStripes);
    const segCold = alignWords(segHot + hotRegionWords(segSlots, wide));
    const segQueue = alignWords(segCold + segSlots * 2);
    const segRings = logRing > 0 ? alignWords(segQueue + segSlots * QUEUE_WORDS) : 0;
    const segHolders = segSlots * holdersPerSlot;
    const segHolderBase = alignWords(
      logRing > 0 ? segRings + segSlots : segQueue + segSlots * QUEUE_WORDS,
    );
    const segEnd = alignWords(segHolderBase + segHolders * HOLDER_WORDS);
    const endBytes = segEnd * 4;
    segments.push({
      index: k,
      first,
      slots: segSlots,
      stripes: segStripes,
      lockBase: segLock,
      hotStart: segHot + hotOffset,
      coldBase: segCold,
      queueBase: segQueue,
      ringBase: segRings,
      holderBase: segHolderBase,
      holders: segHolders,
      endBytes,
    });
    first += segSlots;
    startWords = endBytes / 4;
  }
  const maxBytes = segments[segments.length - 1]!.endBytes;
  // One ring per slot at most (a slot keeps its ring), the default key's, and a few for
  // rings a thread took and died before recording (see LogPool).
  const poolMaxBytes = logRing > 0 ? logPoolBytes(logRing, first + POOL_SPARE_RINGS) : 0;
  const poolBytes = logRing > 0 ? logPoolBytes(logRing, Math.min(first, POOL_FIRST_RINGS)) : 0;
  return {
    wide,
    hotOffset,
    slots,
    stripes,
    lockBase,
    hotBase,
    coldBase,
    queueBase,
    poolBase,
    maxWaiters,
    threadBase,
    holderBase,
    holders,
    logRing,
    poolBytes,
    poolMaxBytes,
    bytes,
    segments,
    maxBytes,
    totalBytes: bytes + poolBytes,
    totalMaxBytes: maxBytes + poolMaxBytes,
    maxKeys: capacity,
  };
}

/** Bytes before the log pool's first ring: its header (the count of rings taken). */
export const POOL_HEADER_BYTES = 64;
/** Rings the log pool has room for when created (it grows by an eighth at a time). */
export const POOL_FIRST_RINGS = 8;
/** Rings beyond one per slot that the log pool may hand out. */
export const POOL_SPARE_RINGS = 32;
/** Word of the log pool's header: rings handed out so far. */
export const P_RINGS = 0;

/** Bytes of a log pool with room for `rings` rings of `logRing` entries. */
export function logPoolBytes(logRing: number, rings: number): number {
  return POOL_HEADER_BYTES + rings * logRing * 16;
}

/** The segment holding slot `s` (≥ 1). */
export function segmentOfSlot(layout: Layout, s: number): Segment {
  const segs = layout.segments;
  let k = 0;
  while (k + 1 < segs.length && s >= segs[k + 1]!.first) k++;
  return segs[k]!;
}

/** Words of a segment's hot slots: four per slot, or a line per three slots when wide. */
function hotRegionWords(slots: number, wide: boolean): number {
  return wide ? Math.ceil(slots / WIDE_LINE_SLOTS) * LINE_WORDS : slots * HOT_WORDS;
}

/** Hot (state) word of the slot `k` slots past the first of segment `seg`. */
export function hotWordIn(layout: Layout, seg: Segment, k: number): number {
  if (!layout.wide) return seg.hotStart + HOT_WORDS * k;
  const line = Math.floor(k / WIDE_LINE_SLOTS);
  return seg.hotStart + LINE_WORDS * line + HOT_WORDS * (k - WIDE_LINE_SLOTS * line);
}

/** Hot (state) word index of slot `s` (0 = the default key). */
export function hotWord(layout: Layout, s: number): number {
  if (s === 0) return layout.hotBase + layout.hotOffset;
  const seg = s <= layout.slots ? layout.segments[0]! : segmentOfSlot(layout, s);
  return hotWordIn(layout, seg, s - seg.first);
}

/**
 * The word counting the permits refused on the slot whose hot (state) word is `w`: in the
 * hot slot of a narrow table; in a wide one, in the slot's own line, after the line's three
 * slots — every line (the default slot's too) starts at a multiple of 16 words, and the
 * state word is the line's 1st, 5th or 9th word.
 */
export function rejectedWord(layout: Layout, w: number): number {
  return layout.wide ? wideRejectedWord(w) : w + S_REJECTED;
}

/** rejectedWord() of a wide table. */
export function wideRejectedWord(w: number): number {
  const x = w - 1; // the ext word: the line's first, 5th or 9th word
  return (x & -LINE_WORDS) + WIDE_LINE_REJECTED + ((x & (LINE_WORDS - 1)) >> 2);
}

/** Slot number of a hot word index (inverse of hotWord). */
export function slotOfHotWord(layout: Layout, w: number): number {
  if (w === layout.hotBase + layout.hotOffset) return 0;
  const segs = layout.segments;
  let k = segs.length - 1;
  while (k > 0 && w < segs[k]!.hotStart) k--;
  const seg = segs[k]!;
  const d = w - seg.hotStart;
  if (!layout.wide) return seg.first + d / HOT_WORDS;
  const line = Math.floor(d / LINE_WORDS);
  return seg.first + WIDE_LINE_SLOTS * line + (d - LINE_WORDS * line) / HOT_WORDS;
}

/** Word of slot `s`'s fingerprint (two words; `s` ≥ 1). */
export function coldWord(layout: Layout, s: number): number {
  const seg = s <= layout.slots ? layout.segments[0]! : segmentOfSlot(layout, s);
  return seg.coldBase + 2 * (s - seg.first);
}

/** Queue words of slot `s` (0 = the default key). */
export function queueWord(layout: Layout, s: number): number {
  if (s <= layout.slots) return layout.queueBase + s * QUEUE_WORDS;
  const seg = segmentOfSlot(layout, s);
  return seg.queueBase + (s - seg.first) * QUEUE_WORDS;
}

/** Word holding slot `s`'s ring number + 1, 0 while it has none (0 = the default key). */
export function ringWord(layout: Layout, s: number): number {
  if (s <= layout.slots) return layout.segments[0]!.ringBase + s;
  const seg = segmentOfSlot(layout, s);
  return seg.ringBase + (s - seg.first);
}
