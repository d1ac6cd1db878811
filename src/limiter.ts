import diagnosticsChannel from 'node:diagnostics_channel';
import { type Clock, ManualClock } from './clock.js';
import { Algorithm } from './engine/algorithm.js';
import { fixedView, openBuffer } from './engine/buffer.js';
import { reconfigureShared, SharedOptions } from './engine/config.js';
import { Core, stampOf, wakeWaiters } from './engine/core.js';
import { type LimiterTotals, tableStatsOf, totalsOf } from './engine/counters.js';
import { giveBackToKey } from './engine/decision.js';
import { stateAt } from './engine/explain.js';
import {
  F64_EPOCH_US,
  FRESH,
  H_CONFIG,
  H_CONTROL,
  H_KEYS,
  H_QUEUE_LIMIT,
  H_QUEUE_ORDER,
  H_WHEN_FULL,
  LAYOUT_VERSION,
  type Layout,
  PAYLOAD_MASK,
  S_ADMITTED,
  S_STAMP,
  W_FRESH,
} from './engine/layout.js';
import { LogPool } from './engine/log-pool.js';
import { WaitQueues } from './engine/queue.js';
import { type Key, NO_SLOT, SlotTable } from './engine/table.js';
import { forEachHotWord, rebuildSlot } from './engine/table-walk.js';
import { WaitingRoom } from './engine/waiting.js';
import { fixedView64, widePayload } from './engine/wide.js';
import { LimiterClosedError } from './errors.js';
import type {
  AcquireOptions,
  AlgorithmName,
  Attached,
  Decision,
  Fresh,
  Lease,
  LimiterHandle,
  QueueOrder,
  Stats,
  WhenFull,
} from './options.js';
import { checkOptionsObject, checkPermits } from './validate.js';

export type { Key } from './engine/table.js';

/**
 * Published (only when someone subscribes) each time a new key finds no slot:
 * `{ limiter, key, whenFull }`. Subscribe with `diagnostics_channel.subscribe(name, f)`.
 */
export const TABLE_FULL_CHANNEL = 'atomic-limiter:table-full';
const tableFullChannel = diagnosticsChannel.channel(TABLE_FULL_CHANNEL);

/**
 * The public face every limiter shares: the buffer, the key table, the clock, the options
 * every thread shares. Each algorithm supplies the hooks of `Algorithm` (engine/algorithm.ts);
 * the decision itself is the engine's (engine/decision.ts).
 */
export abstract class Limiter extends Algorithm {
  /** The limiter's clock. */
  readonly clock: Clock;
  /** Largest permits one call may ask for. */
  abstract readonly limit: number;
  /** The algorithm, as the class's name: what other parts (HTTP headers, Redis) key on. */
  abstract readonly algorithm: AlgorithmName;
  /** Keys the table held room for when created; it grows from there up to `maxKeys`. */
  readonly keys: number;
  /** Keys the table may hold once grown to its ceiling. */
  readonly maxKeys: number;
  /** What a new key gets when the table has no slot for it. */
  readonly whenFull: WhenFull;
  /** Permits that may wait per key in `acquire()`; 0: it never waits. */
  readonly queueLimit: number;
  /** Who `acquire()` serves first (see QueueOrder). */
  readonly queueOrder: QueueOrder;
  /**
   * A fixed-length view of the buffer as far as this thread has mapped it: Atomics on a
   * length-tracking view of a growable buffer cost more, so a thread maps the
   * buffer again (remap) when its table finds a segment beyond its view.
   * @internal
   */
  protected i32: Int32Array;
  /** @internal */
  protected readonly layout: Layout;
  /** @internal */
  protected readonly table: SlotTable;
  /** @internal */
  protected readonly epochUs: number;
  /** @internal */
  protected readonly buffer: SharedArrayBuffer;
  /** @internal */
  protected readonly queues: WaitQueues;
  /** @internal Per-slot memory sized by the options (SlidingLog's rings), when `layout.logRing` > 0. */
  protected readonly pool: LogPool | undefined;
  /** @internal What every decision reads and writes, in one shape for every class (engine/core.ts). */
  readonly core: Core;
  /** @internal The options every thread shares, and this thread's copy. */
  private readonly options: SharedOptions;
  /** @internal acquire()'s waiting line in this thread. */
  private readonly room: WaitingRoom;
  /** @internal The state existed before this instance (a handle, or another process's region). */
  protected readonly attached: boolean;
  /** @internal Lets other processes use a region this one made (see opened()). */
  private readonly publish: () => void;
  /** @internal */
  protected constructor(
    protected readonly owner: string,
    algo: number,
    source: Fresh | Attached,
  ) {
    super();
    const { buffer, layout, logs, attached, shared, publish, liveness, waits } = openBuffer(
      owner,
      algo,
      source,
    );
    this.buffer = buffer;
    this.layout = layout;
    this.attached = attached;
    this.publish = publish;
    this.clock = source.clock;
    this.i32 = fixedView(buffer);
    const f64 = new Float64Array(buffer, 0, 16);
    this.options = new SharedOptions(this.i32, f64);
    if (this.layout.logRing > 0) this.pool = new LogPool(logs!, this.layout);
    this.keys = this.i32[H_KEYS]!;
    this.maxKeys = this.layout.maxKeys;
    this.whenFull = this.i32[H_WHEN_FULL] === 1 ? 'allow' : 'deny';
    this.queueLimit = this.i32[H_QUEUE_LIMIT]!;
    this.queueOrder = this.i32[H_QUEUE_ORDER] === 1 ? 'newest-first' : 'oldest-first';
    this.epochUs = f64[F64_EPOCH_US]!;
    const b64 = fixedView64(buffer);
    this.table = new SlotTable(
      this.i32,
      b64,
      this.layout,
      owner,
      () => this.remap(),
      () => this.syncConfig(),
    );
    this.queues = new WaitQueues(this.i32, this.layout, liveness, waits);
    this.core = new Core(
      this.i32,
      b64,
      this.clock,
      this.epochUs,
      this.param(0), // every algorithm stores its limit (or capacity) first
      this.table,
      this.queues,
      this.queueOrder === 'oldest-first',
      owner,
      shared,
    );
    this.core.syncConfig = () => this.syncConfig();
    this.room = new WaitingRoom(this, this.core, this.queueLimit, waits);
    // Classes with per-slot rings publish after building the default key's (opened()).
    if (this.layout.logRing === 0) publish();
  }

  /**
   * For classes with per-slot rings, at the end of their constructor: builds the default
   * key's ring once per state (`init`, unless attached), then lets other processes in.
   * @internal
   */
  protected opened(init: () => void): void {
    if (!this.attached) init();
    this.publish();
  }

  /**
   * Maps the buffer again as far as it has grown (the table grew, here or in another
   * thread): every view this thread's objects hold is replaced by one over the new length.
   * @internal
   */
  protected remap(): void {
    this.i32 = fixedView(this.buffer);
    const b64 = fixedView64(this.buffer);
    this.table.i32 = this.i32;
    this.table.b64 = b64;
    this.queues.i32 = this.i32;
    this.core.i32 = this.i32;
    this.core.b64 = b64;
    this.remapped();
  }

  /**
   * @internal The algorithm's stored options, in the order the subclass wrote them: this
   * thread's copy, as of the last reconfigure() it has seen (see syncConfig()).
   */
  protected param(k: number): number {
    return this.options.params[k]!;
  }

  /** @internal Makes `params` this thread's options. */
  private useParams(params: number[]): void {
    this.options.params = params;
    this.configure();
    this.core.limit = params[0]!;
  }

  /**
   * @internal Takes up the options another thread's reconfigure() wrote, if any (waiting
   * for it to finish); true when they changed. Only slow paths ask: a reference lookup
   * (the table), a decision that met a moved control word (stands() in engine/decision.ts),
   * a call enter() would refuse. Never the decision's fast path: a reconfigure() sends
   * every thread off it (see reconfigure()).
   */
  syncConfig(): boolean {
    if (!this.options.stale()) return false;
    this.options.read();
    this.useParams(this.options.params);
    return true;
  }

  /**
   * @internal Changes with every reconfigure() (as this thread takes it up): what caches
   * figures derived from the options (HTTP's policy headers) compares it to read them again.
   */
  get optionsVersion(): number {
    this.syncConfig();
    return this.options.version;
  }

  /** @internal See Algorithm.decidedOnOldOptions(). */
  decidedOnOldOptions(): boolean {
    const used = this.options.version;
    if (!this.syncConfig()) return false;
    // A converted slot has a new generation: a decision that used a reference to it came
    // after this thread took up the new options, and one on the state before conversion
    // was made before the reconfigure() (the conversion would have failed its CAS) —
    // unless 16 or more conversions, between the decision's read and its CAS, brought the
    // 4-bit generation round to the same state word: then it may have used old options.
    return !this.convertsStates || this.options.version - used >= 2 * 16;
  }

  /**
   * Changes the options that size the rule (see each class), for every thread and process
   * sharing the limiter: each one's next decision uses them. What was admitted stays
   * counted: each key's state is carried over to the new options (see the class's
   * `describe()`), and waiters in `acquire()` decide again. Validates like the constructor:
   * an option the class does not take here, a value out of range, or one that needs
   * another kind of table than the limiter was created with throws (TypeError,
   * RangeError), and nothing changes.
   */
  reconfigure(options: object): void {
    this.checkOpen();
    const name = `${this.owner}.reconfigure`;
    const opts = checkOptionsObject(name, options, this.reconfigurable());
    const use = (params: number[]) => this.useParams(params);
    if (!reconfigureShared(this.core, this, this.options, name, opts, use)) return;
    // Waiters decide again under the new options.
    forEachHotWord(this.table, (w) => wakeWaiters(this.core, w));
    if (this.clock instanceof ManualClock) this.clock.tick();
  }

  /** Pass to another thread and `attach()` it there: same limiter, same state. */
  get handle(): LimiterHandle {
    // From now on another thread may write this buffer: counters need atomic adds.
    if (!this.core.shared) {
      this.core.shared = true;
      this.becameShared();
    }
    const handle = {
      kind: 'atomic-limiter',
      version: LAYOUT_VERSION,
      buffer: this.buffer,
      clock: this.clock.handle,
    } as const;
    return this.pool ? { ...handle, logs: this.pool.buffer } : handle;
  }

  /**
   * Bytes of shared memory this limiter holds now (every thread shares them): the table's
   * buffer, and SlidingLog's pool of rings.
   */
  get byteLength(): number {
    return this.buffer.byteLength + (this.pool?.buffer.byteLength ?? 0);
  }

  /** Bytes the buffers may grow to (address space reserved; committed as they grow). */
  get maxByteLength(): number {
    return this.layout.totalMaxBytes;
  }

  /**
   * The key table's counters, shared by every thread: slots, keys inserted, idle slots
   * reclaimed for new keys, and new keys that found no slot (`tableFull`).
   */
  tableStats(): {
    slots: number;
    segments: number;
    inserts: number;
    reclaims: number;
    tableFull: number;
  } {
    return tableStatsOf(this.core);
  }

  /** True once `close()` was called on any thread. */
  get closed(): boolean {
    return (Atomics.load(this.i32, H_CONTROL) & 1) !== 0;
  }

  /**
   * Takes `permits` for `key` if the limit allows, at once; never waits, never allocates.
   * With `queueOrder: 'oldest-first'` it never takes permits ahead of waiting callers.
   *
   * Every class writes this as the same call, in a method of its own (e.g. TokenBucket's:
   * `core.wide ? this.tryAcquireWide(…) : decide(core, this, this.step, …)`), so that V8
   * specialises the decision for that class: see decide() in engine/decision.ts.
   */
  abstract tryAcquire(key?: Key, permits?: number): boolean;

  /**
   * Like `tryAcquire`, and explains the outcome.
   *
   * Every class writes this as the same four lines, in a method of its own: tryAcquire(),
   * then `granted(available(…), limit, untilFreshUs(…))` for a grant or explain() for the
   * rest. One method shared by the classes would call their tryAcquire(), available() and
   * untilFreshUs() through the same sites, which V8 turns megamorphic once a program uses
   * more than four classes.
   */
  abstract consume(key?: Key, permits?: number): Decision;

  /**
   * Takes `permits` for `key`, waiting in the key's FIFO queue when they are not there
   * yet. Resolves with a Lease (for `Concurrency`, `lease.release()` gives the permits
   * back; for rate limiters it does nothing). Rejects with `QueueFullError` when the queue
   * has no room (or, with `queueOrder: 'newest-first'`, when a newer waiter evicts this
   * one), `LimiterClosedError` on `close()`, the signal's reason (an `AbortError`) when
   * `signal` aborts, and a `TimeoutError` after `timeoutMs`. A waiter that leaves gives
   * its place back; the one behind it is not skipped.
   */
  acquire(key?: Key, permits = 1, options: AcquireOptions = {}): Promise<Lease> {
    return this.room.acquire(key, permits, options);
  }

  /**
   * Gives `permits` back to `key` (never above its limit), as permits taken just now: a
   * window credits its current window. Unknown keys are a no-op.
   */
  refund(key?: Key, permits = 1): void {
    this.refundTaken(key, permits, Number.NaN);
  }

  /**
   * @internal refund() of permits taken at `takenUs` on this limiter's clock (NaN: now).
   * The chain's rollback, acquire()'s give-back and the cluster's blocks use it, so that a
   * give-back reaching a window after the one the permits came from is dropped.
   */
  refundTaken(key: Key | undefined, permits: number, takenUs: number): void {
    this.checkOpen();
    checkPermits(`${this.owner}.refund`, permits, this.limit);
    giveBackToKey(this.core, this, key, permits, takenUs);
  }

  /** @internal The clock time of this thread's last decision (the chain's rollback reads it). */
  get lastDecisionUs(): number {
    return this.core.last.atUs;
  }

  /**
   * @internal atomic-limiter/metrics: called in this thread when one of its acquire() calls
   * that waited settles, with the wait in ms and whether it got its permits. Undefined
   * (nothing to do) unless a meter observes this limiter here.
   */
  get waitObservers(): Set<(waitedMs: number, granted: boolean) => void> | undefined {
    return this.room.observers;
  }

  /** @internal */
  set waitObservers(observers: Set<(waitedMs: number, granted: boolean) => void> | undefined) {
    this.room.observers = observers;
  }

  /**
   * @internal atomic-limiter/metrics: totals over every key, read when a meter collects
   * (never on the decision path); see LimiterTotals.
   */
  totals(): LimiterTotals {
    return totalsOf(this.core, this);
  }

  /** The key's counters and the permits available now; a key never seen reads as fresh. */
  stats(key?: Key): Stats {
    const nowUs = this.clock.nowUs();
    const ref = this.table.find(key);
    if (ref === NO_SLOT) {
      const fresh = this.core.wide ? W_FRESH : FRESH;
      return { available: this.available(fresh, 0, nowUs), queued: 0, admitted: 0, rejected: 0 };
    }
    const w = ref >>> 4;
    this.core.last.word = w;
    return {
      available: this.available(stateAt(this.core, w), stampOf(this.core, w, nowUs), nowUs),
      queued: this.queues.waitingPermits(w),
      admitted: Atomics.load(this.i32, w + S_ADMITTED) >>> 0,
      rejected: Atomics.load(this.i32, this.table.rejectedWord(w)) >>> 0,
    };
  }

  /** Puts `key` back in its initial state and zeroes its counters. */
  reset(key?: Key): void {
    this.checkOpen();
    const ref = this.table.find(key);
    if (ref === NO_SLOT) return;
    // Under the slot's lock, with the key's fingerprint checked (and the rings, SlidingLog's
    // and SlidingWindow's segments, cleared by initSlot()).
    if (!rebuildSlot(this.table, ref, this, key)) return;
    this.table.retireCounters(ref >>> 4);
    wakeWaiters(this.core, ref >>> 4);
  }

  /**
   * Closes the limiter for every thread sharing it: every later call, on any thread,
   * throws `LimiterClosedError`.
   */
  close(): void {
    Atomics.or(this.i32, H_CONTROL, 1);
    this.queues.closeAll();
    if (this.clock instanceof ManualClock) this.clock.tick();
  }

  /** @internal */
  protected checkOpen(): void {
    // A plain read, as enter()'s: a close() racing with the call may land either side.
    if ((this.i32[H_CONTROL]! & 1) !== 0) throw new LimiterClosedError();
  }

  /** @internal See Algorithm.isIdle(). */
  isIdle(state: number, w: number, nowUs: number): boolean {
    // Options changed and not taken up yet: the state may be written under the new ones.
    if (Atomics.load(this.i32, H_CONFIG) !== this.options.version) return false;
    this.core.last.word = w;
    if (this.i32[w + S_STAMP]! < 0) return false; // waiters queued
    if ((state & PAYLOAD_MASK) === FRESH) return true;
    const s = this.core.wide ? widePayload(state, this.i32[w - 1]!) : state;
    return this.untilFreshUs(s, stampOf(this.core, w, nowUs), nowUs) <= 0;
  }

  /** @internal See Algorithm.tableFull(). */
  tableFull(key: Key | undefined): boolean {
    if (tableFullChannel.hasSubscribers) {
      tableFullChannel.publish({ limiter: this, key, whenFull: this.whenFull });
    }
    return this.whenFull === 'allow';
  }
}
