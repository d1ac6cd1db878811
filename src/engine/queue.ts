import { diff31, monotonicClock } from '../clock.js';
import { QueueFullError } from '../errors.js';
import type { Liveness, Waits } from '../options.js';
import {
  GEN_SHIFT,
  H_CONTROL,
  type Layout,
  PAYLOAD_MASK,
  Q_HEAD,
  Q_LOCK,
  Q_PERMITS,
  Q_TAIL,
  QUEUED_FLAG,
  queueWord,
  R_FUTEX,
  R_ID,
  R_NEXT,
  R_PERMITS,
  R_SLOT,
  R_STATUS,
  R_THREAD,
  R_TOKEN,
  RECORD_WORDS,
  RESERVED,
  S_STAMP,
  S_STATE,
  slotOfHotWord,
  T_HEARTBEAT,
  T_TOKEN,
  THREAD_ENTRIES,
  W_CLOSED,
  W_EVICTED,
  W_FREE,
  W_RESERVED,
  W_WAITING,
} from './layout.js';
import { lock, unlock } from './lease-lock.js';
import { GEN_SAFE_SPAN } from './table.js';

/** How often a thread with waiters proves it is alive, and when silence means dead. */
export const HEARTBEAT_MS = 250;
export const DEAD_AFTER_MS = 2000;
/** enqueue()'s answer when the slot no longer holds the caller's key. */
export const MOVED = -1;
/** A thread silent this long (terminated, or its event loop blocked) loses held permits. */
export const HOLDER_DEAD_MS = 10_000;

function nowMs(): number {
  return Math.floor(monotonicClock.nowUs() / 1000) & 0x7fffffff;
}

/** How often a thread that found the thread table full looks through it again. */
const FULL_RETRY_MS = 250;

/** How far ahead of this thread's clock another thread's heartbeat may be and still be fresh. */
const FUTURE_HEARTBEAT_MS = 1000;

/**
 * Whether a heartbeat (ms, modulo 2^31) written by another thread is older than
 * `deadAfterMs` at `now`. Each thread reads the shared monotonic clock through its own
 * calibration (clock.ts: about a microsecond apart), so a heartbeat written just after a
 * millisecond turned can read as one millisecond ahead of this thread's `now`. Its age
 * would then wrap to 2^31 − 1 ms, and a live thread would look dead: its held permits
 * given back under it, its entry taken over, its waiters swept. A heartbeat up to
 * FUTURE_HEARTBEAT_MS ahead is fresh.
 */
export function heartbeatStale(heartbeat: number, now: number, deadAfterMs: number): boolean {
  const age = diff31(now, heartbeat);
  return age > deadAfterMs || age < -FUTURE_HEARTBEAT_MS;
}

/**
 * The per-key FIFO wait queues of one limiter, seen from one thread. A queue is a linked
 * list of waiter records in the shared buffer, changed only under the key's queue lock (a
 * lease, like the stripe locks). Deciding never takes that lock: it reads one flag bit in
 * the slot's stamp word, which is set while the queue is not empty.
 *
 * Each waiter parks on its own record's futex word with Atomics.waitAsync, and whoever
 * changes what it waits for bumps that word and notifies it: the head when permits are
 * given back or the head changes, an evicted waiter, every waiter on close().
 */
export class WaitQueues {
  /** This thread's entry in the thread table (−1 before its first heartbeat) and token. */
  threadEntry = -1;
  threadToken = 0;
  private cursor = 0;

  constructor(
    /** Replaced by the limiter's remap() when the buffer grew. */
    public i32: Int32Array,
    private readonly layout: Layout,
    /** Host memory: tells a dead process's entries at once (else heartbeat age alone). */
    private readonly liveness?: Liveness,
    /** Host memory: wakes waiters of other processes too. */
    private readonly waits?: Waits,
  ) {}

  private q(w: number): number {
    return queueWord(this.layout, slotOfHotWord(this.layout, w));
  }

  /** Word index of record `r`. */
  rec(r: number): number {
    return this.layout.poolBase + r * RECORD_WORDS;
  }

  // ---- threads -------------------------------------------------------------------------

  /**
   * This thread's entry in the thread table, (re)claimed when needed; proves it alive.
   * Throws QueueFullError when the table is full (see THREAD_ENTRIES): for a caller about
   * to wait, before anything is granted.
   */
  heartbeat(): void {
    if (!this.tryHeartbeat()) {
      throw new QueueFullError(
        `more than ${THREAD_ENTRIES} threads are waiting on or holding permits of this limiter`,
      );
    }
  }

  /** When a full table was last found: looked through again at most every FULL_RETRY_MS. */
  private fullAtMs = -1;

  /**
   * heartbeat() that answers false instead of throwing when the thread table is full: for
   * callers that have already been granted something (a grant is never followed by a
   * throw) and for timers (nobody would catch it).
   */
  tryHeartbeat(): boolean {
    const i32 = this.i32;
    const base = this.layout.threadBase;
    const now = nowMs();
    if (this.threadEntry >= 0) {
      const e = base + this.threadEntry * 2;
      if (Atomics.load(i32, e + T_TOKEN) === this.threadToken) {
        Atomics.store(i32, e + T_HEARTBEAT, now);
        return true;
      }
      this.threadEntry = -1; // taken over while this thread had no waiters
    }
    // A full table is scanned again only now and then: a thread granted permits over and
    // over while it is full must not pay two passes over it on every grant.
    if (this.fullAtMs >= 0 && diff31(now, this.fullAtMs) >= 0) {
      if (diff31(now, this.fullAtMs) < FULL_RETRY_MS) return false;
    }
    const token = (Math.random() * 0x7fffffff) | 0 | 1;
    for (let pass = 0; pass < 2; pass++) {
      for (let t = 0; t < THREAD_ENTRIES; t++) {
        const e = base + t * 2;
        const cur = Atomics.load(i32, e + T_TOKEN);
        // Entries are taken over only after the longest silence anyone tolerates (holders'),
        // so that a slow thread's records still match its entry.
        const stale =
          cur !== 0 && this.isStale(Atomics.load(i32, e + T_HEARTBEAT), now, HOLDER_DEAD_MS);
        if ((pass === 0 && cur !== 0) || (pass === 1 && !stale)) continue;
        Atomics.store(i32, e + T_HEARTBEAT, now);
        if (Atomics.compareExchange(i32, e + T_TOKEN, cur, token) === cur) {
          Atomics.store(i32, e + T_HEARTBEAT, now);
          this.threadEntry = t;
          this.threadToken = token;
          this.fullAtMs = -1;
          this.liveness?.claimed(t, token);
          return true;
        }
      }
    }
    this.fullAtMs = now;
    return false;
  }

  private isStale(heartbeat: number, now: number, deadAfterMs = DEAD_AFTER_MS): boolean {
    return heartbeatStale(heartbeat, now, deadAfterMs);
  }

  /** Whether thread entry `entry`, as the owner of `token`, is gone or silent too long. */
  entryDead(entry: number, token: number, deadAfterMs: number): boolean {
    const e = this.layout.threadBase + entry * 2;
    if (Atomics.load(this.i32, e + T_TOKEN) !== token) return true;
    if (this.isStale(Atomics.load(this.i32, e + T_HEARTBEAT), nowMs(), deadAfterMs)) return true;
    return this.liveness?.dead(entry, token) === true;
  }

  /** Whether the thread that made record `r` is gone (terminated, or silent too long). */
  private ownerDead(r: number): boolean {
    const i32 = this.i32;
    const rw = this.rec(r);
    const entry = Atomics.load(i32, rw + R_THREAD);
    const e = this.layout.threadBase + entry * 2;
    const token = Atomics.load(i32, rw + R_TOKEN);
    if (Atomics.load(i32, e + T_TOKEN) !== token) return true;
    if (this.isStale(Atomics.load(i32, e + T_HEARTBEAT), nowMs())) return true;
    return this.liveness?.dead(entry, token) === true;
  }

  // ---- records ---------------------------------------------------------------------------

  private nextId = 1;

  /** The id written into record `r` when it was allocated. */
  id(r: number): number {
    return Atomics.load(this.i32, this.rec(r) + R_ID);
  }

  private allocate(w: number, permits: number): number {
    const i32 = this.i32;
    const n = this.layout.maxWaiters;
    for (let k = 0; k < n; k++) {
      const r = (this.cursor + k) % n;
      const rw = this.rec(r);
      const was = Atomics.compareExchange(i32, rw + R_STATUS, W_FREE, W_RESERVED);
      // An evicted record is out of its queue, its owner's to free once it has settled; a
      // dead owner never will, so it is free. (A closed one is still linked, but nothing
      // allocates after close().)
      if (
        was !== W_FREE &&
        !(
          was === W_EVICTED &&
          this.ownerDead(r) &&
          Atomics.compareExchange(i32, rw + R_STATUS, W_EVICTED, W_RESERVED) === W_EVICTED
        )
      ) {
        continue;
      }
      this.cursor = (r + 1) % n;
      Atomics.store(i32, rw + R_NEXT, 0);
      Atomics.store(i32, rw + R_SLOT, w);
      Atomics.store(i32, rw + R_PERMITS, permits);
      Atomics.store(i32, rw + R_THREAD, this.threadEntry);
      Atomics.store(i32, rw + R_TOKEN, this.threadToken);
      this.nextId = (this.nextId + 1) & 0x7fffffff || 1;
      Atomics.store(i32, rw + R_ID, this.nextId ^ this.threadToken);
      return r;
    }
    throw new QueueFullError(
      `all ${n} waiter records are in use (option "maxWaiters"); no room to wait`,
    );
  }

  /** Gives a record back to the pool (its owner does this, once it has settled). */
  free(r: number): void {
    Atomics.store(this.i32, this.rec(r) + R_ID, 0);
    Atomics.store(this.i32, this.rec(r) + R_STATUS, W_FREE);
  }

  status(r: number): number {
    return Atomics.load(this.i32, this.rec(r) + R_STATUS);
  }

  futex(r: number): number {
    return this.rec(r) + R_FUTEX;
  }

  /** Bumps record `r`'s futex word and wakes whoever waits on it, in every process. */
  wakeRecord(r: number): void {
    const f = this.rec(r) + R_FUTEX;
    Atomics.add(this.i32, f, 1);
    Atomics.notify(this.i32, f);
    this.waits?.notify(this.i32, f);
  }

  // ---- queues ------------------------------------------------------------------------------

  private setFlag(w: number, on: boolean): void {
    const i32 = this.i32;
    for (;;) {
      const raw = Atomics.load(i32, w + S_STAMP);
      const next = on ? raw | QUEUED_FLAG : raw & ~QUEUED_FLAG;
      if (next === raw || Atomics.compareExchange(i32, w + S_STAMP, raw, next) === raw) return;
    }
  }

  /**
   * Appends a waiter for `permits` to the queue of slot `w`. Past `queueLimit` permits,
   * 'oldest-first' refuses the newcomer and 'newest-first' evicts the oldest waiters.
   * Returns the new record.
   */
  enqueue(
    w: number,
    permits: number,
    queueLimit: number,
    newestFirst: boolean,
    generation: number,
    epoch: number,
  ): number {
    this.heartbeat();
    const i32 = this.i32;
    const q = this.q(w);
    const token = lock(this.i32, q + Q_LOCK);
    let r = -1;
    try {
      this.sweepLocked(w);
      let waiting = Atomics.load(i32, q + Q_PERMITS);
      if (permits > queueLimit) {
        // Would not fit even in an empty queue: refused, and nobody is evicted for it.
        throw new QueueFullError(
          `${permits} permits can never wait in a queue of ${queueLimit} (option "queueLimit")`,
        );
      }
      if (waiting + permits > queueLimit && !newestFirst) {
        throw new QueueFullError(
          `the queue holds ${waiting} of ${queueLimit} permits (option "queueLimit"); ${permits} more do not fit`,
        );
      }
      // The record first: with every record in use the newcomer is refused, and nobody is
      // evicted for a waiter that could not queue anyway.
      r = this.allocate(w, permits);
      if (waiting + permits > queueLimit) {
        // .NET's NewestFirst: the oldest waiters make room and fail with QueueFullError.
        while (waiting + permits > queueLimit) {
          const head = Atomics.load(i32, q + Q_HEAD) - 1;
          if (head < 0) break;
          this.unlinkLocked(w, head);
          Atomics.store(i32, this.rec(head) + R_STATUS, W_EVICTED);
          this.wakeRecord(head);
          waiting = Atomics.load(i32, q + Q_PERMITS);
        }
      }
      Atomics.store(i32, this.rec(r) + R_STATUS, W_WAITING);
      const tail = Atomics.load(i32, q + Q_TAIL) - 1;
      if (tail >= 0) Atomics.store(i32, this.rec(tail) + R_NEXT, r + 1);
      else Atomics.store(i32, q + Q_HEAD, r + 1);
      Atomics.store(i32, q + Q_TAIL, r + 1);
      Atomics.add(i32, q + Q_PERMITS, permits);
      this.setFlag(w, true);
      // The slot may have been given to another key since the caller's attempt: the table
      // reclaims only slots whose queue flag is clear, and re-reads the flag after
      // reserving one (rolling back if it is set). Flag first, state second here: one of
      // the two sides sees the other's write, so a waiter never stays on a foreign slot.
      // (generation −1: the default key, which never moves.)
      const st = Atomics.load(i32, w + S_STATE);
      if (
        generation >= 0 &&
        (st >>> GEN_SHIFT !== generation ||
          (st & PAYLOAD_MASK) === RESERVED ||
          Atomics.load(i32, H_CONTROL) - epoch >= GEN_SAFE_SPAN)
      ) {
        this.unlinkLocked(w, r);
        this.free(r);
        return MOVED;
      }
      return r;
    } finally {
      unlock(this.i32, q + Q_LOCK, token);
    }
  }

  /** Whether record `r` is at the head of its queue. */
  isHead(w: number, r: number): boolean {
    return Atomics.load(this.i32, this.q(w) + Q_HEAD) === r + 1;
  }

  /** Permits waiting in the queue of slot `w`. */
  waitingPermits(w: number): number {
    return Atomics.load(this.i32, this.q(w) + Q_PERMITS);
  }

  /**
   * Takes record `r` (id `id`) out of its queue if it is still there, and wakes the next
   * head. Returns the status it had: W_WAITING normally; W_EVICTED or W_CLOSED if another
   * thread settled it first; W_FREE if it was swept (its thread looked dead).
   */
  leave(w: number, r: number, id: number): number {
    const q = this.q(w);
    const token = lock(this.i32, q + Q_LOCK);
    try {
      if (this.id(r) !== id) return W_FREE;
      const status = Atomics.load(this.i32, this.rec(r) + R_STATUS);
      this.unlinkLocked(w, r);
      return status;
    } finally {
      unlock(this.i32, q + Q_LOCK, token);
    }
  }

  /** Unlinks `r` (under the lock); keeps the permits count and flag right; wakes a new head. */
  private unlinkLocked(w: number, r: number): void {
    const i32 = this.i32;
    const q = this.q(w);
    let prev = -1;
    let cur = Atomics.load(i32, q + Q_HEAD) - 1;
    while (cur >= 0 && cur !== r) {
      prev = cur;
      cur = Atomics.load(i32, this.rec(cur) + R_NEXT) - 1;
    }
    if (cur < 0) return; // not in the queue (already removed)
    const next = Atomics.load(i32, this.rec(r) + R_NEXT);
    if (prev >= 0) Atomics.store(i32, this.rec(prev) + R_NEXT, next);
    else Atomics.store(i32, q + Q_HEAD, next);
    if (Atomics.load(i32, q + Q_TAIL) === r + 1) Atomics.store(i32, q + Q_TAIL, prev + 1);
    Atomics.sub(i32, q + Q_PERMITS, Atomics.load(i32, this.rec(r) + R_PERMITS));
    Atomics.store(i32, this.rec(r) + R_NEXT, 0);
    if (Atomics.load(i32, q + Q_HEAD) === 0) this.setFlag(w, false);
    else if (prev < 0) this.wakeRecord(next - 1); // a new head: its turn to try
  }

  /** Wakes the head of slot `w`'s queue (permits were given back, or time passed). */
  wakeHead(w: number): void {
    const head = Atomics.load(this.i32, this.q(w) + Q_HEAD) - 1;
    if (head >= 0) this.wakeRecord(head);
  }

  /**
   * Removes waiters whose thread is gone from the head of slot `w`'s queue, so the queue
   * behind them proceeds. Called by every waiting thread's heartbeat, and by a decision
   * that found the queue flag set (a queue of dead waiters must not block a key forever).
   * Returns whether it removed any.
   */
  sweep(w: number): boolean {
    const i32 = this.i32;
    const q = this.q(w);
    const head = Atomics.load(i32, q + Q_HEAD) - 1;
    if (head < 0 || !this.ownerDead(head)) return false;
    const token = lock(this.i32, q + Q_LOCK);
    try {
      this.sweepLocked(w);
    } finally {
      unlock(this.i32, q + Q_LOCK, token);
    }
    return true;
  }

  private sweepLocked(w: number): void {
    const i32 = this.i32;
    const q = this.q(w);
    for (;;) {
      const head = Atomics.load(i32, q + Q_HEAD) - 1;
      if (head < 0 || !this.ownerDead(head)) return;
      this.unlinkLocked(w, head);
      this.free(head); // its owner is gone: nobody else will
    }
  }

  /** close(): every waiter of every key, on every thread, wakes to a closed limiter. */
  closeAll(): void {
    const i32 = this.i32;
    for (let r = 0; r < this.layout.maxWaiters; r++) {
      const rw = this.rec(r);
      if (Atomics.compareExchange(i32, rw + R_STATUS, W_WAITING, W_CLOSED) === W_WAITING) {
        this.wakeRecord(r);
      }
    }
  }
}
