import { LimiterClosedError } from '../../errors.js';
import type { Key } from '../../limiter.js';
import type { Decision } from '../../options.js';
import { leaseAheadDue } from '../../permit-blocks.js';
import { Unavailable } from '../runner.js';
import { type Blocks, BOTH_AHEAD, I_FETCH } from './blocks.js';
import { OffsetBounds } from './offset.js';

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

/** A fetch claim this thread holds (Fleet.claims): its slot, field and current token. */
interface Claim {
  readonly s: number;
  readonly which: number;
  token: number;
}

export class Fleet {
  /** This thread's last key: its tag, slot and the slot's owner then (slotFor()). */
  private lastTag: string | undefined;
  private lastSlot = -1;
  private lastOwner = 0;
  /**
   * How long a fetch claim holds before it is stale and taken over (Blocks.claimFetch()):
   * half of timeoutMs, so that a call that waited for a stale claim from its start still
   * has the other half for its own fetch.
   */
  private readonly staleMs: number;
  /**
   * The fetch claims this thread holds, renewed every staleMs / 2 while their fetches are
   * out (an unref'd timer that stops once none is held): only a thread that cannot run its
   * timers lets its claims go stale.
   */
  private readonly claims = new Set<Claim>();
  private renewer: ReturnType<typeof setInterval> | undefined;
  private readonly renew = () => {
    if (this.claims.size === 0) {
      clearInterval(this.renewer);
      this.renewer = undefined;
      return;
    }
    for (const c of this.claims) {
      c.token = this.blocks.renewFetch(c.s, c.which, c.token, this.staleMs);
      // Taken over (this thread was late): the claim is the other fetcher's now.
      if (c.token === 0) this.claims.delete(c);
    }
  };
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
  ) {
    this.staleMs = Math.max(1, Math.floor(host.timeoutMs / 2));
  }

  /** Holds the fetch claim `token` of field `which` of slot `s`, renewing it until let go. */
  private hold(s: number, which: number, token: number): Claim {
    const c: Claim = { s, which, token };
    this.claims.add(c);
    if (this.renewer === undefined) {
      this.renewer = setInterval(this.renew, Math.max(1, this.staleMs >> 1));
      this.renewer.unref();
    }
    return c;
  }

  /** Ends claim `c` (the fetch is over), waking the calls waiting for it. */
  private letGo(c: Claim): void {
    this.claims.delete(c);
    this.blocks.endFetch(c.s, c.token, c.which);
  }

  /**
   * This thread's give-backs still out (aged-out blocks, slots taken over): close() waits
   * for them too, or a caller that closes and then drops its client would lose them.
   */
  private readonly returning = new Set<Promise<unknown>>();

  /**
   * Once every lease this thread has out has landed in the blocks (or failed), and every
   * give-back it has out has reached Redis (or failed).
   */
  settled(): Promise<void> {
    return Promise.allSettled([...this.leasing, ...this.returning]).then(() => {});
  }

  /** A give-back, tracked until it settles (see `returning`). */
  private back(d: { tag: string; permits: number; takenUs: number }): Promise<void> {
    const p = this.host.giveBack(d.tag, d.permits, String(d.takenUs));
    this.returning.add(p);
    const done = () => this.returning.delete(p);
    p.then(done, done);
    return p;
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
      // A block that aged out belonged to a key that cooled: its leases go back to `block`.
      if (blocks.expired(s, now)) blocks.resetLease(s);
      const d = blocks.drain(s);
      if (d) pending.push(this.back(d));
    }
    return Promise.all(pending).then(() => {});
  }

  /**
   * This thread's slot of `tag` in the blocks (−1: none), and its owner in `lastOwner`. The
   * last key's is remembered while the slot stays that key's (Blocks.owner()): a hot key is
   * then found without hashing. A slot taken over from a key whose block was gone gives
   * that block's aged-out permits back.
   */
  private slotFor(b: Blocks, tag: string, now: number): number {
    if (tag === this.lastTag && b.owner(this.lastSlot) === this.lastOwner) return this.lastSlot;
    const s = b.slotOf(tag, now);
    const evicted = b.evicted;
    if (evicted !== undefined) {
      b.evicted = undefined;
      this.back(evicted).catch(this.host.lost);
    }
    if (s < 0) return s;
    this.lastTag = tag;
    this.lastSlot = s;
    this.lastOwner = b.owner(s);
    return s;
  }

  /** Spends `permits` from slot `s`'s block if it holds them, leasing ahead as it runs low. */
  private spend(
    b: Blocks,
    s: number,
    owner: number,
    tag: string,
    permits: number,
    now: number,
  ): boolean {
    if (!b.take(s, permits, now, owner)) return false;
    // A quarter of a lease left: the next one is leased in the background, so that the
    // threads spending this one need not wait for a round trip; an eighth left with that
    // lease still out, a second one (a key spending faster than a round trip); for a key
    // that needed that second one, both at the quarter, in one call (Blocks.claimAhead()).
    if (!this.ahead) return true;
    const size = b.leaseSize(s, this.host.block);
    if (leaseAheadDue(b.permits(s), size, false)) this.leaseAhead(b, s, owner, tag, size, now);
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
    const now = this.host.localMs();
    const s = this.slotFor(b, tag, now);
    if (s >= 0) {
      if (this.spend(b, s, this.lastOwner, tag, permits, now)) return ALLOWED;
      if (b.refusedForMs(s, now) > 0) return REFUSED;
    }
    return this.decide(tag, key, permits).then(allowedOf);
  }

  /** tryAcquire() for consume(): the Decision. */
  consume(tag: string, key: Key | undefined, permits: number): Promise<Decision> {
    const b = this.blocks;
    const now = this.host.localMs();
    const s = this.slotFor(b, tag, now);
    if (s >= 0) {
      if (this.spend(b, s, this.lastOwner, tag, permits, now)) {
        return Promise.resolve(this.spent(b, s, now));
      }
      const refusedMs = b.refusedForMs(s, now);
      if (refusedMs > 0) return Promise.resolve(this.refusedHere(b, s, now, refusedMs));
    }
    return this.decide(tag, key, permits);
  }

  /** Fleet mode's decision: spend from the block, or a cached refusal, or fetch a block. */
  private async decide(tag: string, key: Key | undefined, permits: number): Promise<Decision> {
    const b = this.blocks;
    let s = this.slotFor(b, tag, this.host.localMs());
    if (s < 0) return this.host.direct(tag, key, permits);
    // Kept here: other calls of this thread move lastOwner while this one waits.
    let owner = this.lastOwner;
    // Real time, as the fetch leases: a call waiting for others' fetches still answers
    // within its own timeoutMs, and takes the answer of a fetch that found Redis unavailable
    // (were each waiter to ask again in turn, they would answer a timeoutMs after another).
    const start = Date.now();
    for (;;) {
      const now = this.host.localMs();
      if (b.owner(s) !== owner) {
        // The slot passed to another key while this call waited (its block was gone).
        s = this.slotFor(b, tag, now);
        if (s < 0) return this.host.direct(tag, key, permits);
        owner = this.lastOwner;
      }
      if (this.spend(b, s, owner, tag, permits, now)) return this.spent(b, s, now);
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
      const token = b.claimFetch(s, this.staleMs);
      if (token === 0) {
        // Another thread (or call) fetches this key's block: wait for it, then look again.
        // Waiting is not an outage: a claim that goes stale (its fetcher died, or computes
        // without reading the reply) is taken over then, within this call's timeoutMs.
        await b.waitFetch(s, leftMs);
        continue;
      }
      // A reset() of the key while the lease is out voids it (Blocks.add()), as does the
      // slot passing to another key.
      const claim = this.hold(s, I_FETCH, token);
      const epoch = b.epochOf(s, owner);
      if (epoch < 0) {
        this.letGo(claim);
        continue;
      }
      let r: LeaseReply;
      let size: number;
      try {
        // Fewer permits than asked are left, or an aged-out block: they go back first, in
        // the window they were taken in (and a key that let its block age out cooled).
        if (b.expired(s, now)) b.resetLease(s);
        const left = b.drain(s);
        if (left) this.back(left).catch(this.host.lost);
        size = b.leaseSize(s, this.host.block);
        r = this.host.parse(await this.lease(tag, size, String(permits)));
      } catch (error) {
        // Noted before the waiters wake (endFetch()): they answer by it too.
        if (error instanceof Unavailable) b.failed(s, Date.now());
        this.letGo(claim);
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
          this.letGo(claim);
          throw this.host.badReply(r);
        }
        if (current) b.grow(s, this.host.block, this.mostLeased);
        this.land(b, s, granted - permits, r, now, at, epoch);
        this.letGo(claim);
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
      this.letGo(claim);
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
    permits: number,
    r: LeaseReply,
    sentMs: number,
    at: number,
    epoch: number,
  ): void {
    if (b.expired(s, at)) {
      const old = b.drain(s);
      if (old) this.back(old).catch(this.host.lost);
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

  private leaseAhead(
    b: Blocks,
    s: number,
    owner: number,
    tag: string,
    size: number,
    now: number,
  ): void {
    if (this.host.closed()) return;
    const which = b.claimAhead(s, size, this.staleMs, this.pairs);
    if (which === 0) return;
    const claim = this.hold(s, which, b.claimed);
    const epoch = b.epochOf(s, owner);
    if (epoch < 0) {
      this.letGo(claim);
      return;
    }
    // A hot key's two leases ahead, in one round trip.
    const asked = which === BOTH_AHEAD ? 2 * size : size;
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
              this.land(b, s, r.hintUs, r, now, at, epoch);
              b.grow(s, this.host.block, this.mostLeased);
            } else if (!r.allowed && Number.isFinite(r.retryAfterUs)) {
              b.refuse(s, from + r.retryAfterUs / 1000);
            }
          } finally {
            this.letGo(claim);
          }
        },
        (error) => {
          // Redis unavailable: the calls waiting for this lease answer by the failure
          // policy (as for a fetch's), rather than each asking again in turn.
          if (error instanceof Unavailable) b.failed(s, Date.now());
          this.letGo(claim);
        },
      )
      // A reply of the wrong shape adds nothing; nobody awaits a lease taken ahead, so the
      // next fetch of the key meets the same reply and reports it to its caller.
      .catch(() => {});
  }
}
