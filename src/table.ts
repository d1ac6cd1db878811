import { monotonicClock } from './clock.js';
import { hashKey } from './hash.js';
import {
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_CONTROL,
  H_DEFAULT_LOCK,
  H_INSERTS,
  H_LOCK_STEALS,
  H_RECLAIMS,
  H_SEED0,
  H_SEED1,
  H_TABLE_FULL,
  hotWord,
  type Layout,
  PAYLOAD_MASK,
  RESERVED,
  S_ADMITTED,
  S_REJECTED,
  S_STAMP,
  S_STATE,
  STRIPE_SLOTS,
  slotOfHotWord,
} from './layout.js';
import { isKey, keyError } from './validate.js';

export type Key = string | number;

/** What the table needs to know about the algorithm that owns it. */
export interface SlotPolicy {
  /** True when the slot's state is equivalent to a fresh one and nobody waits on it. */
  isIdle(state: number, w: number, nowUs: number): boolean;
  /** Prepares algorithm-specific memory of slot `s` (SlidingLog's ring) before publishing. */
  initSlot(s: number): void;
}

/** Packed slot reference: hot word index × 16 + generation. Never negative. */
export const NO_SLOT = -1;

// A lock is a deadline (real monotonic ms, low 31 bits, never 0). A thread that dies
// holding it delays inserts into that stripe by at most LOCK_LEASE_MS; the next inserter
// then takes the lock over and voids the slot the dead thread had reserved.
const LOCK_LEASE_MS = 500;
/**
 * A slot reference (index + 4-bit generation) proves that the slot still holds its key only
 * while fewer than 16 generation bumps happened since it was derived; the control word counts
 * bumps (in steps of 2) anywhere in the table. So references — cached ones and the one a
 * decision is using — are trusted while the control word is within this span of the epoch
 * they were derived after, and looked up again otherwise.
 */
export const GEN_SAFE_SPAN = 2 * 12;
const CACHE_MAX_ENTRIES = 1 << 20;

function nowMsLow(): number {
  return (Math.floor(monotonicClock.nowUs() / 1000) & 0x7fffffff) | 1;
}

/**
 * The key-striped open-addressing table in a limiter's buffer, seen from one thread.
 * Decisions never lock: they read a slot's state and CAS it. Only inserting a key into a
 * stripe (and reassigning an idle slot) takes that stripe's lock, and a lock is a lease.
 */
export class SlotTable {
  private readonly cache = new Map<Key, number>();
  /** The control word when the cache was last cleared: every reference is derived after it. */
  epoch: number;
  private readonly hash = new Int32Array(2);
  private readonly seed0: number;
  private readonly seed1: number;

  constructor(
    readonly i32: Int32Array,
    readonly layout: Layout,
    private readonly owner: string,
  ) {
    this.seed0 = i32[H_SEED0]!;
    this.seed1 = i32[H_SEED1]!;
    this.epoch = i32[H_CONTROL]! & ~1;
  }

  /** Default key's packed reference (generation 0; it is never reassigned). */
  get defaultSlot(): number {
    return this.layout.hotBase * 16;
  }

  /**
   * The slot of `key`, inserting it if absent. `control` is the control word the caller
   * just read. Returns NO_SLOT when the key's stripes are full of active keys.
   */
  slotOf(key: Key, control: number, nowUs: number, policy: SlotPolicy): number {
    if (control - this.epoch >= GEN_SAFE_SPAN) this.clearCache(control);
    const hit = this.cache.get(key);
    if (hit !== undefined) return hit;
    return this.lookup(key, nowUs, policy, true);
  }

  /**
   * Forgets every cached slot: enough generation bumps happened since the cache was filled
   * that a slot's 4-bit generation may have wrapped, so a matching generation no longer
   * proves that a cached slot still holds its key.
   */
  private clearCache(control: number): void {
    this.cache.clear();
    this.epoch = control & ~1;
  }

  /**
   * The least of `untilIdleUs` over the slots `key` could use (its two stripes) that have
   * no waiters: how long until one of them can be reclaimed. Infinity if none ever frees
   * by time alone. For a table-full refusal's retryAfterMs; reads, never locks.
   */
  soonestIdleUs(key: Key, untilIdleUs: (state: number, w: number) => number): number {
    hashKey(key, this.seed0, this.seed1, this.hash);
    const stripes = this.layout.stripes;
    const a = (this.hash[0]! >>> 0) % stripes;
    let b = (this.hash[1]! >>> 0) % stripes;
    if (b === a) b = (a + 1) % stripes;
    let best = Number.POSITIVE_INFINITY;
    for (const stripe of [a, b]) {
      const first = 1 + stripe * STRIPE_SLOTS;
      for (let s = first; s < first + STRIPE_SLOTS; s++) {
        const w = hotWord(this.layout, s);
        const st = Atomics.load(this.i32, w + S_STATE);
        if ((st & PAYLOAD_MASK) === RESERVED || Atomics.load(this.i32, w + S_STAMP) < 0) continue;
        best = Math.min(best, untilIdleUs(st, w));
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
      return this.defaultSlot;
    }
    const control = Atomics.load(this.i32, H_CONTROL);
    if (control - this.epoch >= GEN_SAFE_SPAN) this.clearCache(control);
    this.cache.delete(key);
    return this.lookup(key, nowUs, policy, true);
  }

  /** The slot of `key` if present, without inserting it. */
  find(key: Key | undefined): number {
    if (key === undefined) return this.defaultSlot;
    // The same epoch rule as slotOf(): without it, a slot reused 16 times would match a
    // stale cache entry's generation and this thread would act on another key's state.
    const control = Atomics.load(this.i32, H_CONTROL);
    if (control - this.epoch >= GEN_SAFE_SPAN) this.clearCache(control);
    const hit = this.cache.get(key);
    if (hit !== undefined) {
      const st = Atomics.load(this.i32, hit >>> 4);
      if (st >>> GEN_SHIFT === (hit & 15) && (st & PAYLOAD_MASK) !== RESERVED) return hit;
    }
    return this.lookup(key, 0, null, false);
  }

  private lookup(key: Key, nowUs: number, policy: SlotPolicy | null, insert: boolean): number {
    if (!isKey(key)) {
      throw keyError(this.owner, key);
    }
    hashKey(key, this.seed0, this.seed1, this.hash);
    let fp0 = this.hash[0]!;
    const fp1 = this.hash[1]!;
    if (fp0 === 0 && fp1 === 0) fp0 = 1; // (0, 0) marks an empty slot
    const stripes = this.layout.stripes;
    const a = (fp0 >>> 0) % stripes;
    let b = (fp1 >>> 0) % stripes;
    if (b === a) b = (a + 1) % stripes;
    let found = this.scan(a, fp0, fp1);
    if (found === NO_SLOT) found = this.scan(b, fp0, fp1);
    if (found === NO_SLOT && insert && policy) found = this.insert(a, b, fp0, fp1, nowUs, policy);
    if (found !== NO_SLOT) {
      if (this.cache.size >= CACHE_MAX_ENTRIES) this.cache.clear();
      this.cache.set(key, found);
    }
    return found;
  }

  private coldWord(s: number): number {
    return this.layout.coldBase + 2 * (s - 1);
  }

  /** Finds the usable slot holding fingerprint (fp0, fp1) in `stripe`. */
  private scan(stripe: number, fp0: number, fp1: number): number {
    const i32 = this.i32;
    const first = 1 + stripe * STRIPE_SLOTS;
    for (let s = first; s < first + STRIPE_SLOTS; s++) {
      const c = this.coldWord(s);
      if (Atomics.load(i32, c) !== fp0 || Atomics.load(i32, c + 1) !== fp1) continue;
      const w = hotWord(this.layout, s);
      const st = Atomics.load(i32, w + S_STATE);
      if ((st & PAYLOAD_MASK) === RESERVED) continue;
      // The fingerprint is written while the slot is RESERVED; reading it again after a
      // non-RESERVED state proves the state we read belongs to this key.
      if (Atomics.load(i32, c) !== fp0 || Atomics.load(i32, c + 1) !== fp1) continue;
      return w * 16 + (st >>> GEN_SHIFT);
    }
    return NO_SLOT;
  }

  private insert(
    a: number,
    b: number,
    fp0: number,
    fp1: number,
    nowUs: number,
    policy: SlotPolicy,
  ): number {
    const lo = Math.min(a, b);
    const hi = Math.max(a, b);
    const lockLo = this.layout.lockBase + lo;
    const lockHi = this.layout.lockBase + hi;
    const tokenLo = this.lock(lockLo);
    const tokenHi = this.lock(lockHi);
    try {
      let found = this.scan(a, fp0, fp1);
      if (found === NO_SLOT) found = this.scan(b, fp0, fp1);
      if (found !== NO_SLOT) return found;
      // Only holders of a stripe's lock reserve its slots, and we hold it: any RESERVED
      // slot here was left by a thread that died or overstayed its lease. Void it.
      this.voidReserved(a);
      this.voidReserved(b);
      const order = this.load(a) <= this.load(b) ? [a, b] : [b, a];
      for (const stripe of order) {
        const s = this.pickEmpty(stripe);
        if (s !== 0) {
          const r = this.claim(s, fp0, fp1, policy, false);
          if (r !== NO_SLOT) return r;
        }
      }
      for (const stripe of order) {
        const first = 1 + stripe * STRIPE_SLOTS;
        for (let s = first; s < first + STRIPE_SLOTS; s++) {
          const w = hotWord(this.layout, s);
          const st = Atomics.load(this.i32, w + S_STATE);
          if ((st & PAYLOAD_MASK) === RESERVED || !policy.isIdle(st, w, nowUs)) continue;
          const r = this.claim(s, fp0, fp1, policy, true, st);
          if (r !== NO_SLOT) return r;
        }
      }
      Atomics.add(this.i32, H_TABLE_FULL, 1);
      return NO_SLOT;
    } finally {
      this.unlock(lockHi, tokenHi);
      this.unlock(lockLo, tokenLo);
    }
  }

  private load(stripe: number): number {
    let n = 0;
    const first = 1 + stripe * STRIPE_SLOTS;
    for (let s = first; s < first + STRIPE_SLOTS; s++) {
      const c = this.coldWord(s);
      if (this.i32[c] !== 0 || this.i32[c + 1] !== 0) n++;
    }
    return n;
  }

  /**
   * An empty slot of the stripe, preferring a cache line with the fewest keys already in
   * it, so that the first keys of a stripe never share a line. 0 when none.
   */
  private pickEmpty(stripe: number): number {
    const first = 1 + stripe * STRIPE_SLOTS;
    let best = 0;
    let bestLoad = 5;
    for (let line = 0; line < STRIPE_SLOTS / 4; line++) {
      let used = 0;
      let empty = 0;
      for (let k = 0; k < 4; k++) {
        const s = first + line * 4 + k;
        const c = this.coldWord(s);
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
    if (Atomics.compareExchange(i32, w + S_STATE, st, reserved) !== st) return NO_SLOT;
    if (reuse && Atomics.load(i32, w + S_STAMP) < 0) {
      // A waiter queued after policy.isIdle() looked: the slot is not idle. Give it back
      // (the waiter re-reads the state after raising its flag; see WaitQueues.enqueue).
      Atomics.store(i32, w + S_STATE, st);
      return NO_SLOT;
    }
    const c = this.coldWord(s);
    Atomics.store(i32, c, fp0);
    Atomics.store(i32, c + 1, fp1);
    Atomics.store(i32, w + S_STAMP, 0);
    Atomics.store(i32, w + S_ADMITTED, 0);
    Atomics.store(i32, w + S_REJECTED, 0);
    policy.initSlot(s);
    const fresh = (gen << GEN_SHIFT) | FRESH;
    if (Atomics.compareExchange(i32, w + S_STATE, reserved, fresh) !== reserved) return NO_SLOT;
    Atomics.add(i32, reuse ? H_RECLAIMS : H_INSERTS, 1);
    return w * 16 + gen;
  }

  private voidReserved(stripe: number): void {
    const i32 = this.i32;
    const first = 1 + stripe * STRIPE_SLOTS;
    for (let s = first; s < first + STRIPE_SLOTS; s++) {
      const w = hotWord(this.layout, s);
      const st = Atomics.load(i32, w + S_STATE);
      if ((st & PAYLOAD_MASK) !== RESERVED) continue;
      Atomics.add(i32, H_CONTROL, 2);
      const gen = ((st >>> GEN_SHIFT) + 1) & 15;
      const reserved = (gen << GEN_SHIFT) | RESERVED;
      if (Atomics.compareExchange(i32, w + S_STATE, st, reserved) !== st) continue;
      const c = this.coldWord(s);
      Atomics.store(i32, c, 0);
      Atomics.store(i32, c + 1, 0);
      Atomics.store(i32, w + S_STATE, (gen << GEN_SHIFT) | FRESH);
    }
  }

  /** Takes a lease lock word; returns the token to unlock with. */
  lock(word: number): number {
    const i32 = this.i32;
    for (let spins = 0; ; spins++) {
      const cur = Atomics.load(i32, word);
      const now = nowMsLow();
      const token = ((now + LOCK_LEASE_MS) & 0x7fffffff) | 1;
      if (cur === 0) {
        if (Atomics.compareExchange(i32, word, 0, token) === 0) return token;
        continue;
      }
      if (((now - cur) | 0) > 0) {
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

  unlock(word: number, token: number): void {
    if (Atomics.compareExchange(this.i32, word, token, 0) === token) Atomics.notify(this.i32, word);
  }

  /**
   * Waits out a RESERVED state on the default slot (a reset that rebuilds the slot is in
   * progress). If its owner died, taking the lock over finishes the reset for it.
   */
  private waitWhileReserved(policy: SlotPolicy): void {
    const w = this.layout.hotBase;
    for (;;) {
      if ((Atomics.load(this.i32, w + S_STATE) & PAYLOAD_MASK) !== RESERVED) return;
      const token = this.lock(H_DEFAULT_LOCK);
      const st = Atomics.load(this.i32, w + S_STATE);
      if ((st & PAYLOAD_MASK) === RESERVED) {
        policy.initSlot(0);
        Atomics.store(this.i32, w + S_STATE, (st & GEN_MASK) | FRESH);
      }
      this.unlock(H_DEFAULT_LOCK, token);
    }
  }

  /**
   * Rebuilds slot `s` in place for the same key (SlidingLog's reset): under the slot's
   * lock, so that inserters do not mistake the RESERVED state for an abandoned one.
   */
  rebuild(ref: number, policy: SlotPolicy): void {
    const w = ref >>> 4;
    const s = slotOfHotWord(this.layout, w);
    const word = this.lockWordOf(s);
    const token = this.lock(word);
    try {
      for (;;) {
        const st = Atomics.load(this.i32, w + S_STATE);
        if ((st & PAYLOAD_MASK) === RESERVED || st >>> GEN_SHIFT !== (ref & 15)) return;
        const reserved = (st & GEN_MASK) | RESERVED;
        if (Atomics.compareExchange(this.i32, w + S_STATE, st, reserved) !== st) continue;
        policy.initSlot(s);
        Atomics.store(this.i32, w + S_STATE, (st & GEN_MASK) | FRESH);
        return;
      }
    } finally {
      this.unlock(word, token);
    }
  }

  /** The lock word guarding slot `s` (its stripe's, or the default key's). */
  lockWordOf(s: number): number {
    return s === 0 ? H_DEFAULT_LOCK : this.layout.lockBase + Math.floor((s - 1) / STRIPE_SLOTS);
  }
}
