import { LimiterClosedError } from '../errors.js';
import type { Key } from '../limiter.js';
import type { Decision } from '../options.js';
import { type Blocks, BOTH_AHEAD } from './blocks.js';
import { OffsetBounds } from './offset.js';
import { Unavailable } from './runner.js';

/**
 * Fleet mode's decisions (`block: n`): permits leased from Redis into this process's shared
 * blocks (blocks.ts), spent by every thread of the process, fetched by one thread at a time
 * per key, leased ahead as they run low, given back when they age out or on close(); and
 * refusals cached until their retryAfterMs. A RedisLimiter with blocks makes one Fleet per
 * thread (its own Redis client, the same blocks).
 */

// Answers known at once (shared: a settled promise holds one value forever).
const ALLOWED = Promise.resolve(true);
const REFUSED = Promise.resolve(false);
const allowedOf = (d: Decision): boolean => d.allowed;

/** What a lease ('b' op) replies, as the limiter parses it. */
export interface LeaseReply {
  readonly allowed: boolean;
  readonly retryAfterUs: number;
  readonly untilFreshUs: number;
  readonly nowUs: number;
  /** Permits granted. */
  readonly hintUs: number;
  /**
   * µs from `nowUs` that the permits granted keep counting in the window they were counted
   * in (a window's end; Infinity: buckets and the log, whose blocks age out by blockTtlMs).
   */
  readonly countedUs: number;
}

/** What fleet mode needs of its limiter (the RedisLimiter, bound). */
export interface FleetHost {
  readonly limit: number;
  readonly block: number;
  readonly blockTtlMs: number;
  readonly timeoutMs: number;
  closed(): boolean;
  /** Local time in ms (the ManualClock's when given). */
  localMs(): number;
  /** A ManualClock's time goes to the scripts (else they read Redis TIME). */
  readonly manualTime: boolean;
  call(op: string, tag: string, permits: number, extra: string): Promise<unknown>;
  /** Sends the calls made so far at once (not at the end of the tick). */
  sendNow(): void;
  parse(reply: unknown): LeaseReply;
  badReply(reply: unknown): Error;
  /** The failure policy's decision, for a call Redis could not answer. */
  fallback(error: unknown, key: Key | undefined, permits: number): Decision | PromiseLike<Decision>;
  /** A decision by Redis directly (no block). */
  direct(tag: string, key: Key | undefined, permits: number): Promise<Decision>;
  giveBack(tag: string, permits: number, takenUs: string): Promise<void>;
  /** A give-back nobody awaits that failed. */
  lost(error: unknown): void;
}

export class Fleet {
  /** This thread's last key: its tag and slot (slotFor()). */
  private lastTag: string | undefined;
  private lastSlot = -1;
  /**
   * This thread's leases still out (fetches and leases ahead). Redis has taken their
   * permits already: close() waits for them to land in the blocks, or a caller that closes
   * and then drops its client would lose them.
   */
  private readonly leasing = new Set<Promise<unknown>>();

  constructor(
    readonly blocks: Blocks,
    private readonly host: FleetHost,
    /** The most one lease asks for: `maxBlock` (= block when leases do not grow). */
    private readonly mostLeased: number,
    /**
     * Whether a hot key's two leases ahead may go as one of twice the size: not where a
     * lease is a burst (LeakyBucket: an empty bucket grants any count at once).
     */
    private readonly pairs: boolean,
    /** Whether blocks are leased ahead as they run low (`leaseAhead`), or only when empty. */
    private readonly ahead = true,
  ) {}

  /** Once every lease this thread has out has landed in the blocks (or failed). */
  settled(): Promise<void> {
    return Promise.allSettled([...this.leasing]).then(() => {});
  }

  /** A lease call, tracked until it settles (see `leasing`). */
  private lease(tag: string, size: number, permits: string): Promise<unknown> {
    const p = this.host.call('b', tag, size, permits);
    this.leasing.add(p);
    const done = () => this.leasing.delete(p);
    p.then(done, done);
    return p;
  }

  /** Gives back the permits of blocks (only aged-out ones if `expiredOnly`). */
  giveBack(expiredOnly: boolean): Promise<void> {
    const blocks = this.blocks;
    const now = this.host.localMs();
    const pending: Promise<void>[] = [];
    for (const s of blocks.held()) {
      if (expiredOnly && !blocks.expired(s, now)) continue;
      const tag = blocks.tagOf(s);
      // A block that aged out belonged to a key that cooled: its leases go back to `block`.
      if (blocks.expired(s, now)) blocks.resetLease(s);
      const d = blocks.drain(s);
      if (d.permits > 0) {
        pending.push(this.host.giveBack(tag, d.permits, String(d.takenUs)));
      }
    }
    return Promise.all(pending).then(() => {});
  }

  /**
   * This thread's slot of `tag` in the blocks (−1: none). The last key's is remembered: a
   * slot, once a key's, stays that key's, and a hot key is then found without hashing.
   */
  private slotFor(b: Blocks, tag: string): number {
    if (tag === this.lastTag) return this.lastSlot;
    const s = b.slotOf(tag);
    if (s >= 0) {
      this.lastTag = tag;
      this.lastSlot = s;
    }
    return s;
  }

  /** Spends `permits` from slot `s`'s block if it holds them, leasing ahead as it runs low. */
  private spend(b: Blocks, s: number, tag: string, permits: number, now: number): boolean {
    if (!b.take(s, permits, now)) return false;
    // A quarter of a lease left: the next one is leased in the background, so that the
    // threads spending this one need not wait for a round trip; an eighth left with that
    // lease still out, a second one (a key spending faster than a round trip); for a key
    // that needed that second one, both at the quarter, in one call (Blocks.claimAhead()).
    if (!this.ahead) return true;
    const size = b.leaseSize(s, this.host.block);
    if (b.permits(s) <= size >> 2 && size >= 4) this.leaseAhead(b, s, tag, size, now);
    return true;
  }

  /** A grant from slot `s`'s block (after spend()). */
  private spent(b: Blocks, s: number, now: number): Decision {
    return {
      allowed: true,
      remaining: b.permits(s),
      limit: this.host.limit,
      retryAfterMs: 0,
      resetAfterMs: b.resetAfterMs(s, now),
    };
  }

  /** Slot `s`'s cached refusal, `refusedMs` more. */
  private refusedHere(b: Blocks, s: number, now: number, refusedMs: number): Decision {
    return {
      allowed: false,
      remaining: 0,
      limit: this.host.limit,
      retryAfterMs: refusedMs,
      resetAfterMs: b.resetAfterMs(s, now),
      reason: 'limited',
    };
  }

  /**
   * Fleet mode without a promise of its own where it can: spent from the block or refused
   * by a cached refusal, the answer is known at once; otherwise decide() fetches.
   */
  tryAcquire(tag: string, key: Key | undefined, permits: number): Promise<boolean> {
    const b = this.blocks;
    const s = this.slotFor(b, tag);
    if (s >= 0) {
      const now = this.host.localMs();
      if (this.spend(b, s, tag, permits, now)) return ALLOWED;
      if (b.refusedForMs(s, now) > 0) return REFUSED;
    }
    return this.decide(tag, key, permits).then(allowedOf);
  }

  /** tryAcquire() for consume(): the Decision. */
  consume(tag: string, key: Key | undefined, permits: number): Promise<Decision> {
    const b = this.blocks;
    const s = this.slotFor(b, tag);
    if (s >= 0) {
      const now = this.host.localMs();
      if (this.spend(b, s, tag, permits, now)) return Promise.resolve(this.spent(b, s, now));
      const refusedMs = b.refusedForMs(s, now);
      if (refusedMs > 0) return Promise.resolve(this.refusedHere(b, s, now, refusedMs));
    }
    return this.decide(tag, key, permits);
  }

  /** Fleet mode's decision: spend from the block, or a cached refusal, or fetch a block. */
  private async decide(tag: string, key: Key | undefined, permits: number): Promise<Decision> {
    const b = this.blocks;
    const s = this.slotFor(b, tag);
    if (s < 0) return this.host.direct(tag, key, permits);
    // Real time, as the fetch leases: a call waiting for others' fetches still answers
    // within its own timeoutMs, and takes the answer of a fetch that found Redis unavailable
    // (were each waiter to ask again in turn, they would answer a timeoutMs after another).
    const start = Date.now();
    for (;;) {
      const now = this.host.localMs();
      if (this.spend(b, s, tag, permits, now)) return this.spent(b, s, now);
      const refusedMs = b.refusedForMs(s, now);
      if (refusedMs > 0) return this.refusedHere(b, s, now, refusedMs);
      if (this.host.closed()) throw new LimiterClosedError();
      if (b.failedAtMs(s) >= start) {
        return this.host.fallback(
          new Unavailable('a fetch of this key found Redis unavailable'),
          key,
          permits,
        );
      }
      const leftMs = start + this.host.timeoutMs - Date.now();
      if (leftMs <= 0) {
        return this.host.fallback(
          new Unavailable(`no answer from Redis within ${this.host.timeoutMs} ms`),
          key,
          permits,
        );
      }
      // Dry with a lease out: the key is spent faster than a round trip brings permits, so
      // the next leases grow (Blocks.grow()).
      if (b.fetching(s)) b.starve(s);
      if (!b.claimFetch(s, 2 * this.host.timeoutMs)) {
        // Another thread (or call) fetches this key's block: wait for it, then look again.
        await b.waitFetch(s, leftMs);
        continue;
      }
      // A reset() of the key while the lease is out voids it (Blocks.add()).
      const epoch = b.epoch(s);
      let r: LeaseReply;
      let size: number;
      try {
        // Fewer permits than asked are left, or an aged-out block: they go back first, in
        // the window they were taken in (and a key that let its block age out cooled).
        if (b.expired(s, now)) b.resetLease(s);
        const left = b.drain(s);
        if (left.permits > 0) {
          this.host.giveBack(tag, left.permits, String(left.takenUs)).catch(this.host.lost);
        }
        size = b.leaseSize(s, this.host.block);
        r = this.host.parse(await this.lease(tag, size, String(permits)));
      } catch (error) {
        // Noted before the waiters wake (endFetch()): they answer by it too.
        if (error instanceof Unavailable) b.failed(s, Date.now());
        b.endFetch(s);
        return this.host.fallback(error, key, permits);
      }
      const at = this.host.localMs();
      // Before noteReply(): a refusal is timed by the replies read before it.
      const from = r.allowed ? 0 : this.refusedFrom(now, at, r);
      this.noteReply(now, at, r);
      // After a reset() the reply is the caller's answer still (it was decided before the
      // reset), but nothing of it stays in the blocks.
      const current = b.epoch(s) === epoch;
      if (current) b.setFreshAt(s, at + r.untilFreshUs / 1000);
      if (r.allowed) {
        const granted = r.hintUs;
        if (!(granted >= permits && granted <= size)) {
          b.endFetch(s);
          throw this.host.badReply(r);
        }
        if (current) b.grow(s, this.host.block, this.mostLeased);
        this.land(b, s, tag, granted - permits, r, now, at, epoch);
        b.endFetch(s);
        return {
          allowed: true,
          remaining: b.permits(s),
          limit: this.host.limit,
          retryAfterMs: 0,
          resetAfterMs: r.untilFreshUs / 1000,
        };
      }
      const retryAfterMs = Number.isFinite(r.retryAfterUs)
        ? r.retryAfterUs / 1000
        : this.host.timeoutMs;
      // A refusal of one permit holds for any count; of more, not for fewer: only the first
      // is cached.
      if (permits === 1 && current) b.refuse(s, from + retryAfterMs);
      b.endFetch(s);
      return {
        allowed: false,
        remaining: 0,
        limit: this.host.limit,
        retryAfterMs,
        resetAfterMs: r.untilFreshUs / 1000,
        reason: 'limited',
      };
    }
  }

  /**
   * Puts `permits` of lease reply `r` in slot `s`'s block (sent at local time `sentMs` or
   * later, landed at `at`, with slot epoch `epoch`). The block ages out after `blockTtlMs`,
   * or, for a window, when the window the permits were counted in ends (`countedUs` from the
   * script's time, which was `sentMs` or later: so never past that end; a permit spent after
   * it would count in a window that did not count it). Permits held whose block aged out go
   * back first: the new ones do not share their age-out (Blocks.add()).
   */
  private land(
    b: Blocks,
    s: number,
    tag: string,
    permits: number,
    r: LeaseReply,
    sentMs: number,
    at: number,
    epoch: number,
  ): void {
    if (b.expired(s, at)) {
      const old = b.drain(s);
      if (old.permits > 0) {
        this.host.giveBack(tag, old.permits, String(old.takenUs)).catch(this.host.lost);
      }
    }
    const expiresMs = Math.min(at + this.host.blockTtlMs, sentMs + r.countedUs / 1000);
    // Landed after its window ended (a slow reply, a ManualClock moved): they count nowhere.
    if (expiresMs <= at) return;
    b.add(s, permits, r.nowUs, r.nowUs + r.countedUs, expiresMs, epoch);
  }

  /**
   * The local time a refusal's retryAfterMs counts from, for lease reply `r` sent at
   * `sentMs` and read at `at` (before noteReply() of it). A ManualClock's time went with the
   * script: `sentMs` exactly (counted from reading, a clock moved meanwhile would reach into
   * the next window).
   *
   * Redis TIME was read somewhere between sending and reading, and reading may come long
   * after the reply arrived (a thread busy spending reads it when it yields). Counted from
   * reading, the refusal would last as much longer as the thread was busy, for every
   * thread; counted from sending, it would end early by the lease's way to Redis, and the
   * next call would meet a second refusal (a round trip more per retryAfterMs). So the
   * script's time is brought to the local clock by the bounds the thread's earlier replies
   * put on the clocks' offset (OffsetBounds): never earlier than Redis would admit, later by
   * at most the way back of the quickest of them, and never past reading. Where they say
   * nothing (none yet, lapsed, or the clocks moved apart), it counts from sending.
   */
  private refusedFrom(sentMs: number, at: number, r: LeaseReply): number {
    if (this.host.manualTime) return sentMs;
    return this.offset.localOf(r.nowUs / 1000, sentMs, at) ?? sentMs;
  }

  /** This thread's bounds on the offset of Redis's clock (refusedFrom()). */
  private readonly offset = new OffsetBounds();

  /** Notes lease reply `r`, sent at local time `sentMs` and read at `at` (refusedFrom()). */
  private noteReply(sentMs: number, at: number, r: LeaseReply): void {
    if (!this.host.manualTime) this.offset.note(r.nowUs / 1000, sentMs, at);
  }

  private leaseAhead(b: Blocks, s: number, tag: string, size: number, now: number): void {
    if (this.host.closed()) return;
    const which = b.claimAhead(s, size, 2 * this.host.timeoutMs, this.pairs);
    if (which === 0) return;
    // A hot key's two leases ahead, in one round trip.
    const asked = which === BOTH_AHEAD ? 2 * size : size;
    const epoch = b.epoch(s);
    const leased = this.lease(tag, asked, '1');
    this.host.sendNow();
    leased
      .then(
        (reply) => {
          try {
            const r = this.host.parse(reply);
            const at = this.host.localMs();
            const from = r.allowed ? 0 : this.refusedFrom(now, at, r);
            this.noteReply(now, at, r);
            // After a reset() of the key, nothing of the reply stays (Blocks.add()).
            if (b.epoch(s) !== epoch) return;
            b.setFreshAt(s, at + r.untilFreshUs / 1000);
            if (r.allowed && r.hintUs >= 1 && r.hintUs <= asked) {
              this.land(b, s, tag, r.hintUs, r, now, at, epoch);
              b.grow(s, this.host.block, this.mostLeased);
            } else if (!r.allowed && Number.isFinite(r.retryAfterUs)) {
              b.refuse(s, from + r.retryAfterUs / 1000);
            }
          } finally {
            b.endFetch(s, which);
          }
        },
        (error) => {
          // Redis unavailable: the calls waiting for this lease answer by the failure
          // policy (as for a fetch's), rather than each asking again in turn.
          if (error instanceof Unavailable) b.failed(s, Date.now());
          b.endFetch(s, which);
        },
      )
      // A reply of the wrong shape adds nothing; nobody awaits a lease taken ahead, so the
      // next fetch of the key meets the same reply and reports it to its caller.
      .catch(() => {});
  }
}
