import { monotonicClock } from '../clock.js';
import {
  H_HOLDERS_LOST,
  HOLDER_WORDS,
  type Layout,
  type Segment,
  segmentOfSlot,
  slotOfHotWord,
} from './layout.js';
import { HOLDER_DEAD_MS, type WaitQueues } from './queue.js';

/** How often a thread holding permits proves it is alive. */
const HOLDER_HEARTBEAT_MS = 1000;
/** A refused decision looks for dead holders at most this often per thread. */
const REAP_EVERY_MS = 250;

// Holder record fields, at holderBase + HOLDER_WORDS × record.
const H_REF = 0; // slot reference (hot word × 16 + generation) + 1; 0: free
const H_PERMITS = 1;
// Thread table entry; in a key's balance record (see below), the balance.
const H_THREAD = 2;
// That entry's token when the record was made; 0 once reaped; −token once reset() voided it
// (still its owner's to free: see voidSlot()).
const H_TOKEN = 3;
/** H_PERMITS of a balance record (no holder's record has negative permits). */
const BALANCE = -0x7fffffff;
/** A balance record's balance while it is being freed. */
const FREEING = -0x80000000 | 0;

function nowMs(): number {
  return Math.floor(monotonicClock.nowUs() / 1000) & 0x7fffffff;
}

/**
 * Who holds Concurrency permits, so that a thread that dies holding some gives them back.
 * Each thread records, per key it holds permits of, one record in a shared pool: [slot
 * reference, permits, thread entry, token]. A thread holding permits heartbeats through its
 * entry of the wait queues' thread table; when an entry goes silent for HOLDER_DEAD_MS
 * (or is taken over by another thread), any thread that notices — on its own heartbeat, or
 * when a decision is refused — voids that thread's records and gives their permits back.
 *
 * Records are claimed and voided by CAS; a record's permits change only by its owner
 * (add, after the grant's CAS) or by a release (sub, before the release's CAS), so the sum
 * over records never exceeds what the slots hold, even when a thread dies between the two
 * steps (a permit is lost then, never given back twice). reset() voids the records of its
 * slot. When the pool is full, or the thread table is (THREAD_ENTRIES), a grant is not
 * recorded (counted in the header): those permits come back only by release.
 *
 * Every segment of the table brings records of its own (2 per slot), and a key's record is
 * looked for first among its segment's: however far the table grew, every key held can be
 * recorded.
 *
 * A permit belongs to the thread that took it, and may be released by another (its work
 * handed over): a release beyond what the releasing thread took itself on that key is such
 * a hand-off. Each key may have a balance record, at one of its own records: hand-off
 * releases minus permits swept back from dead threads. A hand-off release with the balance
 * negative (a taker died and was swept) frees nothing — that permit came back already; else
 * it frees the permit and raises the balance, and the sweep of a dead thread later gives
 * back that much less (its permit was released already). So a permit is given back once,
 * by the sweep or by the release, never both. The balance cannot name which taker's permit
 * was released: where it guesses wrong (a thread dies holding permits it kept while another
 * taker's were handed over), a permit stays held too long — until that other taker dies
 * too — never one given back twice. One guess errs the other way: a thread holding permits
 * of its own on the key that releases a handed one is taken to release its own, and the
 * taker's sweep then gives the handed one back again; a release that says it is a hand-off
 * (release()'s `handedOver`) goes to the balance whatever this thread holds, and cannot.
 * Without room for a balance record (both of the key's records held by live holders), a
 * hand-off release is taken off any holder's record.
 *
 * While the limiter is not shared (its `handle` never read: see Core.shared) no other
 * thread can reach the buffer, so none could outlive this one to reap its records, and
 * every permit the slots hold is this thread's: it keeps no records at all (no per-grant
 * bookkeeping on the decision path). When the limiter becomes shared, share() writes a
 * record for every slot that holds permits, read from the slots themselves, before any
 * other thread can see the buffer.
 */
export class Holders {
  /** This thread's record per slot reference, with what this thread holds through it. */
  private readonly mine = new Map<number, Mine>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private lastReapMs = 0;
  /** Records per slot (every segment has as many per slot as segment 0). */
  private readonly perSlot: number;

  constructor(
    /** Replaced by the limiter's remap() when the buffer grew. */
    public i32: Int32Array,
    private readonly layout: Layout,
    private readonly queues: WaitQueues,
    /** Gives `permits` back to the slot `ref` (if it still has that generation). */
    private readonly giveBack: (ref: number, permits: number) => void,
    /** Whether another thread may reach the buffer already (an attached limiter). */
    private shared: boolean,
    /** The table's segments that exist, with this thread's views mapping all of them. */
    private readonly segmentsMapped: () => number,
  ) {
    this.perSlot = layout.holders / (layout.slots + 1);
  }

  // The last slot looked up: a key taken and released in a loop costs no Map lookup.
  private lastRef = -1;
  private lastMine: Mine | undefined;

  private mineOf(ref: number): Mine | undefined {
    if (ref === this.lastRef) return this.lastMine;
    const m = this.mine.get(ref);
    if (m !== undefined) {
      this.lastRef = ref;
      this.lastMine = m;
    }
    return m;
  }

  /**
   * The limiter became shared: from now on granted() writes records. False if it was
   * already. The caller then records, by granted(), what each slot holds — all of it this
   * thread's until now — which starts the heartbeat that keeps them this thread's.
   */
  share(): boolean {
    if (this.shared) return false;
    this.shared = true;
    return true;
  }

  /** The segments whose records exist now (mapped into this thread's view). */
  private segmentCount(): number {
    return this.layout.holders === 0 ? 0 : this.segmentsMapped();
  }

  /**
   * Whether record `rw` is still this thread's record of `ref` (not voided by a reaper or
   * by reset()). Plain reads: a reaper changes these words under the owner only for a
   * thread silent for HOLDER_DEAD_MS, which this running thread is not (a thread that was,
   * and wakes mid-call, is the documented edge: it may give back twice); a reset() voiding
   * the record just after this read leaves the owner adding to a void record, which is
   * harmless.
   */
  private intact(rw: number, ref: number): boolean {
    return (
      rw >= 0 &&
      this.i32[rw + H_REF] === ref + 1 &&
      this.i32[rw + H_TOKEN] === this.queues.threadToken
    );
  }

  /**
   * Records that this thread was granted `permits` on slot `ref`. Never throws: the grant
   * has been made. Without a record (pool or thread table full) the permits stay counted
   * and come back by release only.
   */
  granted(ref: number, permits: number): void {
    if (!this.shared) return; // every permit is this thread's: see the class comment
    let m = this.mineOf(ref);
    if (m === undefined) {
      m = { rw: -1, held: 0, ghost: 0, unrecorded: 0 };
      this.mine.set(ref, m);
      this.lastRef = ref;
      this.lastMine = m;
    }
    if (m.rw < 0 || !this.intact(m.rw, ref)) {
      this.lost(m, ref);
      m.rw = this.queues.tryHeartbeat() ? this.claim(ref) : -1;
    }
    if (m.rw < 0) {
      Atomics.add(this.i32, H_HOLDERS_LOST, permits); // not recoverable if this thread dies
      m.unrecorded += permits;
    } else {
      Atomics.add(this.i32, m.rw + H_PERMITS, permits);
      m.held += permits;
      this.startHeartbeat();
    }
  }

  /**
   * This thread's record of `ref` is no longer its own. Either reset() voided it: what this
   * thread held there went with the key's state (a later release acts on the state as it is
   * now, as without records), and the record is still this thread's to free. Or a reaper
   * voided it while this thread looked dead and gave its permits back: what this thread held
   * there are ghosts now, which releasing must not give back again.
   */
  private lost(m: Mine, ref: number): void {
    if (m.rw >= 0 && this.i32[m.rw + H_TOKEN] === -this.queues.threadToken) {
      Atomics.compareExchange(this.i32, m.rw + H_REF, ref + 1, 0);
    } else {
      m.ghost += m.held;
    }
    m.held = 0;
    m.rw = -1;
  }

  /** A free record for `ref`, claimed, or −1. */
  private claim(ref: number): number {
    const n = this.segmentCount();
    if (n === 0) return -1;
    // Start at the slot's own records, in its own segment, so that records of different
    // keys spread out and a grown table's keys find room in the segment that holds them.
    const slot = slotOfHotWord(this.layout, ref >>> 4);
    const home =
      slot <= this.layout.slots ? this.layout.segments[0]! : segmentOfSlot(this.layout, slot);
    const at = home.index === 0 ? slot * this.perSlot : (slot - home.first) * this.perSlot;
    const i32 = this.i32;
    for (let k = -1; k < n; k++) {
      // k = −1: the home segment from the slot's records on; then every other segment.
      const seg = k < 0 ? home : this.layout.segments[k]!;
      if (k === home.index || seg.holders === 0) continue;
      // From the slot's last own record: its first stays free for the key's balance record
      // as long as the pool has room (see balanceOf()).
      const from = k < 0 ? (at + this.perSlot - 1) % seg.holders : 0;
      for (let j = 0; j < seg.holders; j++) {
        const rw = seg.holderBase + ((from + j) % seg.holders) * HOLDER_WORDS;
        if (Atomics.compareExchange(i32, rw + H_REF, 0, ref + 1) !== 0) continue;
        Atomics.store(i32, rw + H_PERMITS, 0);
        Atomics.store(i32, rw + H_THREAD, this.queues.threadEntry);
        Atomics.store(i32, rw + H_TOKEN, this.queues.threadToken);
        return rw;
      }
    }
    return -1;
  }

  // ---- a key's balance record: hand-off releases − permits swept back ------------------

  /** Record `j` (0 … perSlot − 1) of slot `ref`'s own records, in the slot's segment. */
  private homeRecord(ref: number, j: number): number {
    const slot = slotOfHotWord(this.layout, ref >>> 4);
    const home =
      slot <= this.layout.slots ? this.layout.segments[0]! : segmentOfSlot(this.layout, slot);
    const at = home.index === 0 ? slot * this.perSlot : (slot - home.first) * this.perSlot;
    return home.holderBase + ((at + j) % home.holders) * HOLDER_WORDS;
  }

  /** The balance record of `ref` (made, at one of its own records, if `make`), or −1. */
  private balanceOf(ref: number, make: boolean): number {
    if (this.perSlot === 0 || this.segmentCount() === 0) return -1;
    const i32 = this.i32;
    for (let j = 0; j < this.perSlot; j++) {
      const rw = this.homeRecord(ref, j);
      if (
        Atomics.load(i32, rw + H_PERMITS) === BALANCE &&
        Atomics.load(i32, rw + H_REF) === ref + 1 &&
        Atomics.load(i32, rw + H_THREAD) !== FREEING
      ) {
        return rw;
      }
    }
    if (!make) return -1;
    for (let j = 0; j < this.perSlot; j++) {
      const rw = this.homeRecord(ref, j);
      if (Atomics.compareExchange(i32, rw + H_REF, 0, ref + 1) !== 0) continue;
      // Token (no live holder's: a reaper or a release skips it) and balance first, the mark
      // last: a record is a balance record once marked.
      Atomics.store(i32, rw + H_TOKEN, 0);
      Atomics.store(i32, rw + H_THREAD, 0);
      Atomics.store(i32, rw + H_PERMITS, BALANCE);
      return rw;
    }
    return -1;
  }

  /**
   * Adds `part(b)` to the balance b of `ref` (read again on a lost CAS). Returns the part
   * added, or NaN when `ref` has no balance record and none could be made.
   */
  private addBalance(ref: number, make: boolean, part: (b: number) => number): number {
    const i32 = this.i32;
    for (;;) {
      const rw = this.balanceOf(ref, make);
      if (rw < 0) return Number.NaN;
      const b = Atomics.load(i32, rw + H_THREAD);
      if (b === FREEING) continue; // being freed: made again (or found) on the next pass
      const d = part(b);
      if (d === 0) return 0;
      if (Atomics.compareExchange(i32, rw + H_THREAD, b, b + d) !== b) continue;
      // Back to 0: the record is free again (unless a change came between, which keeps it).
      if (b + d === 0 && Atomics.compareExchange(i32, rw + H_THREAD, 0, FREEING) === 0) {
        Atomics.store(i32, rw + H_PERMITS, 0);
        Atomics.store(i32, rw + H_REF, 0);
      }
      return d;
    }
  }

  /**
   * The sweep gives back `permits` of a dead thread's record of `ref`: how many of them to
   * give back — fewer where hand-off releases freed them already (a positive balance).
   */
  private swept(ref: number, permits: number): number {
    let early = 0;
    const added = this.addBalance(ref, true, (b) => {
      early = Math.max(0, Math.min(b, permits));
      return -permits;
    });
    return Number.isNaN(added) ? permits : permits - early;
  }

  /** A hand-off release of up to `want` permits that the sweep gave back: how many it met. */
  private absorb(ref: number, want: number): number {
    const met = this.addBalance(ref, false, (b) => Math.min(want, Math.max(0, -b)));
    return Number.isNaN(met) ? 0 : met;
  }

  /**
   * Before `permits` of slot `ref` are released by this thread: how many of them were
   * already given back by the dead-holder sweep, so that the caller releases only the
   * rest. Those are this thread's own ghosts (it looked dead once), and — for permits this
   * thread does not hold itself, handed to it by another thread — permits the sweep gave
   * back when the thread that took them died. `handedOver`: the caller says they are all
   * handed permits (release()'s `handedOver`), none of them this thread's own.
   */
  ghosts(ref: number, permits: number, handedOver = false): number {
    if (!this.shared) return 0; // no other thread, no reaper
    const m = this.mineOf(ref);
    let n = 0;
    let own = 0;
    if (m !== undefined && !handedOver) {
      if (m.rw >= 0 && !this.intact(m.rw, ref)) this.lost(m, ref);
      n = Math.min(m.ghost, permits);
      m.ghost -= n;
      // Released by the thread that took them, after they were swept: the balance meets them.
      if (n > 0) this.addBalance(ref, true, () => n);
      own = m.held + m.unrecorded;
    }
    const handed = permits - n - own;
    if (handed > 0) n += this.absorb(ref, handed);
    return n;
  }

  /**
   * Before `permits` of slot `ref` are given back (before the slot's CAS, so that a thread
   * terminated between the two leaves the records short, never over): takes them off the
   * records — this thread's first; the rest (permits taken by another thread) onto the
   * key's balance, or, without one, off any record of that slot. Returns how many came off
   * this thread's: unreleasing() puts those back if the give-back does not happen.
   * `handedOver`: none of them is this thread's (release()'s `handedOver`): all go to the balance.
   */
  releasing(ref: number, permits: number, handedOver = false): number {
    if (!this.shared) return 0; // no records: see the class comment
    const m = handedOver ? undefined : this.mineOf(ref);
    let own = 0;
    if (m !== undefined && m.rw >= 0 && m.held > 0) {
      // An empty record stays this thread's until its heartbeat frees it: a key taken and
      // released over and over does not claim a record (or start a timer) every time.
      own = this.take(m.rw, ref, Math.min(permits, m.held));
      m.held -= own;
    }
    if (m !== undefined && own < permits && m.unrecorded > 0) {
      const u = Math.min(permits - own, m.unrecorded);
      m.unrecorded -= u;
      own += u;
    }
    let left = permits - own;
    // Permits this thread did not take (handed to it; ghosts() met those already swept back):
    // the balance counts them, so the sweep of their taker does not give them back again.
    if (left > 0 && this.addBalance(ref, true, () => left) === left) left = 0;
    const n = left > 0 ? this.segmentCount() : 0;
    for (let k = 0; k < n && left > 0; k++) {
      const seg = this.layout.segments[k]!;
      for (let j = 0; j < seg.holders && left > 0; j++) {
        left -= this.take(seg.holderBase + j * HOLDER_WORDS, ref, left);
      }
    }
    return own;
  }

  /**
   * A give-back releasing() prepared gave back fewer permits than it took off, or none:
   * `permits` of those taken off this thread's record go back on it. (Those taken off other
   * threads' records stay off: a permit lost if that thread dies, never one given twice.)
   */
  unreleasing(ref: number, permits: number): void {
    if (permits === 0 || !this.shared) return;
    const m = this.mineOf(ref);
    if (m !== undefined && m.rw >= 0 && !this.intact(m.rw, ref)) {
      if (this.i32[m.rw + H_TOKEN] === -this.queues.threadToken) {
        this.lost(m, ref); // reset() voided the key's permits meanwhile: these too
        return;
      }
    }
    // As if granted again (a reaper's void is handled there: it did not give these back).
    this.granted(ref, permits);
  }

  /**
   * reset() is rebuilding slot word `w` (its state RESERVED, under its lock, so no grant or
   * release lands on it meanwhile): every record of the slot is voided, without giving
   * anything back. A record's token turns negative rather than 0, so that the record stays
   * claimed until its owner (or, once the owner is dead, a reaper) frees it: an owner
   * adding to it in the meantime adds to a void record, never to another key's. Swept
   * records of the slot are freed: what the key held is forgotten.
   */
  voidSlot(w: number): void {
    if (!this.shared) return; // no records: the slot's state is all there is
    const i32 = this.i32;
    const n = this.segmentCount();
    for (let k = 0; k < n; k++) {
      const seg = this.layout.segments[k]!;
      for (let j = 0; j < seg.holders; j++) {
        const rw = seg.holderBase + j * HOLDER_WORDS;
        const ref1 = Atomics.load(i32, rw + H_REF);
        if (ref1 === 0 || (ref1 - 1) >>> 4 !== w) continue;
        const token = Atomics.load(i32, rw + H_TOKEN);
        if (token === 0) {
          // The key's balance: forgotten with its state.
          const b = Atomics.load(i32, rw + H_THREAD);
          if (
            Atomics.load(i32, rw + H_PERMITS) === BALANCE &&
            b !== FREEING &&
            Atomics.compareExchange(i32, rw + H_THREAD, b, FREEING) === b
          ) {
            Atomics.store(i32, rw + H_PERMITS, 0);
            Atomics.store(i32, rw + H_REF, 0);
          }
          continue;
        }
        // The reference read again after the token: a record freed and claimed for another
        // slot meanwhile is not voided under its new owner (claim() writes the token last).
        if (token < 0 || Atomics.load(i32, rw + H_REF) !== ref1) continue;
        Atomics.compareExchange(i32, rw + H_TOKEN, token, -token);
      }
    }
  }

  /** Takes up to `want` permits off record `rw` if it is a live record of `ref`. */
  private take(rw: number, ref: number, want: number): number {
    const i32 = this.i32;
    // Plain reads find the record; the CAS on its permits is what counts.
    if (i32[rw + H_REF] !== ref + 1 || i32[rw + H_TOKEN]! <= 0) return 0;
    for (;;) {
      const have = i32[rw + H_PERMITS]!;
      if (have <= 0 || want <= 0) return 0;
      const n = Math.min(have, want);
      if (Atomics.compareExchange(i32, rw + H_PERMITS, have, have - n) === have) return n;
    }
  }

  private startHeartbeat(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.tick(), HOLDER_HEARTBEAT_MS);
    // Holding permits must not keep a process alive.
    this.timer.unref();
  }

  /**
   * Every HOLDER_HEARTBEAT_MS while this thread has records: proves it alive, reaps dead
   * holders, and frees this thread's empty records; with none left, the timer stops.
   */
  private tick(): void {
    this.queues.tryHeartbeat(); // a timer: never throws (its entry was taken with a record)
    this.reap();
    for (const [ref, m] of this.mine) {
      if (m.rw >= 0 && m.held > 0 && !this.intact(m.rw, ref)) this.lost(m, ref);
      if (m.held > 0 || m.ghost > 0 || m.unrecorded > 0) continue;
      // Still this thread's (or voided by reset(), which leaves it to this thread to free).
      if (m.rw >= 0 && Math.abs(this.i32[m.rw + H_TOKEN]!) === this.queues.threadToken) {
        Atomics.compareExchange(this.i32, m.rw + H_REF, ref + 1, 0);
      }
      this.mine.delete(ref);
      if (this.lastRef === ref) this.lastRef = -1;
    }
    if (this.mine.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** After a refused decision: look for dead holders, at most every REAP_EVERY_MS. */
  refused(): boolean {
    if (!this.shared) return false; // no other thread: nobody else's permits to find
    const now = nowMs();
    if (((now - this.lastReapMs) & 0x7fffffff) < REAP_EVERY_MS) return false;
    this.lastReapMs = now;
    return this.reap();
  }

  /**
   * Voids the records of threads that are gone and gives their permits back. A record is
   * voided by CAS on its token, so two reapers never both return it; what it gives back goes
   * through the key's balance (see swept()). Returns whether any permits came back.
   */
  reap(): boolean {
    const i32 = this.i32;
    let any = false;
    const n = this.segmentCount();
    for (let k = 0; k < n; k++) {
      const seg: Segment = this.layout.segments[k]!;
      for (let j = 0; j < seg.holders; j++) {
        const rw = seg.holderBase + j * HOLDER_WORDS;
        const ref1 = Atomics.load(i32, rw + H_REF);
        if (ref1 === 0) continue;
        const token = Atomics.load(i32, rw + H_TOKEN);
        if (token === 0) continue; // free, or a balance record
        const entry = Atomics.load(i32, rw + H_THREAD);
        if (!this.queues.entryDead(entry, Math.abs(token), HOLDER_DEAD_MS)) continue;
        if (Atomics.compareExchange(i32, rw + H_TOKEN, token, 0) !== token) continue;
        if (token < 0) {
          // Voided by reset(): nothing to give back; its dead owner would have freed it.
          Atomics.compareExchange(i32, rw + H_REF, ref1, 0);
          continue;
        }
        const permits = Atomics.exchange(i32, rw + H_PERMITS, 0);
        Atomics.store(i32, rw + H_REF, 0);
        if (permits > 0) {
          // The balance first, then the give-back: a hand-off release meeting the balance
          // before the give-back frees nothing, the give-back then frees it: once either way.
          const give = this.swept(ref1 - 1, permits);
          if (give > 0) {
            this.giveBack(ref1 - 1, give);
            any = true;
          }
        }
      }
    }
    return any;
  }
}

interface Mine {
  /** The record's first word, −1 when none. */
  rw: number;
  /** Permits this thread holds through the record. */
  held: number;
  /** Permits this thread still thinks it holds, that a reaper already gave back. */
  ghost: number;
  /** Permits this thread holds that no record counts (pool or thread table full). */
  unrecorded: number;
}
