import { wakeWaiters } from '../engine/core.js';
import { decide, decideWide, swap, update } from '../engine/decision.js';
import { explain, granted } from '../engine/explain.js';
import { Holders } from '../engine/holders.js';
import {
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_CONTROL,
  PAYLOAD_MASK,
  REJECT,
  RESERVED,
  S_STATE,
  W_FRESH,
} from '../engine/layout.js';
import { GEN_SAFE_SPAN, NO_SLOT } from '../engine/table.js';
import { forEachHotWord } from '../engine/table-walk.js';
import { widePayload } from '../engine/wide.js';
import { type Key, Limiter } from '../limiter.js';
import { Attached, type CommonOptions, type Decision, type Fresh, readCommon } from '../options.js';
import {
  checkOptionsObject,
  checkPermits,
  integerOption,
  rangeError,
  show,
  typeError,
} from '../validate.js';
import { ALGO_CONCURRENCY } from './ids.js';

export const MAX_CONCURRENCY = 2 ** 27;
/** The wide table's limit (a 64-bit state): a larger `limit` than MAX_CONCURRENCY chooses it. */
export const MAX_WIDE_CONCURRENCY = 2 ** 31 - 1;

/** The options of `new Concurrency()`: its own, then those every limiter takes. */
export interface ConcurrencyOptions extends CommonOptions {
  /** Permits that may be held at once per key. Integer, 1 to 2^31 − 1 (past 2^27: a wide table). */
  limit: number;
}

/**
 * Concurrency: at most `limit` permits held at once per key. Permits are taken with
 * `tryAcquire` / `consume` and given back with `release(key, permits)`. Time plays no
 * part, so a refusal's `retryAfterMs` is `Infinity`: only a release can help.
 *
 * Permits held by a thread that stops (terminated, or its event loop blocked for 10 s)
 * come back: each thread records what it holds, and heartbeats while it holds anything.
 */
export class Concurrency extends Limiter {
  readonly algorithm = 'Concurrency';
  /** Permits held at once per key, at most. */
  readonly limit!: number;

  /** @internal */
  private readonly holders: Holders;

  /** Makes a limiter and its shared state; a TypeError or RangeError names a bad option. */
  constructor(options: ConcurrencyOptions) {
    super('Concurrency', ALGO_CONCURRENCY, Concurrency.prepare(options));
    this.configure();
    this.holders = new Holders(
      this.i32,
      this.layout,
      this.queues,
      (ref, n) => this.giveBackRef(ref, n),
      this.core.shared,
      () => this.table.mapped(),
    );
  }

  /** @internal */
  override configure(): void {
    (this as { limit: number }).limit = this.param(0);
    // A key may hold up to the largest limit the limiter had (param 1 after a
    // reconfigure() lowered it): release() takes that many.
    this.mostHeld = Math.max(this.param(0), this.param(1));
  }

  /** @internal The most permits one release() may give back (see configure()). */
  private mostHeld = 0;

  /**
   * Takes `limit`. Permits held stay held: a lower limit admits nothing more until
   * releases bring a key under it.
   */
  override reconfigure(options: { limit?: number }): void {
    super.reconfigure(options);
  }

  /** @internal */
  override reconfigurable(): readonly string[] {
    return ['limit'];
  }

  /** @internal */
  override reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const limit = integerOption(name, 'limit', opts.limit ?? this.limit, 1, MAX_WIDE_CONCURRENCY);
    if (limit > MAX_CONCURRENCY && !this.core.wide) {
      throw rangeError(
        `${name}: option "limit" (${limit}) needs a wide table (past ${MAX_CONCURRENCY}), and this limiter was created with a narrow one; create it with such a limit to reconfigure within it`,
      );
    }
    return [limit, Math.max(this.param(1), this.limit, limit)];
  }

  /** @internal A state is the count held: the same under any limit. */
  override get convertsStates(): boolean {
    return false;
  }

  /** @internal */
  override becameShared(): void {
    if (!this.holders.share()) return;
    // Until now this thread was the only one: every permit a slot holds is its own.
    forEachHotWord(this.table, (w) => {
      const s = this.i32[w + S_STATE]!;
      if ((s & PAYLOAD_MASK) === RESERVED) return;
      const held = this.held(this.core.wide ? widePayload(s, this.i32[w - 1]!) : s);
      if (held > 0) this.holders.granted(w * 16 + (s >>> GEN_SHIFT), held);
    });
  }

  /** @internal */
  private static prepare(options: ConcurrencyOptions | Attached): Fresh | Attached {
    if (options instanceof Attached) return options;
    const { opts, common } = readCommon('Concurrency', options, ['limit']);
    const limit = integerOption('Concurrency', 'limit', opts.limit, 1, MAX_WIDE_CONCURRENCY);
    const wide = limit > MAX_CONCURRENCY;
    return { ...common, params: [limit], logRing: 0, holdersPerSlot: 2, wide };
  }

  /** @internal Permits held in `state` (a wide table's payload is the count itself). */
  private held(state: number): number {
    if (this.core.wide) return state === W_FRESH ? 0 : state;
    const p = state & PAYLOAD_MASK;
    return p === FRESH ? 0 : p;
  }

  /** @internal Replaces held count `held` of state word `s` (ext `x`) by `next`; true when it took. */
  private swapHeld(w: number, s: number, x: number, next: number): boolean {
    return swap(this.core, w, s, x, this.core.wide ? next : (s & GEN_MASK) | next);
  }

  /**
   * Returns `permits` held for `key`. Releasing more than the key holds is a bug in the
   * caller and throws a RangeError (nothing is released then). Permits this thread held
   * that were already given back because it looked dead are not given back twice; nor are
   * permits another thread took and handed to this one (released here beyond what this
   * thread took of the key) that came back when their taker died (see holders.ts).
   *
   * `{ handedOver: true }` says the permits were taken by another thread and handed to this
   * one: they are never counted as this thread's own, so the sweep of their taker cannot
   * give them back a second time even while this thread holds permits of its own on the key.
   */
  release(key?: Key, permits = 1, options?: ReleaseOptions): void {
    this.checkOpen();
    checkPermits('Concurrency.release', permits, this.mostHeld);
    const handed = options === undefined ? false : handedOver(options);
    // One lookup serves the ghost check, the swap and the records (this is half of every
    // acquire/release cycle).
    const ref = this.table.find(key);
    if (!this.core.shared && !this.core.wide && ref !== NO_SLOT) {
      // No other thread: no records to keep (see holders.ts), and nothing else writes the
      // word between this read and the store.
      const w = ref >>> 4;
      const s = this.i32[w + S_STATE]!;
      const held = this.held(s);
      if (
        s >>> GEN_SHIFT === (ref & 15) &&
        (s & PAYLOAD_MASK) !== RESERVED &&
        held >= permits &&
        (key === undefined || this.i32[H_CONTROL]! - this.table.epoch < GEN_SAFE_SPAN)
      ) {
        this.i32[w + S_STATE] = (s & GEN_MASK) | (held - permits);
        wakeWaiters(this.core, w);
        return;
      }
    }
    this.releaseFrom(key, permits, ref, handed);
  }

  /** release() from the slot `ref` find() gave: the records, the CAS, and every retry. */
  private releaseFrom(key: Key | undefined, permits: number, found: number, handed: boolean): void {
    let ref = found;
    const rest = ref === NO_SLOT ? permits : permits - this.holders.ghosts(ref, permits, handed);
    if (rest === 0) return;
    const i32 = this.i32;
    const wide = this.core.wide;
    // The slot whose records the permits were taken off, and how many came off this thread's.
    let taken = NO_SLOT;
    let own = 0;
    for (;;) {
      if (ref === NO_SLOT) {
        this.holders.unreleasing(taken, own);
        throw this.overRelease(permits, 0);
      }
      const w = ref >>> 4;
      // Plain reads, as in run(): the CAS in swapHeld() validates them (and while the
      // limiter is not shared, nothing else writes these words).
      const s = i32[w + S_STATE]!;
      if (
        s >>> GEN_SHIFT !== (ref & 15) ||
        (s & PAYLOAD_MASK) === RESERVED ||
        (key !== undefined && i32[H_CONTROL]! - this.table.epoch >= GEN_SAFE_SPAN)
      ) {
        ref = this.table.find(key);
        continue;
      }
      const x = wide ? i32[w - 1]! : 0;
      const held = this.held(wide ? widePayload(s, x) : s);
      if (held < rest) {
        // A wide pair read between the two words' writes by another thread's CAS: read it
        // again rather than refuse on a count nobody stored.
        if (wide && (i32[w + S_STATE] !== s || i32[w - 1] !== x)) continue;
        if (taken !== NO_SLOT) this.holders.unreleasing(taken, own);
        throw this.overRelease(permits, held);
      }
      if (taken !== ref) {
        // Off the records before the CAS: a thread terminated between the two then leaves
        // them short (a permit lost), never over (the dead-holder sweep giving back permits
        // already released).
        if (taken !== NO_SLOT) this.holders.unreleasing(taken, own);
        own = this.holders.releasing(ref, rest, handed);
        taken = ref;
      }
      if (this.swapHeld(w, s, x, held - rest)) {
        wakeWaiters(this.core, w);
        return;
      }
    }
  }

  /** @internal */
  private overRelease(permits: number, held: number): RangeError {
    return rangeError(
      `Concurrency.release: permits (${permits}) exceed the permits held for this key (${held})`,
    );
  }

  /** @internal A Lease from `acquire()` gives its permits back on `release()`, never twice. */
  override releaseLease(key: Key | undefined, permits: number): void {
    this.checkOpen();
    const rest = permits - this.ghostsOf(key, permits);
    if (rest > 0) this.giveBackKey(key, rest);
  }

  /** @internal */
  private ghostsOf(key: Key | undefined, permits: number): number {
    const ref = this.table.find(key);
    return ref === NO_SLOT ? 0 : this.holders.ghosts(ref, permits);
  }

  /**
   * Recorded after the grant's CAS: a thread terminated between the two loses the permits
   * (nobody gives them back), never the other way round (see docs/guarantees.md).
   * @internal
   */
  override admitted(w: number, before: number, _nowUs: number, permits: number): void {
    this.holders.granted(w * 16 + (before >>> GEN_SHIFT), permits);
  }

  /** @internal refund(), a Lease's release, acquire()'s give-back: records first, as in release(). */
  override giveBackKey(key: Key | undefined, permits: number): void {
    const ref = this.table.find(key);
    if (ref === NO_SLOT) return;
    const own = this.holders.releasing(ref, permits);
    let before = 0;
    const next = update(this.core, key, this.clock.nowUs(), (s, stamp) => {
      before = s;
      return this.giveBack(s, stamp, 0, permits);
    });
    const given = next === NO_SLOT ? 0 : this.held(before) - this.held(next);
    const core = this.core;
    const used = given === 0 ? ref : core.last.word * 16 + (core.last.prior >>> GEN_SHIFT);
    if (used !== ref) {
      // The key's slot changed between the lookup and the CAS (rare): its records, after.
      this.holders.unreleasing(ref, own);
      this.holders.releasing(used, given);
    } else if (given < permits) {
      this.holders.unreleasing(ref, Math.min(own, permits - given));
    }
  }

  /** @internal reset(): what the records say this key's threads hold is void with the key's state. */
  override rebuilding(w: number): void {
    this.holders.voidSlot(w);
  }

  /** @internal */
  override onHeartbeat(): void {
    this.holders.reap();
  }

  /** @internal */
  override remapped(): void {
    this.holders.i32 = this.i32;
  }

  /** @internal A dead holder's permits, back to the slot they were taken from. */
  private giveBackRef(ref: number, permits: number): void {
    const w = ref >>> 4;
    // Another thread's record may name a slot of a segment this thread has not mapped yet.
    if (w >= this.i32.length) this.remap();
    for (;;) {
      const s = Atomics.load(this.i32, w + S_STATE);
      // Another generation: the key was reset and its slot reused; nothing to give back.
      if (s >>> GEN_SHIFT !== (ref & 15) || (s & PAYLOAD_MASK) === RESERVED) return;
      const x = this.core.wide ? Atomics.load(this.i32, w - 1) : 0;
      const held = this.held(this.core.wide ? widePayload(s, x) : s);
      if (held === 0) return;
      if (this.swapHeld(w, s, x, Math.max(0, held - permits))) {
        wakeWaiters(this.core, w);
        return;
      }
    }
  }

  // The same four lines in every class: see Limiter.consume.
  override consume(key?: Key, permits = 1): Decision {
    const a = this.tryAcquire(key, permits);
    const { word: w, state: s } = this.core.last; // time plays no part
    if (!a || w === NO_SLOT) return explain(this.core, this, a, key, permits);
    return granted(this.available(s), this.limit, this.untilFreshUs(s));
  }

  /**
   * As in every class (see Limiter.tryAcquire), through take(). A refusal looks for
   * permits of dead threads now and then, and decides again if it found some; consume()
   * calls this too, so it explains the second decision.
   */
  override tryAcquire(key?: Key, permits = 1): boolean {
    return this.take(key, permits) || (this.holders.refused() && this.take(key, permits));
  }

  /** @internal */
  private take(key: Key | undefined, permits: number): boolean {
    const core = this.core;
    if (core.wide) {
      if (!this.tryAcquireWide(key, permits)) return false;
    } else {
      if (!decide(core, this, this.step, key, permits, core.clock.nowUs())) return false;
    }
    // NO_SLOT: allowed without a slot by whenFull 'allow'.
    if (core.last.word !== NO_SLOT) {
      this.admitted(core.last.word, core.last.prior, core.last.atUs, permits);
    }
    return true;
  }

  /** @internal */
  step(state: number, _stamp: number, _nowUs: number, permits: number): number {
    const held = this.held(state);
    if (held + permits > this.limit) return REJECT;
    return (state & GEN_MASK) | (held + permits);
  }

  // The wide table's decision, in this class too: see tryAcquire().
  /** @internal */
  protected tryAcquireWide(key: Key | undefined, permits: number): boolean {
    const core = this.core;
    return decideWide(core, this, this.stepWide, key, permits, core.clock.nowUs());
  }

  /** @internal */
  override stepWide(p: number, _stamp: number, _nowUs: number, permits: number): number {
    const held = p === W_FRESH ? 0 : p;
    return held + permits > this.limit ? REJECT : held + permits;
  }

  /** @internal */
  giveBack(state: number, _stamp: number, _nowUs: number, permits: number): number {
    const held = this.held(state);
    if (held === 0) return state;
    return this.core.wide
      ? Math.max(0, held - permits)
      : (state & GEN_MASK) | Math.max(0, held - permits);
  }

  /** @internal */
  available(state: number): number {
    // Past the limit after a reconfigure() lowered it.
    return Math.max(0, this.limit - this.held(state));
  }

  /** @internal */
  untilFreshUs(state: number): number {
    return this.held(state) === 0 ? 0 : Number.POSITIVE_INFINITY;
  }

  /** @internal */
  retryEstimateUs(): number {
    return Number.POSITIVE_INFINITY;
  }
}

/** The options of `Concurrency.release()`. */
export interface ReleaseOptions {
  /**
   * The permits were taken by another thread, which handed its work (and the permits) to
   * this one. Default false: a release counts first against what this thread took itself.
   */
  handedOver?: boolean;
}

/** `options.handedOver`, checked (unknown options are a TypeError, as everywhere). */
function handedOver(options: ReleaseOptions): boolean {
  const h = checkOptionsObject('Concurrency.release', options, ['handedOver']).handedOver;
  if (h === undefined) return false;
  if (typeof h !== 'boolean') {
    throw typeError(`Concurrency.release: option "handedOver" must be a boolean, got ${show(h)}`);
  }
  return h;
}
