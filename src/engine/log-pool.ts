import {
  type Layout,
  logPoolBytes,
  P_RINGS,
  POOL_HEADER_BYTES,
  POOL_SPARE_RINGS,
  ringWord,
} from './layout.js';

/**
 * Per-slot memory of a size fixed by the options (`layout.logRing` 16-byte entries:
 * SlidingLog's rings of grant times), in a buffer of their own that grows as keys become active: a slot
 * takes a ring the first time a key claims it and keeps it for every later key, so the
 * pool holds as many rings as slots were ever used (about the most keys active at once),
 * not one per slot the table could hold. 10 000 possible keys of a 1 000-permit log cost
 * what the keys in use take (32 KiB each), not 470 MiB up front.
 *
 * Taking a ring is one `Atomics.add` on the pool's count; the first thread that needs
 * room beyond the pool's length grows it (by an eighth, at least to what it needs; a
 * thread that loses the race finds it grown). Every thread maps the pool again when it
 * meets a ring past its view, as the table does with its segments.
 */
export class LogPool {
  /** Fixed-length views of the pool as far as this thread has mapped it. */
  i32: Int32Array;
  f64: Float64Array;
  /** Bytes the views cover (a plain field: a view's byteLength costs more to read). */
  private mapped: number;
  private readonly ringBytes: number;
  /** The slot start() looked up last (this thread), and its ring's byte offset. */
  private lastSlot = -1;
  private lastStart = 0;
  private readonly maxRings: number;

  constructor(
    readonly buffer: SharedArrayBuffer,
    private readonly layout: Layout,
  ) {
    this.ringBytes = layout.logRing * 16;
    this.maxRings = (layout.poolMaxBytes - POOL_HEADER_BYTES) / this.ringBytes;
    this.mapped = buffer.byteLength;
    this.i32 = new Int32Array(buffer, 0, this.mapped >> 2);
    this.f64 = new Float64Array(buffer, 0, this.mapped >> 3);
  }

  /**
   * Byte offset of slot `s`'s ring in the pool; the slot has one (it was given one before
   * its first key could be decided). `table` is the caller's view of the main buffer.
   */
  start(table: Int32Array, s: number): number {
    // A slot keeps its ring for good: the last one looked up serves until another slot's.
    if (s === this.lastSlot) return this.lastStart;
    const r = table[ringWord(this.layout, s)]! - 1;
    const byte = POOL_HEADER_BYTES + r * this.ringBytes;
    if (byte + this.ringBytes > this.mapped) this.remap();
    if (r >= 0) {
      this.lastSlot = s;
      this.lastStart = byte;
    }
    return byte;
  }

  /**
   * Gives slot `s` a ring if it has none; the caller holds the slot (it is RESERVED, or
   * being created). Returns the ring's byte offset.
   */
  take(table: Int32Array, s: number): number {
    const word = ringWord(this.layout, s);
    if (Atomics.load(table, word) === 0) {
      const r = Atomics.add(this.i32, P_RINGS, 1);
      if (r >= this.maxRings) {
        Atomics.sub(this.i32, P_RINGS, 1);
        // Only threads that died between taking a ring and recording it (more than
        // POOL_SPARE_RINGS of them) can exhaust it: a slot keeps its ring.
        throw new Error(
          `atomic-limiter: the log pool is exhausted (${this.maxRings} rings, ${POOL_SPARE_RINGS} spare, lost to terminated threads)`,
        );
      }
      this.reserve(r + 1);
      Atomics.store(table, word, r + 1);
    }
    return this.start(table, s);
  }

  /** Grows the pool to hold at least `rings` rings. */
  private reserve(rings: number): void {
    const needed = logPoolBytes(this.layout.logRing, rings);
    const buffer = this.buffer;
    if (buffer.byteLength >= needed) return;
    const room = (buffer.byteLength - POOL_HEADER_BYTES) / this.ringBytes;
    const target = Math.min(
      this.maxRings,
      Math.max(rings, room + Math.max(1, Math.ceil(room / 8))),
    );
    try {
      buffer.grow(logPoolBytes(this.layout.logRing, target));
    } catch (error) {
      // Another thread grew it meanwhile, past the length asked for: that is as good.
      if (buffer.byteLength < needed) throw error;
    }
  }

  /** Maps the pool again as far as it has grown. */
  private remap(): void {
    this.mapped = this.buffer.byteLength;
    this.i32 = new Int32Array(this.buffer, 0, this.mapped >> 2);
    this.f64 = new Float64Array(this.buffer, 0, this.mapped >> 3);
  }
}
