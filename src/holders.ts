import { monotonicClock } from './clock.js';
import { H_HOLDERS_LOST, HOLDER_WORDS, type Layout } from './layout.js';
import { HOLDER_DEAD_MS, type WaitQueues } from './queue.js';

/** How often a thread holding permits proves it is alive. */
const HOLDER_HEARTBEAT_MS = 1000;
/** A refused decision looks for dead holders at most this often per thread. */
const REAP_EVERY_MS = 250;

// Holder record fields, at holderBase + HOLDER_WORDS × record.
const H_REF = 0; // slot reference (hot word × 16 + generation) + 1; 0: free
const H_PERMITS = 1;
const H_THREAD = 2; // thread table entry
// That entry's token when the record was made; 0 once reaped; −token once reset() voided it
// (still its owner's to free: see voidSlot()).
const H_TOKEN = 3;

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
 * slot. When the pool is full a grant is not recorded (counted in the header): those
 * permits come back only by release.
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

  constructor(
    /** Replaced by the limiter's remap() when the buffer grew. */
    public i32: Int32Array,
    private readonly layout: Layout,
    private readonly queues: WaitQueues,
    /** Gives `permits` back to the slot `ref` (if it still has that generation). */
    private readonly giveBack: (ref: number, permits: number) => void,
    /** Whether another thread may reach the buffer already (an attached limiter). */
    private shared: boolean,
  ) {}

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

  private rec(r: number): number {
    return this.layout.holderBase + r * HOLDER_WORDS;
  }

  /**
   * Whether record `r` is still this thread's record of `ref` (not voided by a reaper or by
   * reset()). Plain reads: a reaper changes these words under the owner only for a thread
   * silent for HOLDER_DEAD_MS, which this running thread is not (a thread that was, and
   * wakes mid-call, is the documented edge: it may give back twice); a reset() voiding the
   * record just after this read leaves the owner adding to a void record, which is harmless.
   */
  private intact(r: number, ref: number): boolean {
    const rw = this.rec(r);
    return (
      r >= 0 &&
      this.i32[rw + H_REF] === ref + 1 &&
      this.i32[rw + H_TOKEN] === this.queues.threadToken
    );
  }

  /** Records that this thread was granted `permits` on slot `ref`. */
  granted(ref: number, permits: number): void {
    if (!this.shared) return; // every permit is this thread's: see the class comment
    let m = this.mineOf(ref);
    if (m === undefined) {
      m = { r: -1, held: 0, ghost: 0 };
      this.mine.set(ref, m);
      this.lastRef = ref;
      this.lastMine = m;
    }
    if (m.r < 0 || !this.intact(m.r, ref)) {
      this.lost(m, ref);
      this.queues.heartbeat();
      m.r = this.claim(ref);
    }
    if (m.r < 0) {
      Atomics.add(this.i32, H_HOLDERS_LOST, permits); // pool full: not recoverable
    } else {
      Atomics.add(this.i32, this.rec(m.r) + H_PERMITS, permits);
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
    if (m.r >= 0 && this.i32[this.rec(m.r) + H_TOKEN] === -this.queues.threadToken) {
      Atomics.compareExchange(this.i32, this.rec(m.r) + H_REF, ref + 1, 0);
    } else {
      m.ghost += m.held;
    }
    m.held = 0;
    m.r = -1;
  }

  private claim(ref: number): number {
    const i32 = this.i32;
    const n = this.layout.holders;
    // Start where the slot reference points, so that records of different keys spread out.
    const start = (ref >>> 4) % n;
    for (let k = 0; k < n; k++) {
      const r = (start + k) % n;
      const rw = this.rec(r);
      if (Atomics.compareExchange(i32, rw + H_REF, 0, ref + 1) !== 0) continue;
      Atomics.store(i32, rw + H_PERMITS, 0);
      Atomics.store(i32, rw + H_THREAD, this.queues.threadEntry);
      Atomics.store(i32, rw + H_TOKEN, this.queues.threadToken);
      return r;
    }
    return -1;
  }

  /**
   * Before `permits` of slot `ref` are released by this thread: how many of them a reaper
   * already gave back (this thread's ghosts). The caller releases only the rest.
   */
  ghosts(ref: number, permits: number): number {
    if (!this.shared) return 0; // no other thread, no reaper
    const m = this.mineOf(ref);
    if (m === undefined) return 0;
    if (m.r >= 0 && !this.intact(m.r, ref)) this.lost(m, ref);
    const n = Math.min(m.ghost, permits);
    m.ghost -= n;
    return n;
  }

  /**
   * Before `permits` of slot `ref` are given back (before the slot's CAS, so that a thread
   * terminated between the two leaves the records short, never over): takes them off the
   * records — this thread's first, then (permits taken by another thread) any record of
   * that slot. Returns how many came off this thread's: unreleasing() puts those back if
   * the give-back does not happen.
   */
  releasing(ref: number, permits: number): number {
    if (!this.shared) return 0; // no records: see the class comment
    const m = this.mineOf(ref);
    let own = 0;
    if (m !== undefined && m.r >= 0 && m.held > 0) {
      // An empty record stays this thread's until its heartbeat frees it: a key taken and
      // released over and over does not claim a record (or start a timer) every time.
      own = this.take(m.r, ref, Math.min(permits, m.held));
      m.held -= own;
    }
    let left = permits - own;
    for (let r = 0; left > 0 && r < this.layout.holders; r++) left -= this.take(r, ref, left);
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
    if (m !== undefined && m.r >= 0 && !this.intact(m.r, ref)) {
      if (this.i32[this.rec(m.r) + H_TOKEN] === -this.queues.threadToken) {
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
   * adding to it in the meantime adds to a void record, never to another key's.
   */
  voidSlot(w: number): void {
    if (!this.shared) return; // no records: the slot's state is all there is
    const i32 = this.i32;
    for (let r = 0; r < this.layout.holders; r++) {
      const rw = this.rec(r);
      const ref1 = Atomics.load(i32, rw + H_REF);
      if (ref1 === 0 || (ref1 - 1) >>> 4 !== w) continue;
      const token = Atomics.load(i32, rw + H_TOKEN);
      // The reference read again after the token: a record freed and claimed for another
      // slot meanwhile is not voided under its new owner (claim() writes the token last).
      if (token <= 0 || Atomics.load(i32, rw + H_REF) !== ref1) continue;
      Atomics.compareExchange(i32, rw + H_TOKEN, token, -token);
    }
  }

  /** Takes up to `want` permits off record `r` if it is a live record of `ref`. */
  private take(r: number, ref: number, want: number): number {
    const i32 = this.i32;
    const rw = this.rec(r);
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
    this.queues.heartbeat();
    this.reap();
    for (const [ref, m] of this.mine) {
      if (m.r >= 0 && m.held > 0 && !this.intact(m.r, ref)) this.lost(m, ref);
      if (m.held > 0 || m.ghost > 0) continue;
      // Still this thread's (or voided by reset(), which leaves it to this thread to free).
      if (m.r >= 0 && Math.abs(this.i32[this.rec(m.r) + H_TOKEN]!) === this.queues.threadToken) {
        Atomics.compareExchange(this.i32, this.rec(m.r) + H_REF, ref + 1, 0);
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
   * voided by CAS on its token, so two reapers never both return it. Returns whether any
   * permits came back.
   */
  reap(): boolean {
    const i32 = this.i32;
    let any = false;
    for (let r = 0; r < this.layout.holders; r++) {
      const rw = this.rec(r);
      const ref1 = Atomics.load(i32, rw + H_REF);
      if (ref1 === 0) continue;
      const token = Atomics.load(i32, rw + H_TOKEN);
      const entry = Atomics.load(i32, rw + H_THREAD);
      if (token === 0 || !this.queues.entryDead(entry, Math.abs(token), HOLDER_DEAD_MS)) continue;
      if (Atomics.compareExchange(i32, rw + H_TOKEN, token, 0) !== token) continue;
      if (token < 0) {
        // Voided by reset(): nothing to give back; its dead owner would have freed it.
        Atomics.compareExchange(i32, rw + H_REF, ref1, 0);
        continue;
      }
      const permits = Atomics.exchange(i32, rw + H_PERMITS, 0);
      Atomics.store(i32, rw + H_REF, 0);
      if (permits > 0) {
        this.giveBack(ref1 - 1, permits);
        any = true;
      }
    }
    return any;
  }
}

interface Mine {
  /** The record, −1 when none. */
  r: number;
  /** Permits this thread holds through the record. */
  held: number;
  /** Permits this thread still thinks it holds, that a reaper already gave back. */
  ghost: number;
}
