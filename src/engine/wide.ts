import {
  FRESH,
  GEN_MASK,
  PAYLOAD_MASK,
  S_STATE,
  W_FRESH,
  WIDE_LOW,
  WIDE_LOW_MASK,
} from './layout.js';

// The state of a wide table's slot: a payload below 2^53 split over the state word and the
// ext word before it (see WIDE_LOW_BITS in layout.ts), changed by one 64-bit CAS.

// Per thread (each thread has its own copy of this module): the 64-bit operands of a CAS
// and its result, built and read through their 32-bit halves, so that the only BigInts
// are the three the CAS itself takes and returns (no BigInt arithmetic, no BigInt
// comparison). Little-endian, as every platform Node runs on: a 64-bit
// word's low half is the ext word (lower address).
const operands = new BigInt64Array(3);
const halves = new Int32Array(operands.buffer);
// The words and the BigInt of this thread's last successful CAS (any slot: equal words
// are an equal 64-bit value).
let lastState = 0;
let lastExt = 0;
let lastWritten = 0n;

/** A fixed-length BigInt64 view of the whole buffer as long as it is now. */
export function fixedView64(buffer: SharedArrayBuffer): BigInt64Array {
  return new BigInt64Array(buffer, 0, buffer.byteLength >> 3);
}

/** The payload of state word `s` with ext word `x` (W_FRESH for a fresh slot). */
export function widePayload(s: number, x: number): number {
  return (s & PAYLOAD_MASK) === FRESH ? W_FRESH : (s & WIDE_LOW_MASK) + x * WIDE_LOW;
}

/** The state word holding payload `p`, keeping the generation of `s`. */
export function wideState(s: number, p: number): number {
  if (p === W_FRESH) return (s & GEN_MASK) | FRESH;
  // p − ⌊p / 2^27⌋ · 2^27: exact (powers of two), where `%` would call fmod.
  return (s & GEN_MASK) | (p - Math.floor(p / WIDE_LOW) * WIDE_LOW);
}

/** The ext word holding payload `p`. */
export function wideExt(p: number): number {
  return p === W_FRESH ? 0 : Math.floor(p / WIDE_LOW);
}

/**
 * One CAS of the 64-bit word [ext, state] whose state word is `w`: from (`s`, `x`) to
 * (`ns`, `nx`). True when it took.
 */
export function cas64(
  b64: BigInt64Array,
  w: number,
  s: number,
  x: number,
  ns: number,
  nx: number,
): boolean {
  // The expected value is often what this thread wrote last (a key deciding again): its
  // BigInt is kept, one allocation (and its share of garbage collection) less per grant.
  let expected: bigint;
  if (s === lastState && x === lastExt) {
    expected = lastWritten;
  } else {
    halves[0] = x;
    halves[1] = s;
    expected = operands[0]!;
  }
  halves[2] = nx;
  halves[3] = ns;
  const replacement = operands[1]!;
  operands[2] = Atomics.compareExchange(b64, (w - 1) >> 1, expected, replacement);
  if (halves[4] !== x || halves[5] !== s) return false;
  lastState = ns;
  lastExt = nx;
  lastWritten = replacement;
  return true;
}

/**
 * Sets the 64-bit word [ext, state] whose state word is `w` to (`ns`, `nx`) with two plain
 * stores: what a limiter no other thread can reach (Core.shared false) does instead of
 * cas64(), whose check would guard against nothing.
 */
export function storeWide(i32: Int32Array, w: number, ns: number, nx: number): void {
  i32[w - 1] = nx;
  i32[w + S_STATE] = ns;
}
