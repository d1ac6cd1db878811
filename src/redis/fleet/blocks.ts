import { diff31 } from '../../clock.js';
import { hashKey } from '../../engine/hash.js';
import { grownLease, leaseAheadDue } from '../../permit-blocks.js';

/**
 * Fleet mode's shared memory: per key, the permits this process leased from Redis (a
 * block), when they were taken (so a give-back lands in their window), when the block ages
 * out, and a cached refusal. One SharedArrayBuffer, shared by every thread of the process
 * through the limiter's handle; all fields are read and written with Atomics.
 *
 * A fixed open-addressing table of `slots` entries keyed by a 64-bit fingerprint of the key
 * (collision odds 2^-64 per pair, as the core table's). A slot whose block is gone (no
 * permits in hand or only aged-out ones, no lease out, no cached refusal in force) is taken
 * over by a new key whose probe finds no room: the slot changes owner (I_OWNER), so a thread
 * still holding the slot for the old key sees that before it spends, and a lease of the old
 * key still out lands in nothing (I_EPOCH). When every slot of a key's probe is in use, the
 * key gets no block: it is decided by Redis directly (correct, only slower).
 */

// Int32 fields per slot.
const I_STATE = 0; // 0 empty, 1 claiming, 2 ready
const I_FP0 = 1;
const I_FP1 = 2;
const I_PERMITS = 3; // permits in hand
// Fetch leases: the real time (Date.now(), low 31 bits) from which the claim is stale, 0 =
// free. A stale claim is anybody's to take over (claimFetch()): its fetcher died, or is busy
// computing and does not read the reply. Two leases of a key may
// be out at once: the fetch of a thread that found the block empty or a lease taken ahead,
// and a second lease taken ahead, for a key spending its block faster than a round trip
// brings the next (claimAhead()).
export const I_FETCH = 4;
const I_FETCH2 = 7;
const I_GEN = 5; // bumped when a fetch ends: wakes threads waiting for it
// Permits a lease asks for (0: the block); grown for a key spent fast (grow()).
const I_LEASE = 8;
// 1 when the key ran dry with a lease out since the last lease landed (spent faster than a
// round trip brings permits).
const I_STARVED = 9;
// Bumped by forget() (reset()): a lease sent before it lands in nothing (add()).
const I_EPOCH = 10;
// 1 once the key needed a second lease ahead or ran dry with a lease out (spent faster than
// a round trip brings a lease): its leases ahead then go two at once (claimAhead()). Back to
// 0 with the lease size, when its block ages out (resetLease()).
const I_HOT = 11;
// Bumped when the slot passes to another key: what a thread remembered of the slot holds
// while it is unchanged (take(), epochOf()).
const I_OWNER = 12;
// Bumped before anything replaces what the permits in hand belong to (a later window's
// lease, a reset, a new owner): drain() reads the permits and their taking time as one pair
// by checking it is unchanged around them.
const I_VER = 13;
const INTS = 14;

/** claimAhead(): both fetch leases claimed, for two leases' permits in one round trip. */
export const BOTH_AHEAD = -1;
// Float64 fields per slot.
const F_TAKEN_US = 0; // when the block's permits were taken (the script's time)
const F_EXPIRES_MS = 1; // local time the block ages out
const F_REFUSED_UNTIL_MS = 2; // local time a cached refusal ends (0: none)
const F_FRESH_AT_MS = 3; // local time the key is fresh again, as Redis last said
// Real time (Date.now()) a fetch of the key last failed with Redis unavailable (0: never):
// the calls that waited for that fetch take its answer instead of asking again in turn.
const F_FAILED_AT_MS = 4;
// Until when the block's permits count where they were counted (the script's time, µs; a
// window's end, Infinity for buckets and the log): two leases' permits mix only if equal.
const F_UNTIL_US = 5;
const FLOATS = 6;

// The key's tag, UTF-16, per slot (close() and the sweep name the key to give back to).
const TAG_CHARS = 120;
const I_TAG_LENGTH = 6;

const SEED0 = 0x5eed_f1ee | 0;
const SEED1 = 0x0b10_c45 | 0;
const MAX_PROBE = 32;

/** What drain() took from a block: its permits, when they were taken, and their key. */
export interface Drained {
  readonly permits: number;
  readonly takenUs: number;
  readonly tag: string;
}

/** Fleet mode's shared blocks as they travel in a Redis limiter's handle to another thread. */
export interface BlocksHandle {
  /** Marks the object as fleet blocks. */
  readonly kind: 'atomic-limiter/redis-blocks';
  /** The blocks' shared memory. */
  readonly buffer: SharedArrayBuffer;
  /** Keys with a block at once (`blockKeys`). */
  readonly slots: number;
}

export class Blocks {
  readonly handle: BlocksHandle;
  private readonly ints: Int32Array;
  private readonly floats: Float64Array;
  private readonly slots: number;
  private readonly fp = new Int32Array(2);
  private readonly chars: Uint16Array;

  constructor(from: number | BlocksHandle) {
    if (typeof from === 'number') {
      const buffer = new SharedArrayBuffer(from * (FLOATS * 8 + INTS * 4 + TAG_CHARS * 2));
      this.handle = { kind: 'atomic-limiter/redis-blocks', buffer, slots: from };
    } else {
      this.handle = from;
    }
    this.slots = this.handle.slots;
    this.floats = new Float64Array(this.handle.buffer, 0, this.slots * FLOATS);
    this.ints = new Int32Array(this.handle.buffer, this.slots * FLOATS * 8, this.slots * INTS);
    this.chars = new Uint16Array(
      this.handle.buffer,
      this.slots * (FLOATS * 8 + INTS * 4),
      this.slots * TAG_CHARS,
    );
  }

  /** The tag slot `s` holds. */
  tagOf(s: number): string {
    const n = Atomics.load(this.ints, s * INTS + I_TAG_LENGTH);
    return String.fromCharCode(...this.chars.subarray(s * TAG_CHARS, s * TAG_CHARS + n));
  }

  /** Slot `s`'s owner: unchanged while the slot is the same key's (take(), epochOf()). */
  owner(s: number): number {
    return Atomics.load(this.ints, s * INTS + I_OWNER);
  }

  /**
   * The slot of `tag`, claimed if new; −1 when the table has no room for it. With `nowMs`
   * (local time), a slot of the tag's probe whose block is gone is taken over when no slot
   * is free (reusable()); aged-out permits it held are drained into `evicted`, for the
   * caller to give back.
   */
  slotOf(tag: string, nowMs?: number): number {
    // A key too long to name here is decided by Redis directly (correct, only slower).
    if (tag.length > TAG_CHARS) return -1;
    hashKey(tag, SEED0, SEED1, this.fp);
    const fp0 = this.fp[0]!;
    const fp1 = this.fp[1]!;
    const ints = this.ints;
    const home = (fp0 >>> 0) % this.slots;
    let s = home;
    for (let probe = 0; probe < MAX_PROBE; probe++, s = (s + 1) % this.slots) {
      const b = s * INTS;
      let state = Atomics.load(ints, b + I_STATE);
      if (state === 0) {
        if (Atomics.compareExchange(ints, b + I_STATE, 0, 1) === 0) {
          this.own(s, tag, fp0, fp1);
          return s;
        }
        state = Atomics.load(ints, b + I_STATE);
      }
      // Another thread is writing this slot's fingerprint: a few stores, so spin.
      while (state === 1) state = Atomics.load(ints, b + I_STATE);
      if (Atomics.load(ints, b + I_FP0) === fp0 && Atomics.load(ints, b + I_FP1) === fp1) {
        return s;
      }
    }
    // Slots never go back to empty, so a probe that met no empty slot and no match proves
    // the tag has none: it may take over the first slot whose block is gone.
    if (nowMs === undefined) return -1;
    let spare = -1;
    s = home;
    for (let probe = 0; probe < MAX_PROBE && spare < 0; probe++, s = (s + 1) % this.slots) {
      if (this.reusable(s, nowMs)) spare = s;
    }
    if (spare < 0) return -1;
    const b = spare * INTS;
    if (Atomics.compareExchange(ints, b + I_STATE, 2, 1) !== 2) return this.slotOf(tag);
    // Locked (state 1: lookups spin, nobody takes it over too); still gone?
    if (!this.reusable(spare, nowMs as number)) {
      Atomics.store(ints, b + I_STATE, 2);
      return -1;
    }
    // The owner changes first: a thread that remembered this slot for its old key sees it
    // before spending (take()) or sending a lease for it (epochOf()); a drain() under way
    // (the sweep's) drops what it takes, or took it before the tag changes.
    Atomics.add(ints, b + I_OWNER, 1);
    Atomics.add(ints, b + I_EPOCH, 1);
    Atomics.add(ints, b + I_VER, 1);
    this.evicted = this.drain(spare);
    const f = spare * FLOATS;
    this.floats[f + F_EXPIRES_MS] = 0;
    this.floats[f + F_REFUSED_UNTIL_MS] = 0;
    this.floats[f + F_FRESH_AT_MS] = 0;
    this.floats[f + F_FAILED_AT_MS] = 0;
    Atomics.store(ints, b + I_LEASE, 0);
    Atomics.store(ints, b + I_STARVED, 0);
    Atomics.store(ints, b + I_HOT, 0);
    this.own(spare, tag, fp0, fp1);
    return spare;
  }

  /**
   * What slotOf() drained from a slot it took over (aged-out permits of the old key, to go
   * back to Redis); the caller reads and clears it right after slotOf().
   */
  evicted: Drained | undefined;

  /** Writes `tag` into slot `s`, held in state 1 by this thread, and opens it (state 2). */
  private own(s: number, tag: string, fp0: number, fp1: number): void {
    const b = s * INTS;
    Atomics.store(this.ints, b + I_FP0, fp0);
    Atomics.store(this.ints, b + I_FP1, fp1);
    for (let i = 0; i < tag.length; i++) this.chars[s * TAG_CHARS + i] = tag.charCodeAt(i);
    Atomics.store(this.ints, b + I_TAG_LENGTH, tag.length);
    Atomics.store(this.ints, b + I_STATE, 2);
  }

  /**
   * Whether slot `s`'s block is gone at local time `nowMs`: no permits in hand but aged-out
   * ones, no lease out (a stale claim counts as none), no cached refusal in force.
   */
  private reusable(s: number, nowMs: number): boolean {
    const f = s * FLOATS;
    return (
      nowMs >= this.floats[f + F_EXPIRES_MS]! &&
      this.floats[f + F_REFUSED_UNTIL_MS]! <= nowMs &&
      this.claimLeftMs(s, I_FETCH) === 0 &&
      this.claimLeftMs(s, I_FETCH2) === 0
    );
  }

  /**
   * Takes `permits` from slot `s`'s block if it holds them and has not aged out, and the
   * slot is still `owner`'s (owner(): read when the slot was found).
   */
  take(s: number, permits: number, nowMs: number, owner: number): boolean {
    const i = s * INTS + I_PERMITS;
    let have = Atomics.load(this.ints, i);
    while (have >= permits) {
      // After reading the permits: a new owner's come after its owner changed (slotOf()).
      if (Atomics.load(this.ints, s * INTS + I_OWNER) !== owner) return false;
      if (nowMs >= this.floats[s * FLOATS + F_EXPIRES_MS]!) return false;
      const seen = Atomics.compareExchange(this.ints, i, have, have - permits);
      if (seen === have) return true;
      have = seen;
    }
    return false;
  }

  permits(s: number): number {
    return Atomics.load(this.ints, s * INTS + I_PERMITS);
  }

  /**
   * Empties slot `s`'s block; returns the permits it held, when they were taken and the key
   * they are of, read as one: the permits are taken by a CAS between two reads of I_VER,
   * which everything that replaces what they belong to bumps first (add() for a later
   * window, forget(), a new owner). Changed meanwhile, the permits taken may be a later
   * window's or another key's, and are dropped: given back with the wrong time, old permits
   * would be credited to a window that did not count them (never the safe direction);
   * dropped, they are lost to this process only.
   */
  drain(s: number): Drained | undefined {
    const ints = this.ints;
    const p = s * INTS + I_PERMITS;
    const v = s * INTS + I_VER;
    for (;;) {
      const ver = Atomics.load(ints, v);
      const permits = Atomics.load(ints, p);
      if (permits <= 0) return undefined;
      const takenUs = this.floats[s * FLOATS + F_TAKEN_US]!;
      const tag = this.tagOf(s);
      if (Atomics.load(ints, v) !== ver) continue;
      if (Atomics.compareExchange(ints, p, permits, 0) !== permits) continue; // spent meanwhile
      if (Atomics.load(ints, v) !== ver) return undefined;
      return { permits, takenUs, tag };
    }
  }

  /** True when slot `s` holds permits whose block has aged out. */
  expired(s: number, nowMs: number): boolean {
    return this.permits(s) > 0 && nowMs >= this.floats[s * FLOATS + F_EXPIRES_MS]!;
  }

  /** Slot `s`'s epoch: read before a lease goes out, handed to add() when it lands. */
  epoch(s: number): number {
    return Atomics.load(this.ints, s * INTS + I_EPOCH);
  }

  /**
   * Slot `s`'s epoch for a lease of the key that found it as `owner`, or −1 when the slot
   * has passed to another key since. Read in this order: a lease whose epoch was read after
   * the slot changed owner sees the new owner here; one read before lands in nothing.
   */
  epochOf(s: number, owner: number): number {
    const epoch = Atomics.load(this.ints, s * INTS + I_EPOCH);
    return Atomics.load(this.ints, s * INTS + I_OWNER) === owner ? epoch : -1;
  }

  /**
   * Adds a lease's permits to slot `s`'s block, unless the slot was forgotten (reset())
   * since the lease went out: `epoch` is epoch() read before it. Redis took those permits
   * before the reset, which cleared them: nothing to keep or give back. Returns whether
   * they were added.
   *
   * Permits of two leases of one window (`untilUs`: when it ends, Infinity for buckets and
   * the log) share one taking time and one age-out, the older and the earlier: a give-back
   * never lands in a window later than its permits' (at worst nowhere: the safe direction),
   * and no permit is spent past the window it was counted in. The caller drains held
   * permits that aged out first (they go back as they would have). Leases of two windows
   * never mix: the older window's permits count nowhere once a later one decided.
   */
  add(
    s: number,
    permits: number,
    takenUs: number,
    untilUs: number,
    expiresMs: number,
    epoch: number,
  ): boolean {
    const e = s * INTS + I_EPOCH;
    if (Atomics.load(this.ints, e) !== epoch) return false;
    // The times go first: a thread that sees the permits sees their times.
    const f = s * FLOATS;
    const held = this.permits(s) > 0 ? this.floats[f + F_UNTIL_US]! : undefined;
    // A lease decided in an older window than the permits held (it landed late): that
    // window has ended, as Redis answered from a later one since; its permits count nowhere.
    if (held !== undefined && untilUs < held) return false;
    if (held === untilUs) {
      this.floats[f + F_TAKEN_US] = Math.min(this.floats[f + F_TAKEN_US]!, takenUs);
      this.floats[f + F_EXPIRES_MS] = Math.min(this.floats[f + F_EXPIRES_MS]!, expiresMs);
    } else {
      // Empty, or the permits held are of a window that has ended (this lease was decided
      // in a later one): they go, uncounted anywhere now. What the permits belong to
      // changes: a drain() under way drops what it takes.
      Atomics.add(this.ints, s * INTS + I_VER, 1);
      if (held !== undefined) Atomics.store(this.ints, s * INTS + I_PERMITS, 0);
      this.floats[f + F_TAKEN_US] = takenUs;
      this.floats[f + F_UNTIL_US] = untilUs;
      this.floats[f + F_EXPIRES_MS] = expiresMs;
    }
    Atomics.add(this.ints, s * INTS + I_PERMITS, permits);
    // A forget() in another thread between the check and the add may have emptied the block
    // before they landed: empty it again (a fresh lease landing meanwhile goes with them,
    // unspent: the safe direction).
    if (Atomics.load(this.ints, e) === epoch) return true;
    Atomics.store(this.ints, s * INTS + I_PERMITS, 0);
    return false;
  }

  /** The permits a lease of slot `s` asks for: `block`, or more for a key spent fast. */
  leaseSize(s: number, block: number): number {
    return Atomics.load(this.ints, s * INTS + I_LEASE) || block;
  }

  /** True while a lease of slot `s` is out (a dead fetcher's claim lapses: not then). */
  fetching(s: number): boolean {
    return this.claimLeftMs(s, I_FETCH) > 0 || this.claimLeftMs(s, I_FETCH2) > 0;
  }

  /** Ms until fetch claim `which` of slot `s` lapses; 0 when none is held, or it lapsed. */
  private claimLeftMs(s: number, which: number): number {
    const held = Atomics.load(this.ints, s * INTS + which);
    if (held === 0) return 0;
    return Math.max(0, diff31(held, Date.now() & 0x7fffffff));
  }

  /** Notes that slot `s` ran dry while a lease was out. */
  starve(s: number): void {
    Atomics.store(this.ints, s * INTS + I_STARVED, 1);
    Atomics.store(this.ints, s * INTS + I_HOT, 1);
  }

  /**
   * Grows slot `s`'s lease size as a lease lands, if the key ran dry waiting for it: it is
   * spent faster than a round trip brings `leaseSize` permits, so the next lease doubles (up
   * to `most`). It goes back to `block` when the key's block ages out (resetLease()): every
   * `blockTtlMs` for a key kept busy, at once for one that cooled. Threads growing at once
   * may lose a doubling: a heuristic, always within [block, most].
   */
  grow(s: number, block: number, most: number): void {
    if (Atomics.exchange(this.ints, s * INTS + I_STARVED, 0) !== 1) return;
    const size = this.leaseSize(s, block);
    if (size < most) Atomics.store(this.ints, s * INTS + I_LEASE, grownLease(size, most));
  }

  /** Slot `s`'s leases back to `block` (its block aged out: the key cooled). */
  resetLease(s: number): void {
    Atomics.store(this.ints, s * INTS + I_LEASE, 0);
    Atomics.store(this.ints, s * INTS + I_STARVED, 0);
    Atomics.store(this.ints, s * INTS + I_HOT, 0);
  }

  /**
   * Claims fetch lease `which` (I_FETCH or I_FETCH2) of slot `s`: one fetch at a time per
   * lease. A claim is stale `staleMs` after it was made or last renewed (renewFetch(): its
   * fetcher's thread does, while it waits for the reply), and then anybody's to take over:
   * its fetcher died, or computes without yielding and does not read the reply; the calls
   * waiting for it fetch instead of waiting out their own timeout. Returns the claim's
   * token for renewFetch() and endFetch() (0: not claimed).
   */
  claimFetch(s: number, staleMs: number, which = I_FETCH): number {
    const i = s * INTS + which;
    const now = Date.now();
    const token = (now + staleMs) & 0x7fffffff || 1;
    const held = Atomics.load(this.ints, i);
    if (held !== 0 && diff31(held, now & 0x7fffffff) > 0) return 0;
    return Atomics.compareExchange(this.ints, i, held, token) === held ? token : 0;
  }

  /**
   * Renews fetch lease `which` (I_FETCH, I_FETCH2 or BOTH_AHEAD) of slot `s`, claimed with
   * `token`, for `staleMs` more: its fetcher is alive and waits for the reply. Returns the
   * new token, or 0 when the claim was taken over meanwhile.
   */
  renewFetch(s: number, which: number, token: number, staleMs: number): number {
    const next = (Date.now() + staleMs) & 0x7fffffff || 1;
    if (next === token) return token;
    if (which === BOTH_AHEAD) {
      Atomics.compareExchange(this.ints, s * INTS + I_FETCH2, token, next);
      which = I_FETCH;
    }
    return Atomics.compareExchange(this.ints, s * INTS + which, token, next) === token ? next : 0;
  }

  /**
   * Claims a fetch lease of slot `s` for a lease taken ahead (leases of `size`): the first
   * while no lease is out and a quarter of one or less is in hand, a second while one is out
   * and an eighth or less is left. So a process never has more than two leases out on an
   * eighth of one in hand. Checked again once claimed: of two threads claiming at once, one
   * sees the other's claim and holds itself to the eighth. Returns the claimed field
   * (I_FETCH or I_FETCH2), or 0; the claim's token for endFetch() is then `claimed`.
   *
   * With `pairs`, a hot key (I_HOT: it needed the second lease, or ran dry waiting) claims
   * both at the quarter when both are free, and returns BOTH_AHEAD: the two leases go in one
   * round trip (one script, one write), never a third beside them, on a quarter of one in
   * hand.
   */
  claimAhead(s: number, size: number, staleMs: number, pairs: boolean): number {
    const first = this.claimLeftMs(s, I_FETCH) === 0;
    const which = first ? I_FETCH : I_FETCH2;
    const other = first ? I_FETCH2 : I_FETCH;
    if (!first && this.claimLeftMs(s, I_FETCH2) > 0) return 0; // two out
    if (!this.dueAhead(s, size, other)) return 0;
    const token = this.claimFetch(s, staleMs, which);
    if (token === 0) return 0;
    this.claimed = token;
    if (!this.dueAhead(s, size, other)) {
      // Lost a race to the other lease: let go, waking any thread that saw this claim.
      this.endFetch(s, token, which);
      return 0;
    }
    if (!first) {
      Atomics.store(this.ints, s * INTS + I_HOT, 1);
      return which;
    }
    if (pairs && Atomics.load(this.ints, s * INTS + I_HOT) === 1) {
      // Both claims with one token (endFetch() ends each only if it is still this one's).
      const i = s * INTS + I_FETCH2;
      const held = Atomics.load(this.ints, i);
      const free = held === 0 || diff31(held, Date.now() & 0x7fffffff) <= 0;
      if (free && Atomics.compareExchange(this.ints, i, held, token) === held) return BOTH_AHEAD;
    }
    return which;
  }

  /** The token of the last claim claimAhead() made (read right after it). */
  claimed = 0;

  /** Whether a lease ahead is due for slot `s`, the lease `other` out or not. */
  private dueAhead(s: number, size: number, other: number): boolean {
    return leaseAheadDue(this.permits(s), size, this.claimLeftMs(s, other) > 0);
  }

  /**
   * Ends fetch lease `which` of slot `s` (I_FETCH, I_FETCH2 or BOTH_AHEAD) claimed with
   * `token`, waking waiters. A claim taken over meanwhile (it went stale) is the new
   * fetcher's: left alone.
   */
  endFetch(s: number, token: number, which = I_FETCH): void {
    if (which === BOTH_AHEAD) {
      Atomics.compareExchange(this.ints, s * INTS + I_FETCH2, token, 0);
      which = I_FETCH;
    }
    Atomics.compareExchange(this.ints, s * INTS + which, token, 0);
    Atomics.add(this.ints, s * INTS + I_GEN, 1);
    Atomics.notify(this.ints, s * INTS + I_GEN);
  }

  /**
   * Resolves when a fetch in flight for slot `s` ends (at once if none is), when its claim
   * lapses (its fetcher died: the caller may take it over), or after `maxMs`.
   */
  async waitFetch(s: number, maxMs: number): Promise<void> {
    const i = s * INTS + I_GEN;
    const gen = Atomics.load(this.ints, i);
    const left = Math.max(this.claimLeftMs(s, I_FETCH), this.claimLeftMs(s, I_FETCH2));
    if (left === 0) return;
    const r = Atomics.waitAsync(this.ints, i, gen, Math.min(maxMs, left + 1));
    if (r.async) await r.value;
  }

  refuse(s: number, untilMs: number): void {
    this.floats[s * FLOATS + F_REFUSED_UNTIL_MS] = untilMs;
  }

  /** Empties slot `s` and drops its cached refusal; leases still out land in nothing (add()). */
  forget(s: number): void {
    Atomics.add(this.ints, s * INTS + I_EPOCH, 1);
    Atomics.add(this.ints, s * INTS + I_VER, 1);
    this.floats[s * FLOATS + F_REFUSED_UNTIL_MS] = 0;
    Atomics.store(this.ints, s * INTS + I_PERMITS, 0);
  }

  /** Notes that a fetch of slot `s` found Redis unavailable at `atMs` (Date.now()). */
  failed(s: number, atMs: number): void {
    this.floats[s * FLOATS + F_FAILED_AT_MS] = atMs;
  }

  /** When a fetch of slot `s` last found Redis unavailable (Date.now(); 0: never). */
  failedAtMs(s: number): number {
    return this.floats[s * FLOATS + F_FAILED_AT_MS]!;
  }

  setFreshAt(s: number, atMs: number): void {
    this.floats[s * FLOATS + F_FRESH_AT_MS] = atMs;
  }

  resetAfterMs(s: number, nowMs: number): number {
    return Math.max(0, this.floats[s * FLOATS + F_FRESH_AT_MS]! - nowMs);
  }

  /** Ms left of slot `s`'s cached refusal at `nowMs` (0: none). */
  refusedForMs(s: number, nowMs: number): number {
    const until = this.floats[s * FLOATS + F_REFUSED_UNTIL_MS]!;
    return until > nowMs ? until - nowMs : 0;
  }

  /** Every slot holding permits (close(): all go back). */
  *held(): Generator<number> {
    for (let s = 0; s < this.slots; s++) {
      if (Atomics.load(this.ints, s * INTS + I_STATE) === 2 && this.permits(s) > 0) yield s;
    }
  }
}
