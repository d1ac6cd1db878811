import { decide } from '../engine/decision.js';
import { explain, granted } from '../engine/explain.js';
import {
  FRESH,
  GEN_MASK,
  PAYLOAD_MASK,
  REJECT,
  STAMP_US,
  slotOfHotWord,
} from '../engine/layout.js';
import type { LogPool } from '../engine/log-pool.js';
import { type Key, NO_SLOT } from '../engine/table.js';
import { Limiter } from '../limiter.js';
import { Attached, type CommonOptions, type Decision, type Fresh, readCommon } from '../options.js';
import { integerOption, positiveNumberOption, rangeError, show } from '../validate.js';
import { ALGO_SLIDING_LOG } from './ids.js';
import { MAX_WINDOW_MS, MIN_WINDOW_MS } from './window-bits.js';

/** Largest SlidingLog limit: its ring of 2 × limit entries is 16 bytes each, per slot. */
export const MAX_LOG_LIMIT = 2 ** 16;
// Log positions count modulo 2^27 (bit 27 clear keeps clear of the reserved payloads).
const POS_MASK = 2 ** 27 - 1;

/** Whether log position `a` comes after `b` (positions count modulo 2^27). */
function isLater(a: number, b: number): boolean {
  const d = (a - b) & POS_MASK;
  return d !== 0 && d < 2 ** 26;
}

/** SlidingLog's own options, checked (every backend's SlidingLog reads them here). */
export function readLogOptions(
  owner: string,
  opts: Record<string, unknown>,
): { limit: number; windowMs: number } {
  const limit = integerOption(owner, 'limit', opts.limit, 1, MAX_LOG_LIMIT);
  const windowMs = positiveNumberOption(
    owner,
    'windowMs',
    opts.windowMs,
    MIN_WINDOW_MS,
    MAX_WINDOW_MS,
  );
  return { limit, windowMs };
}

/** The options of `new SlidingLog()`: its own, then those every limiter takes. */
export interface SlidingLogOptions extends CommonOptions {
  /** Permits in any trailing window. Integer, 1 to 65 536. */
  limit: number;
  /** Window length in milliseconds (0.001 to 2^30). */
  windowMs: number;
}

/**
 * SlidingLog: exact. At most `limit` permits in *any* trailing `windowMs`, found by
 * remembering when each of the last `limit` permits was granted.
 *
 * Memory: every slot (1.5 per key in `keys`, plus the default key's) holds a ring of
 * nextPow2(2 × limit) entries of 16 bytes, so about 48 × limit bytes per key or more;
 * limit 100 with 10 000 keys is 60 MiB. Prefer SlidingWindow where an estimate will do.
 *
 * The state word holds the log's head position; one CAS on it admits. The winner then
 * writes each entry's time and sequence number. A reader that finds an entry not yet
 * written (its writer is mid-way, or died) records a time for it that is never earlier
 * than the truth: its own time, or sooner the end of the slot's stamp (see grantedAt), so
 * a lost write makes the log stricter for a window after the key's last grant at most.
 */
export class SlidingLog extends Limiter {
  readonly algorithm = 'SlidingLog';
  /** Permits in any trailing `windowMs`, at most. */
  readonly limit!: number;
  /** @internal */
  private windowUs!: number;
  /** @internal */
  private readonly ring: number;
  /** @internal The log rings, in a buffer of their own (see LogPool). */
  private readonly rings: LogPool;
  /** @internal The slot stamp the last step() saw, before its grant raised it (for admitted()). */
  private stampSeen = 0;
  /** @internal Entries this thread's last give-back attempt marked unwritten (see giveBack()). */
  private marked = { slot: -1, generation: 0, head: 0, count: 0 };

  /** Makes a limiter and its shared state; a TypeError or RangeError names a bad option. */
  constructor(options: SlidingLogOptions) {
    super('SlidingLog', ALGO_SLIDING_LOG, SlidingLog.prepare(options));
    this.configure();
    this.ring = this.layout.logRing;
    this.rings = this.pool!; // logRing > 0: the base made (or attached) the pool
    // The default key's ring is built here once per buffer (attach() finds it built).
    this.opened(() => this.initSlot(0));
  }

  /** Window length in milliseconds (reconfigure() changes it). */
  get windowMs(): number {
    return this.param(1);
  }

  /** @internal */
  override configure(): void {
    (this as { limit: number }).limit = this.param(0);
    this.windowUs = this.param(1) * 1000;
  }

  /**
   * Takes `limit` (up to half the ring each key's log was given: the limit it was created
   * with, rounded up to a power of two) and `windowMs`. The log keeps every grant's time,
   * so the new limit and window apply to the grants already made, exactly.
   */
  override reconfigure(options: { limit?: number; windowMs?: number }): void {
    super.reconfigure(options);
  }

  /** @internal */
  override reconfigurable(): readonly string[] {
    return ['limit', 'windowMs'];
  }

  /** @internal */
  override reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = { limit: this.param(0), windowMs: this.param(1) };
    const { limit, windowMs } = readLogOptions(name, { ...current, ...opts });
    if (2 * limit > this.layout.logRing) {
      throw rangeError(
        `${name}: option "limit" (${show(limit)}) needs a longer log than each key has (${this.layout.logRing} entries: limits up to ${this.layout.logRing / 2}); create a new limiter for a larger limit`,
      );
    }
    return [limit, windowMs];
  }

  /** @internal A state is the log's head; the entries are times: the same under any options. */
  override get convertsStates(): boolean {
    return false;
  }

  /** @internal */
  private static prepare(options: SlidingLogOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('SlidingLog', options, ['limit', 'windowMs']);
    const { limit, windowMs } = readLogOptions('SlidingLog', opts);
    const ring = 2 ** Math.ceil(Math.log2(2 * limit));
    return { ...common, params: [limit, windowMs], logRing: ring };
  }

  /** @internal Byte offset, in the pool, of the entry for log position `pos` of slot `s`. */
  private entry(s: number, pos: number): number {
    return this.rings.start(this.i32, s) + (pos & (this.ring - 1)) * 16;
  }

  /** @internal */
  private slot(): number {
    return slotOfHotWord(this.layout, this.core.last.word);
  }

  /** @internal Positions 0..ring−1 written as long expired; a fresh head is `ring`. */
  override initSlot(s: number): void {
    const start = this.rings.take(this.i32, s);
    const { i32, f64 } = this.rings;
    for (let pos = 0; pos < this.ring; pos++) {
      const byte = start + pos * 16;
      f64[(byte >> 3) + 1] = Number.NEGATIVE_INFINITY;
      Atomics.store(i32, byte >> 2, pos);
    }
  }

  /** @internal */
  private head(state: number): number {
    const p = state & PAYLOAD_MASK;
    return p === FRESH ? this.ring : p;
  }

  /**
   * Relative time (µs since the epoch) at which log position `pos` was granted, or a later
   * one. `stamp` is the slot's stamp, read after the state that holds `pos`.
   * @internal
   */
  private grantedAt(s: number, pos: number, relNow: number, stamp: number): number {
    pos &= POS_MASK;
    const byte = this.entry(s, pos);
    const seqIndex = byte >> 2;
    const timeIndex = (byte >> 3) + 1;
    const i32 = this.rings.i32;
    // Not shared (see Core.shared): no other writer, so plain reads, and `t` is pos's.
    const shared = this.core.shared;
    for (let tries = 0; tries < 3; tries++) {
      const seq = shared ? Atomics.load(i32, seqIndex) : i32[seqIndex]!;
      if (seq === pos) {
        const t = this.rings.f64[timeIndex]!;
        // The sequence is stored after the time: reading it again proves `t` is pos's.
        if (!shared || Atomics.load(i32, seqIndex) === pos) return t;
        continue;
      }
      // A later position already took this entry over: `pos` was granted before an
      // admission that needed a position after it to have expired, so it has expired.
      if (isLater(seq, pos)) return Number.NEGATIVE_INFINITY;
      // Not written yet. While probing future times, assume it was granted at the
      // decision's own time. Otherwise record a time no earlier than its grant (a live
      // writer overwrites it with its own if that is later; a dead one never will): now,
      // or the end of the slot's stamp if sooner — every grant raises the stamp to its own
      // time's before its CAS (decision.ts), so a grant the state holds was made before
      // the stamp ended. A key idle since then finds the entry expired, as it should.
      if (this.core.last.probing) return this.core.last.atUs - this.epochUs;
      const t = Math.min(relNow, (stamp + 1) * STAMP_US);
      this.recordUnwritten(byte, pos, seq, t);
      if (tries === 2) return t;
    }
    return relNow;
  }

  /** @internal Records time `t` for the unwritten entry at `byte`, unless its writer got there first. */
  private recordUnwritten(byte: number, pos: number, seq: number, t: number): void {
    this.rings.f64[(byte >> 3) + 1] = t;
    const i32 = this.rings.i32;
    if (this.core.shared) Atomics.compareExchange(i32, byte >> 2, seq, pos);
    else if (i32[byte >> 2] === seq) i32[byte >> 2] = pos;
  }

  // The same four lines in every class: see Limiter.consume.
  override consume(key?: Key, permits = 1): Decision {
    const a = this.tryAcquire(key, permits);
    const { word: w, state: s, stamp: t, atUs: n } = this.core.last;
    if (!a || w === NO_SLOT) return explain(this.core, this, a, key, permits);
    return granted(this.available(s, t, n), this.limit, this.untilFreshUs(s, t, n));
  }

  // The same call in every class, so that V8 specialises it: see Limiter.tryAcquire.
  override tryAcquire(key?: Key, permits = 1): boolean {
    const core = this.core;
    if (!decide(core, this, this.step, key, permits, core.clock.nowUs())) return false;
    // NO_SLOT: allowed without a slot by whenFull 'allow'.
    if (core.last.word !== NO_SLOT) {
      this.admitted(core.last.word, core.last.prior, core.last.atUs, permits);
    }
    return true;
  }

  /** @internal */
  step(state: number, stamp: number, nowUs: number, permits: number): number {
    const relNow = nowUs - this.epochUs;
    const h = this.head(state);
    this.stampSeen = stamp;
    // After granting, the last `limit` entries must lie in the window: the entry just
    // before them has to have expired.
    if (
      this.grantedAt(this.slot(), h - this.limit + permits - 1, relNow, stamp) >
      relNow - this.windowUs
    ) {
      return REJECT;
    }
    return (state & GEN_MASK) | ((h + permits) & POS_MASK);
  }

  /** @internal */
  override admitted(w: number, before: number, nowUs: number, permits: number): void {
    const s = slotOfHotWord(this.layout, w);
    const h = this.head(before);
    const relNow = nowUs - this.epochUs;
    // Not shared (see Core.shared): plain reads and writes, nobody else reads the ring.
    // (The ring's view is read after entry(), which maps the pool again when it grew.)
    const shared = this.core.shared;
    for (let k = 0; k < permits; k++) {
      const pos = (h + k) & POS_MASK;
      const byte = this.entry(s, pos);
      const timeIndex = (byte >> 3) + 1;
      // After a stall of a whole ring a later position owns the entry: leave it be.
      const i32 = this.rings.i32;
      const seq = shared ? Atomics.load(i32, byte >> 2) : i32[byte >> 2]!;
      if (isLater(seq, pos)) continue;
      // A time already recorded for this position is a reader's (it found the entry
      // unwritten and put its own, later, time) or that of an admission at this position
      // that was refunded while its writer lagged. Keep the later of the two: an earlier
      // time than the admission's would let the entry expire too soon.
      if (seq === pos && this.rings.f64[timeIndex]! >= relNow) continue;
      this.rings.f64[timeIndex] = relNow;
      if (shared) Atomics.store(i32, byte >> 2, pos);
      else i32[byte >> 2] = pos;
    }
    // The entries just before ours should be written by now: one still unwritten is
    // being written this instant, or its writer died (a thread terminated between its CAS
    // and its write, or a give-back between marking and its CAS). Its time is settled
    // here, while the stamp this grant saw still bounds it: a reader long after would
    // have only its own time, and the key would stay one permit short for a window.
    // Normally one load finds the entry before ours written.
    const t = Math.min(relNow, (this.stampSeen + 1) * STAMP_US);
    for (let j = 1; j <= this.limit; j++) {
      const pos = (h - j) & POS_MASK;
      const byte = this.entry(s, pos);
      const i32 = this.rings.i32;
      const seq = shared ? Atomics.load(i32, byte >> 2) : i32[byte >> 2]!;
      if (seq === pos || isLater(seq, pos)) break;
      this.recordUnwritten(byte, pos, seq, t);
    }
  }

  /** @internal */
  giveBack(state: number, stamp: number, nowUs: number, permits: number): number {
    const s = this.slot();
    // Called again when the last attempt's CAS failed: unmark what it marked first.
    if (this.marked.count > 0) this.unmark(s, state);
    if ((state & PAYLOAD_MASK) === FRESH) return state;
    const relNow = nowUs - this.epochUs;
    const h = this.head(state);
    let k = 0;
    // Only entries still inside the window count against the limit; give those back.
    while (k < permits && this.grantedAt(s, h - 1 - k, relNow, stamp) > relNow - this.windowUs) k++;
    if (k === 0) return state;
    // The head moves back over k positions, which the next admissions take again. Mark
    // their entries unwritten (a sequence number "before" the position), so that a new
    // admission writes its own time instead of inheriting the refunded one — the refunded
    // time is earlier and would expire the new permit too soon. Done before the CAS: if
    // the CAS fails, the next attempt unmarks them first; an entry read (or passed by a
    // grant's admitted()) while marked is given a later time, which is only stricter.
    for (let j = 1; j <= k; j++) {
      const pos = (h - j) & POS_MASK;
      const byte = this.entry(s, pos);
      Atomics.store(this.rings.i32, byte >> 2, (pos - this.ring) & POS_MASK);
    }
    const m = this.marked;
    m.slot = s;
    m.generation = state & GEN_MASK;
    m.head = h;
    m.count = k;
    return (state & GEN_MASK) | ((h - k) & POS_MASK);
  }

  /**
   * Puts back the sequence numbers a give-back marked before a CAS that failed: those
   * permits stay taken, and their entries keep their real times (left marked, the next
   * reader would record a later time for them: stricter than the truth for a window).
   * Only while the slot is still this key's and the marked positions still lie below the
   * head; an entry some reader recorded a time for meanwhile keeps that later time.
   * @internal
   */
  private unmark(s: number, state: number): void {
    const m = this.marked;
    const count = m.count;
    m.count = 0;
    if (m.slot !== s || m.generation !== (state & GEN_MASK) || (state & PAYLOAD_MASK) === FRESH) {
      return;
    }
    if (isLater(m.head, this.head(state))) return;
    for (let j = 1; j <= count; j++) {
      const pos = (m.head - j) & POS_MASK;
      const byte = this.entry(s, pos);
      Atomics.compareExchange(this.rings.i32, byte >> 2, (pos - this.ring) & POS_MASK, pos);
    }
  }

  /** @internal */
  override gaveBack(): void {
    // The last attempt's CAS held (its marks stand), or the slot went to another key.
    this.marked.count = 0;
  }

  /** @internal */
  available(state: number, stamp: number, nowUs: number): number {
    if ((state & PAYLOAD_MASK) === FRESH) return this.limit;
    const relNow = nowUs - this.epochUs;
    const s = this.slot();
    const h = this.head(state);
    const expired = (n: number) =>
      this.grantedAt(s, h - this.limit + n - 1, relNow, stamp) <= relNow - this.windowUs;
    // Entries are in time order, so "n more would fit" holds for every n up to some max.
    let lo = 0;
    let hi = this.limit;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (expired(mid)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** @internal */
  untilFreshUs(state: number, stamp: number, nowUs: number): number {
    if ((state & PAYLOAD_MASK) === FRESH) return 0;
    const relNow = nowUs - this.epochUs;
    const newest = this.grantedAt(this.slot(), this.head(state) - 1, relNow, stamp);
    return Math.max(0, newest + this.windowUs - relNow);
  }

  /** @internal */
  retryEstimateUs(state: number, stamp: number, nowUs: number, permits: number): number {
    const relNow = nowUs - this.epochUs;
    const t = this.grantedAt(
      this.slot(),
      this.head(state) - this.limit + permits - 1,
      relNow,
      stamp,
    );
    return t + this.windowUs - relNow;
  }
}
