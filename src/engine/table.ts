import { isKey, keyError } from '../validate.js';
import { hashKey } from './hash.js';
import {
  coldWord,
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_CONFIG,
  H_CONTROL,
  H_DEFAULT_LOCK,
  H_GROW_LOCK,
  H_GROWTHS,
  H_INSERTS,
  H_RECLAIMS,
  H_RETIRED_ADMITTED,
  H_RETIRED_REJECTED,
  H_SEED0,
  H_SEED1,
  H_SEGMENTS,
  H_TABLE_FULL,
  hotWord,
  hotWordIn,
  type Layout,
  PAYLOAD_MASK,
  RESERVED,
  rejectedWord,
  S_ADMITTED,
  S_STAMP,
  S_STATE,
  type Segment,
  STRIPE_SLOTS,
  slotOfHotWord,
} from './layout.js';
import { lock, unlock } from './lease-lock.js';
import { cas64 } from './wide.js';

export type Key = string | number;

/** What the table needs to know about the algorithm that owns it. */
export interface SlotPolicy {
  /** True when the slot's state is equivalent to a fresh one and nobody waits on it. */
  isIdle(state: number, w: number, nowUs: number): boolean;
  /** Prepares algorithm-specific memory of slot `s` (SlidingLog's ring) before publishing. */
  initSlot(s: number): void;
  /**
   * reset() rebuilds slot word `w`: called while its state is RESERVED, under its lock, so
   * no decision lands on it meanwhile (Concurrency voids its holder records).
   */
  rebuilding(w: number): void;
}

/** Packed slot reference: hot word index × 16 + generation. Never negative. */
export const NO_SLOT = -1;

/**
 * A slot reference (index + 4-bit generation) proves that the slot still holds its key only
 * while fewer than 16 generation bumps happened since it was derived; the control word counts
 * bumps (in steps of 2) anywhere in the table. So references — cached ones and the one a
 * decision is using — are trusted while the control word is within this span of the epoch
 * they were derived after, and looked up again otherwise.
 */
export const GEN_SAFE_SPAN = 2 * 12;
const CACHE_MAX_ENTRIES = 1 << 20;
/**
 * The cache keeps the key strings it holds alive: past this many characters of keys (~16
 * MB of strings) it starts over, so that keys a client chooses (4 KB each at most) cannot
 * grow every thread's heap without bound.
 */
const CACHE_MAX_CHARS = 1 << 23;

/**
 * The key-striped open-addressing table in a limiter's buffer, seen from one thread.
 * Decisions never lock: they read a slot's state and CAS it. Only inserting a key into a
 * stripe (and reassigning an idle slot) takes that stripe's lock, and a lock is a lease.
 */
export class SlotTable {
  private readonly cache = new Map<Key, number>();
  /** The characters of the string keys in `cache` (see CACHE_MAX_CHARS). */
  private cacheChars = 0;
  /** The cache's entry last read or written (undefined: none), and its slot reference. */
  private lastKey: Key | undefined = undefined;
  private lastRef = NO_SLOT;
  /** The control word when the cache was last cleared: every reference is derived after it. */
  epoch: number;
  /** The options' version (H_CONFIG) then, read after the control word: see trusted(). */
  private epochConfig: number;
  private readonly hash = new Int32Array(2);
  private readonly pair = new Int32Array(2);
  /** insert()'s stripe locks held: two per segment at most. */
  private readonly lockWords: Int32Array;
  private readonly lockTokens: Int32Array;
  private readonly seed0: number;
  private readonly seed1: number;
  /**
   * Default key's packed reference. It is never reassigned, but reconfigure() bumps every
   * slot's generation: decisions then miss it and refresh() reads the generation again.
   */
  defaultSlot: number;
  /** The options' version (H_CONFIG) when defaultSlot's generation was read; -1: never. */
  private defaultConfig = -1;

  constructor(
    /** Replaced by remap() when the buffer grew (see Limiter.i32). */
    public i32: Int32Array,
    /** The same, as 64-bit words (wide tables' state CAS); replaced with `i32`. */
    public b64: BigInt64Array,
    readonly layout: Layout,
    private readonly owner: string,
    /** Maps the grown buffer into every view of this thread's limiter. */
    private readonly remap: () => void,
    /**
     * Brings this thread's copy of the options up to date (see Limiter.syncConfig): called
     * after every reference is derived, so that a reference to a slot converted by a
     * reconfigure() is only ever used with the options it was converted to.
     */
    private readonly sync: () => void,
  ) {
    this.lockWords = new Int32Array(2 * layout.segments.length);
    this.lockTokens = new Int32Array(2 * layout.segments.length);
    this.seed0 = i32[H_SEED0]!;
    this.seed1 = i32[H_SEED1]!;
    this.epoch = i32[H_CONTROL]! & ~1;
    this.epochConfig = Atomics.load(i32, H_CONFIG);
    const w = layout.hotBase + layout.hotOffset;
    this.defaultSlot = w * 16 + (i32[w + S_STATE]! >>> GEN_SHIFT);
  }

  /**
   * The slot of `key`, inserting it if absent. `control` is the control word the caller
   * just read. Returns NO_SLOT when the key's stripes are full of active keys.
   */
  slotOf(key: Key, control: number, nowUs: number, policy: SlotPolicy): number {
    if (control - this.epoch >= GEN_SAFE_SPAN) this.clearCache(control);
    // A key decided again and again (the same string, or an equal one) skips the Map.
    if (key === this.lastKey) return this.lastRef;
    const hit = this.cache.get(key);
    if (hit !== undefined) {
      this.lastKey = key;
      this.lastRef = hit;
      return hit;
    }
    return this.lookup(key, nowUs, policy, true);
  }

  /**
   * Forgets every cached slot: enough generation bumps happened since the cache was filled
   * that a slot's 4-bit generation may have wrapped, so a matching generation no longer
   * proves that a cached slot still holds its key.
   */
  private clearCache(control: number): void {
    this.cache.clear();
    this.cacheChars = 0;
    this.lastKey = undefined;
    this.epoch = control & ~1;
    this.epochConfig = Atomics.load(this.i32, H_CONFIG);
  }

  /**
   * Whether references derived since the epoch are still trusted (as while the control word
   * is within GEN_SAFE_SPAN of it), not counting what reconfigure()s added: GEN_SAFE_SPAN
   * each, to send every thread to stands(), where it bumped each slot's generation once
   * at most (counted as 2). So a decision made on a slot just before a reconfigure()
   * converted it stands, though the slot's generation moved on.
   */
  trusted(): boolean {
    for (;;) {
      // The options' version first: a reconfigure() it counts has added to the control word.
      // (One under way at the epoch is not counted: floor.)
      const config = Atomics.load(this.i32, H_CONFIG);
      // One under way now may have added to the control word, or be about to: wait for it
      // to finish (sync() does), and count it. Not counted, it would make the decision
      // untrusted, and a grant its conversion has already carried over be taken back from
      // a slot of another generation: charged, yet reported refused.
      // (Still under way after sync(): this thread is the one running it.)
      if ((config & 1) !== 0) {
        this.sync();
        if (Atomics.load(this.i32, H_CONFIG) !== config) continue;
      }
      const control = Atomics.load(this.i32, H_CONTROL);
      // One that started between the two reads: the same.
      if (Atomics.load(this.i32, H_CONFIG) !== config) continue;
      const reconfigures = Math.floor((config - this.epochConfig) / 2);
      return control - this.epoch - reconfigures * (GEN_SAFE_SPAN - 2) < GEN_SAFE_SPAN;
    }
  }

  /**
   * The least of `untilIdleUs` over the slots `key` could use (its two stripes) that have
   * no waiters: how long until one of them can be reclaimed. Infinity if none ever frees
   * by time alone. For a table-full refusal's retryAfterMs; reads, never locks.
   */
  soonestIdleUs(key: Key, untilIdleUs: (state: number, w: number) => number): number {
    this.fingerprint(key); // the stripes insert() would look in
    const fp0 = this.hash[0]!;
    const fp1 = this.hash[1]!;
    let best = Number.POSITIVE_INFINITY;
    const n = this.mapped();
    for (let k = 0; k < n; k++) {
      const seg = this.candidates(k, fp0, fp1);
      for (const stripe of [this.pair[0]!, this.pair[1]!]) {
        const first = seg.first + stripe * STRIPE_SLOTS;
        for (let s = first; s < first + STRIPE_SLOTS; s++) {
          const w = this.hotOf(seg, s);
          const st = Atomics.load(this.i32, w + S_STATE);
          if ((st & PAYLOAD_MASK) === RESERVED || Atomics.load(this.i32, w + S_STAMP) < 0) {
            continue;
          }
          best = Math.min(best, untilIdleUs(st, w));
        }
      }
    }
    return best;
  }

  /**
   * Forgets the cached slot of `key` and looks it up again (its generation changed, or too
   * many bumps happened for the generation to prove anything).
   */
  refresh(key: Key | undefined, nowUs: number, policy: SlotPolicy): number {
    if (key === undefined) {
      this.waitWhileReserved(policy);
      return this.defaultRef();
    }
    const control = Atomics.load(this.i32, H_CONTROL);
    if (control - this.epoch >= GEN_SAFE_SPAN) this.clearCache(control);
    if (this.cache.delete(key) && typeof key === 'string') this.cacheChars -= key.length;
    if (key === this.lastKey) this.lastKey = undefined;
    return this.lookup(key, nowUs, policy, true);
  }

  /** Starts a new epoch (clearing the cache) if the control word has moved a span since. */
  renewEpoch(): void {
    const control = Atomics.load(this.i32, H_CONTROL);
    if (control - this.epoch >= GEN_SAFE_SPAN) this.clearCache(control);
  }

  /** The slot of `key` if present, without inserting it. */
  find(key: Key | undefined): number {
    if (key === undefined) {
      // Only a reconfigure() moves the default slot's generation (see defaultRef()).
      return Atomics.load(this.i32, H_CONFIG) === this.defaultConfig
        ? this.defaultSlot
        : this.defaultRef();
    }
    return this.findKeyed(key);
  }

  /** find() of a key given. */
  private findKeyed(key: Key): number {
    // The same epoch rule as slotOf(): without it, a slot reused 16 times would match a
    // stale cache entry's generation and this thread would act on another key's state.
    // Plain reads, as enter() reads the control word: every caller checks the slot's
    // generation again where it acts on the slot (a CAS, or under the slot's lock).
    const control = this.i32[H_CONTROL]!;
    if (control - this.epoch >= GEN_SAFE_SPAN) this.clearCache(control);
    const hit = key === this.lastKey ? this.lastRef : this.cache.get(key);
    if (hit !== undefined) {
      const st = this.i32[hit >>> 4]!;
      if (st >>> GEN_SHIFT === (hit & 15) && (st & PAYLOAD_MASK) !== RESERVED) return hit;
    }
    return this.lookup(key, 0, null, false);
  }

  /** The default key's reference, with the generation its slot has now (see defaultSlot). */
  private defaultRef(): number {
    // Only a reconfigure() moves the default slot's generation: none since the last look
    // (the options' version the same), the reference then still stands.
    const w = this.defaultSlot >>> 4;
    for (;;) {
      const config = Atomics.load(this.i32, H_CONFIG);
      const gen = Atomics.load(this.i32, w + S_STATE) >>> GEN_SHIFT;
      this.sync();
      // A reconfigure() that ran meanwhile bumped it: read it again under the new options.
      if (Atomics.load(this.i32, w + S_STATE) >>> GEN_SHIFT !== gen) continue;
      this.defaultSlot = w * 16 + gen;
      // Odd while a reconfigure() was under way: never equal to a later version.
      this.defaultConfig = config;
      return this.defaultSlot;
    }
  }

  private lookup(key: Key, nowUs: number, policy: SlotPolicy | null, insert: boolean): number {
    if (!isKey(key)) {
      throw keyError(this.owner, key);
    }
    this.fingerprint(key);
    const fp0 = this.hash[0]!;
    const fp1 = this.hash[1]!;
    const n = this.mapped();
    let found = NO_SLOT;
    for (let k = 0; k < n && found === NO_SLOT; k++) found = this.scanBoth(k, fp0, fp1);
    if (found === NO_SLOT && insert && policy) found = this.insert(fp0, fp1, nowUs, policy);
    if (found !== NO_SLOT) {
      const chars = typeof key === 'string' ? key.length : 0;
      if (this.cache.size >= CACHE_MAX_ENTRIES || this.cacheChars + chars > CACHE_MAX_CHARS) {
        this.cache.clear();
        this.cacheChars = 0;
      }
      if (!this.cache.has(key)) this.cacheChars += chars;
      this.cache.set(key, found);
      this.lastKey = key;
      this.lastRef = found;
    }
    // After the generation was read: see `sync`.
    this.sync();
    return found;
  }

  /** The key's fingerprint, into this.hash. */
  private fingerprint(key: Key): void {
    hashKey(key, this.seed0, this.seed1, this.hash);
    if (this.hash[0] === 0 && this.hash[1] === 0) this.hash[0] = 1; // (0, 0) marks an empty slot
  }

  /**
   * Whether slot word `w` holds `key` in generation `gen` now. A decision asks after its CAS
   * when so many slots were reassigned meanwhile that its generation check proved nothing
   * (see run() in decision.ts).
   */
  holds(w: number, gen: number, key: Key): boolean {
    const i32 = this.i32;
    this.fingerprint(key);
    const c = this.coldWord(slotOfHotWord(this.layout, w));
    const st = Atomics.load(i32, w + S_STATE);
    if (st >>> GEN_SHIFT !== gen || (st & PAYLOAD_MASK) === RESERVED) return false;
    if (Atomics.load(i32, c) !== this.hash[0] || Atomics.load(i32, c + 1) !== this.hash[1]) {
      return false;
    }
    // The fingerprint is written while the slot is RESERVED: the same generation read again
    // after it proves the fingerprint is that generation's.
    const again = Atomics.load(i32, w + S_STATE);
    return again >>> GEN_SHIFT === gen && (again & PAYLOAD_MASK) !== RESERVED;
  }

  /**
   * The number of segments that exist, with this thread's views covering all of them (a
   * segment added by another thread is mapped here before any of its slots is used).
   */
  mapped(): number {
    const n = Atomics.load(this.i32, H_SEGMENTS);
    if (this.layout.segments[n - 1]!.endBytes > this.i32.byteLength) this.remap();
    return n;
  }

  /** The fingerprint's two candidate stripes in segment `k`, into this.pair. */
  private candidates(k: number, fp0: number, fp1: number): Segment {
    const seg = this.layout.segments[k]!;
    const a = (fp0 >>> 0) % seg.stripes;
    let b = (fp1 >>> 0) % seg.stripes;
    if (b === a) b = (a + 1) % seg.stripes;
    this.pair[0] = a;
    this.pair[1] = b;
    return seg;
  }

  private scanBoth(k: number, fp0: number, fp1: number): number {
    const seg = this.candidates(k, fp0, fp1);
    const b = this.pair[1]!;
    const found = this.scan(seg, this.pair[0]!, fp0, fp1);
    return found !== NO_SLOT ? found : this.scan(seg, b, fp0, fp1);
  }

  private coldWord(s: number): number {
    return coldWord(this.layout, s);
  }

  /** The word counting the permits refused on the slot of hot word `w` (see layout.ts). */
  rejectedWord(w: number): number {
    return rejectedWord(this.layout, w);
  }

  /** Hot word of slot `s` of segment `seg` (no search: the caller knows the segment). */
  private hotOf(seg: Segment, s: number): number {
    return hotWordIn(this.layout, seg, s - seg.first);
  }

  /** Fingerprint word of slot `s` of segment `seg`. */
  private coldOf(seg: Segment, s: number): number {
    return seg.coldBase + 2 * (s - seg.first);
  }

  /** Finds the usable slot holding fingerprint (fp0, fp1) in `stripe` of `seg`. */
  private scan(seg: Segment, stripe: number, fp0: number, fp1: number): number {
    const i32 = this.i32;
    const first = seg.first + stripe * STRIPE_SLOTS;
    for (let s = first; s < first + STRIPE_SLOTS; s++) {
      const c = this.coldOf(seg, s);
      // Plain reads to skip the other keys' slots (an Atomics.load is a call here, not a
      // move); a match is confirmed by the ordered reads below.
      if (i32[c] !== fp0 || i32[c + 1] !== fp1) continue;
      if (Atomics.load(i32, c) !== fp0 || Atomics.load(i32, c + 1) !== fp1) continue;
      const w = this.hotOf(seg, s);
      const st = Atomics.load(i32, w + S_STATE);
      if ((st & PAYLOAD_MASK) === RESERVED) continue;
      // The fingerprint is written while the slot is RESERVED; reading it again after a
      // non-RESERVED state proves the state we read belongs to this key.
      if (Atomics.load(i32, c) !== fp0 || Atomics.load(i32, c + 1) !== fp1) continue;
      return w * 16 + (st >>> GEN_SHIFT);
    }
    return NO_SLOT;
  }

  /**
   * Inserts the fingerprint. It holds the key's two stripe locks in every segment that
   * exists (segment order, then stripe order: no two inserters wait on each other in a
   * cycle), so two threads inserting one key never put it in two places. Prefers an empty
   * slot in any segment, then an idle one to reclaim; when there is none and the table is
   * below its ceiling, it grows by one segment and tries again.
   */
  private insert(fp0: number, fp1: number, nowUs: number, policy: SlotPolicy): number {
    // Nothing allocated per insert: the locks held go in two preallocated arrays, and each
    // pass over the segments recomputes the (cheap) candidate stripes into this.pair.
    const words = this.lockWords;
    const tokens = this.lockTokens;
    let held = 0;
    for (;;) {
      const n = this.mapped();
      for (let k = 0; k < n; k++) {
        const seg = this.candidates(k, fp0, fp1);
        const a = this.pair[0]!;
        const b = this.pair[1]!;
        words[held] = seg.lockBase + (a < b ? a : b);
        tokens[held] = lock(this.i32, words[held]!);
        held++;
        words[held] = seg.lockBase + (a < b ? b : a);
        tokens[held] = lock(this.i32, words[held]!);
        held++;
      }
      try {
        // Grown meanwhile: take the new segment's locks too.
        if (Atomics.load(this.i32, H_SEGMENTS) !== n) continue;
        for (let k = 0; k < n; k++) {
          const found = this.scanBoth(k, fp0, fp1);
          if (found !== NO_SLOT) return found;
        }
        // Only holders of a stripe's lock reserve its slots, and we hold them: any RESERVED
        // slot here was left by a thread that died or overstayed its lease. Void it.
        for (let k = 0; k < n; k++) {
          const seg = this.candidates(k, fp0, fp1);
          const b = this.pair[1]!;
          this.voidReserved(seg, this.pair[0]!);
          this.voidReserved(seg, b);
        }
        for (let k = 0; k < n; k++) {
          const seg = this.candidates(k, fp0, fp1);
          let a = this.pair[0]!;
          let b = this.pair[1]!;
          if (this.load(seg, a) > this.load(seg, b)) {
            const less = b;
            b = a;
            a = less;
          }
          const r = this.claimEmpty(seg, a, fp0, fp1, policy);
          if (r !== NO_SLOT) return r;
          const r2 = this.claimEmpty(seg, b, fp0, fp1, policy);
          if (r2 !== NO_SLOT) return r2;
        }
        for (let k = 0; k < n; k++) {
          const seg = this.candidates(k, fp0, fp1);
          const b = this.pair[1]!;
          const r = this.reclaimIdle(seg, this.pair[0]!, fp0, fp1, nowUs, policy);
          if (r !== NO_SLOT) return r;
          const r2 = this.reclaimIdle(seg, b, fp0, fp1, nowUs, policy);
          if (r2 !== NO_SLOT) return r2;
        }
        if (n < this.layout.segments.length) {
          this.grow(n);
          continue;
        }
        Atomics.add(this.i32, H_TABLE_FULL, 1);
        return NO_SLOT;
      } finally {
        while (held > 0) {
          held--;
          unlock(this.i32, words[held]!, tokens[held]!);
        }
      }
    }
  }

  /** Claims an empty slot of `stripe` (the caller holds its lock), or NO_SLOT. */
  private claimEmpty(
    seg: Segment,
    stripe: number,
    fp0: number,
    fp1: number,
    policy: SlotPolicy,
  ): number {
    const s = this.pickEmpty(seg, stripe);
    return s === 0 ? NO_SLOT : this.claim(s, fp0, fp1, policy, false);
  }

  /** Reassigns an idle slot of `stripe` (the caller holds its lock), or NO_SLOT. */
  private reclaimIdle(
    seg: Segment,
    stripe: number,
    fp0: number,
    fp1: number,
    nowUs: number,
    policy: SlotPolicy,
  ): number {
    const first = seg.first + stripe * STRIPE_SLOTS;
    for (let s = first; s < first + STRIPE_SLOTS; s++) {
      const w = this.hotOf(seg, s);
      const st = Atomics.load(this.i32, w + S_STATE);
      // A wide slot's ext word, read before isIdle() looks: the reassigning CAS covers both
      // words, so a decision that changed either since fails it.
      const x = this.layout.wide ? Atomics.load(this.i32, w - 1) : 0;
      if ((st & PAYLOAD_MASK) === RESERVED || !policy.isIdle(st, w, nowUs)) continue;
      const r = this.claim(s, fp0, fp1, policy, true, st, x);
      if (r !== NO_SLOT) return r;
    }
    return NO_SLOT;
  }

  /**
   * Adds segment `n` (if nobody did meanwhile): grows the buffer — every thread's views
   * track its length — writes the new slots' initial states, then publishes the segment.
   * Decisions on existing keys go on meanwhile: nothing they touch moves.
   */
  private grow(n: number): void {
    const i32 = this.i32;
    const token = lock(this.i32, H_GROW_LOCK);
    try {
      if (Atomics.load(i32, H_SEGMENTS) !== n) return;
      const seg = this.layout.segments[n]!;
      const buffer = i32.buffer as SharedArrayBuffer;
      if (buffer.byteLength < seg.endBytes) buffer.grow(seg.endBytes);
      // A view of the new segment alone, to write its initial states before publishing it.
      const last = hotWordIn(this.layout, seg, seg.slots - 1);
      const fresh = new Int32Array(buffer, seg.hotStart * 4, last - seg.hotStart + 1);
      for (let k = 0; k < seg.slots; k++) {
        Atomics.store(fresh, hotWordIn(this.layout, seg, k) - seg.hotStart + S_STATE, FRESH);
      }
      Atomics.store(i32, H_SEGMENTS, n + 1);
      Atomics.add(i32, H_GROWTHS, 1);
      this.remap();
    } finally {
      unlock(this.i32, H_GROW_LOCK, token);
    }
  }

  private load(seg: Segment, stripe: number): number {
    let n = 0;
    const first = seg.first + stripe * STRIPE_SLOTS;
    for (let s = first; s < first + STRIPE_SLOTS; s++) {
      const c = this.coldOf(seg, s);
      if (this.i32[c] !== 0 || this.i32[c + 1] !== 0) n++;
    }
    return n;
  }

  /**
   * An empty slot of the stripe, preferring a cache line with the fewest keys already in
   * it, so that the first keys of a stripe never share a line. 0 when none. (The groups of
   * four are lines of a 32-bit table; a wide line holds three slots, but four slots apart
   * are still on four lines.)
   */
  private pickEmpty(seg: Segment, stripe: number): number {
    const first = seg.first + stripe * STRIPE_SLOTS;
    let best = 0;
    let bestLoad = 5;
    for (let line = 0; line < STRIPE_SLOTS / 4; line++) {
      let used = 0;
      let empty = 0;
      for (let k = 0; k < 4; k++) {
        const s = first + line * 4 + k;
        const c = this.coldOf(seg, s);
        if (this.i32[c] !== 0 || this.i32[c + 1] !== 0) used++;
        else if (empty === 0) empty = s;
      }
      if (empty !== 0 && used < bestLoad) {
        best = empty;
        bestLoad = used;
      }
    }
    return best;
  }

  /**
   * Gives slot `s` to the fingerprint. A reassigned slot (`reuse`) gets a new generation,
   * so a thread still holding its old index fails its CAS and looks the key up again.
   */
  private claim(
    s: number,
    fp0: number,
    fp1: number,
    policy: SlotPolicy,
    reuse: boolean,
    expected?: number,
    ext = 0,
  ): number {
    const i32 = this.i32;
    const w = hotWord(this.layout, s);
    const st = expected ?? Atomics.load(i32, w + S_STATE);
    if ((st & PAYLOAD_MASK) === RESERVED) return NO_SLOT;
    let gen = st >>> GEN_SHIFT;
    if (reuse) {
      // Count the bump before making it, so no thread can see the new generation and
      // still trust a cache entry from before the bump.
      Atomics.add(i32, H_CONTROL, 2);
      gen = (gen + 1) & 15;
    }
    const reserved = (gen << GEN_SHIFT) | RESERVED;
    if (reuse && this.layout.wide) {
      if (!cas64(this.b64, w, st, ext, reserved, 0)) return NO_SLOT;
    } else if (Atomics.compareExchange(i32, w + S_STATE, st, reserved) !== st) return NO_SLOT;
    if (reuse && Atomics.load(i32, w + S_STAMP) < 0) {
      // A waiter queued after policy.isIdle() looked: the slot is not idle. Give it back
      // (the waiter re-reads the state after raising its flag; see WaitQueues.enqueue).
      if (this.layout.wide) cas64(this.b64, w, reserved, 0, st, ext);
      else Atomics.store(i32, w + S_STATE, st);
      return NO_SLOT;
    }
    const c = this.coldWord(s);
    Atomics.store(i32, c, fp0);
    Atomics.store(i32, c + 1, fp1);
    Atomics.store(i32, w + S_STAMP, 0);
    this.retireCounters(w);
    policy.initSlot(s);
    const fresh = (gen << GEN_SHIFT) | FRESH;
    if (Atomics.compareExchange(i32, w + S_STATE, reserved, fresh) !== reserved) return NO_SLOT;
    Atomics.add(i32, reuse ? H_RECLAIMS : H_INSERTS, 1);
    return w * 16 + gen;
  }

  private voidReserved(seg: Segment, stripe: number): void {
    const i32 = this.i32;
    const first = seg.first + stripe * STRIPE_SLOTS;
    for (let s = first; s < first + STRIPE_SLOTS; s++) {
      const w = this.hotOf(seg, s);
      // A plain read finds the candidates; the CAS below acts only on what it validates.
      const st = i32[w + S_STATE]!;
      if ((st & PAYLOAD_MASK) !== RESERVED) continue;
      Atomics.add(i32, H_CONTROL, 2);
      const gen = ((st >>> GEN_SHIFT) + 1) & 15;
      const reserved = (gen << GEN_SHIFT) | RESERVED;
      if (Atomics.compareExchange(i32, w + S_STATE, st, reserved) !== st) continue;
      const c = this.coldOf(seg, s);
      Atomics.store(i32, c, 0);
      Atomics.store(i32, c + 1, 0);
      Atomics.store(i32, w + S_STATE, (gen << GEN_SHIFT) | FRESH);
    }
  }

  /**
   * Waits out a RESERVED state on the default slot (a reset that rebuilds the slot is in
   * progress). If its owner died, taking the lock over finishes the reset for it.
   */
  private waitWhileReserved(policy: SlotPolicy): void {
    const w = this.layout.hotBase + this.layout.hotOffset;
    for (;;) {
      if ((Atomics.load(this.i32, w + S_STATE) & PAYLOAD_MASK) !== RESERVED) return;
      const token = lock(this.i32, H_DEFAULT_LOCK);
      const st = Atomics.load(this.i32, w + S_STATE);
      if ((st & PAYLOAD_MASK) === RESERVED) {
        policy.rebuilding(w);
        policy.initSlot(0);
        Atomics.store(this.i32, w + S_STATE, (st & GEN_MASK) | FRESH);
      }
      unlock(this.i32, H_DEFAULT_LOCK, token);
    }
  }

  /**
   * Zeroes the counters of slot word `w`, adding what they held to the table's retired
   * totals (see H_RETIRED_ADMITTED): by exchange, so that a count landing meanwhile is in
   * one or the other, never lost.
   */
  retireCounters(w: number): void {
    const i32 = this.i32;
    const admitted = Atomics.exchange(i32, w + S_ADMITTED, 0);
    if (admitted !== 0) Atomics.add(i32, H_RETIRED_ADMITTED, admitted);
    const rejected = Atomics.exchange(i32, this.rejectedWord(w), 0);
    if (rejected !== 0) Atomics.add(i32, H_RETIRED_REJECTED, rejected);
  }
}
