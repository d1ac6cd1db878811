import diagnosticsChannel from 'node:diagnostics_channel';
import { type Clock, ManualClock } from './clock.js';
import { CoarseClock } from './coarse-clock.js';
import { fixedView, openBuffer } from './engine/buffer.js';
import {
  type AttemptMode,
  Core,
  decideWide,
  ENQUEUE,
  enter,
  HEAD,
  run,
  runWide,
  unwrapStamp,
} from './engine/decision.js';
import {
  F64_EPOCH_US,
  F64_PARAMS,
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_CONFIG,
  H_CONTROL,
  H_INSERTS,
  H_KEYS,
  H_QUEUE_LIMIT,
  H_QUEUE_ORDER,
  H_RECLAIMS,
  H_RETIRED_ADMITTED,
  H_RETIRED_REJECTED,
  H_SEGMENTS,
  H_TABLE_FULL,
  H_WHEN_FULL,
  LAYOUT_VERSION,
  type Layout,
  PAYLOAD_MASK,
  REJECT,
  RESERVED,
  S_ADMITTED,
  S_STAMP,
  S_STATE,
  STAMP_MASK,
  STAMP_PER_US,
  slotOfHotWord,
  W_CLOSED,
  W_EVICTED,
  W_FREE,
  W_FRESH,
  W_WAITING,
} from './engine/layout.js';
import { LogPool } from './engine/log-pool.js';
import { HEARTBEAT_MS, MOVED, WaitQueues } from './engine/queue.js';
import { GEN_SAFE_SPAN, type Key, NO_SLOT, SlotTable } from './engine/table.js';
import { cas64, fixedView64, storeWide, wideExt, widePayload, wideState } from './engine/wide.js';
import { LimiterClosedError, QueueFullError } from './errors.js';
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
  Waits,
  WhenFull,
} from './options.js';
import { acquireOptions, checkOptionsObject, permitsError } from './validate.js';

/** updateSlot(): the slot is not the key's (no int32 state or wide payload equals it). */
const SLOT_GONE = -(2 ** 32);

export type { Key } from './engine/table.js';

/** @internal What Limiter.totals() reads for atomic-limiter/metrics (see there). */
export interface LimiterTotals {
  admitted: number;
  rejected: number;
  queued: number;
  held: number;
  active: number;
  slots: number;
}

/**
 * Published (only when someone subscribes) each time a new key finds no slot:
 * `{ limiter, key, whenFull }`. Subscribe with `diagnostics_channel.subscribe(name, f)`.
 */
export const TABLE_FULL_CHANNEL = 'atomic-limiter:table-full';
const tableFullChannel = diagnosticsChannel.channel(TABLE_FULL_CHANNEL);
/**
 * The longest wait retryAfterUs() computes, 2^52 µs (~143 years; a bucket refilled at
 * 10^-6 per second waits longer): beyond it, a refusal says Infinity.
 */
const MAX_RETRY_US = 2 ** 52;
/** A punctual head waiter turns the event loop for the last this many ms of its wait. */
const PUNCTUAL_MS = 1;
/**
 * How long the options' sequence lock may stay taken before another thread takes it over:
 * a reconfigure() whose thread or process died midway (see takeOverConfig()).
 */
const CONFIG_STALE_MS = 5000;
const CONFIG_WAIT_MS = 20;

/** The Decision of a grant (consume()): small, so that each class's consume() inlines it. */
export function granted(remaining: number, limit: number, untilFreshUs: number): Decision {
  return { allowed: true, remaining, limit, retryAfterMs: 0, resetAfterMs: untilFreshUs / 1000 };
}

/**
 * The machinery every limiter shares: the buffer, the key table, the clock, the CAS loop.
 * Each algorithm supplies `step()` (a pure function of state, stamp, time and permits)
 * and the few functions that explain a state.
 */
export abstract class Limiter {
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
   * length-tracking view of a growable buffer cost twice as much, so a thread maps the
   * buffer again (remap) when its table finds a segment beyond its view.
   * @internal
   */
  protected i32: Int32Array;
  /** @internal */
  protected readonly f64: Float64Array;
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
  /** @internal What every decision reads and writes, in one shape for every class (decision.ts). */
  protected readonly core: Core;
  /** @internal This thread's pending acquire() calls on this limiter. */
  private readonly waiting = new Set<Waiter>();
  /** @internal This thread's copy of the options (F64_PARAMS), read when H_CONFIG was `configVersion`. */
  private params: number[] = [];
  /** @internal */
  private configVersion = 0;
  /** @internal True while this thread runs reconfigure() (it holds the options' lock). */
  private reconfiguring = false;
  /** @internal */
  private heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  /** @internal The state existed before this instance (a handle, or another process's region). */
  protected readonly attached: boolean;
  /** @internal Lets other processes use a region this one made (see opened()). */
  private readonly publish: () => void;
  /** @internal Waiting across processes (host memory); Atomics.waitAsync otherwise. */
  private readonly waits: Waits | undefined;
  /** @internal */
  protected constructor(
    protected readonly owner: string,
    algo: number,
    source: Fresh | Attached,
  ) {
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
    this.f64 = new Float64Array(buffer, 0, 16);
    this.readConfig();
    if (this.layout.logRing > 0) this.pool = new LogPool(logs!, this.layout);
    this.keys = this.i32[H_KEYS]!;
    this.maxKeys = this.layout.maxKeys;
    this.whenFull = this.i32[H_WHEN_FULL] === 1 ? 'allow' : 'deny';
    this.queueLimit = this.i32[H_QUEUE_LIMIT]!;
    this.queueOrder = this.i32[H_QUEUE_ORDER] === 1 ? 'newest-first' : 'oldest-first';
    this.epochUs = this.f64[F64_EPOCH_US]!;
    const b64 = fixedView64(buffer);
    this.table = new SlotTable(
      this.i32,
      b64,
      this.layout,
      owner,
      () => this.remap(),
      () => this.syncConfig(),
    );
    this.waits = waits;
    this.queues = new WaitQueues(this.i32, this.layout, this.table, liveness, waits);
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

  /** @internal Hook after remap() (views an algorithm keeps of its own). */
  protected remapped(): void {}

  /**
   * Hook when the `handle` is first read (see Core.shared), before any other thread can
   * reach the buffer: what this thread kept in plain fields goes where others see it.
   * @internal
   */
  protected becameShared(): void {}

  /**
   * @internal The algorithm's stored options, in the order the subclass wrote them: this
   * thread's copy, as of the last reconfigure() it has seen (see syncConfig()).
   */
  protected param(k: number): number {
    return this.params[k]!;
  }

  /**
   * @internal Recomputes what the class derives from its options (param()): in its constructor, and
   * again whenever this thread takes up options another reconfigure() wrote.
   */
  protected configure(): void {}

  /** @internal Reads the options under their sequence lock (waiting out a reconfigure() under way). */
  private readConfig(): void {
    const i32 = this.i32;
    let waits = 0;
    for (;;) {
      const v = Atomics.load(i32, H_CONFIG);
      if ((v & 1) !== 0) {
        waits = this.waitConfig(v, waits);
        continue;
      }
      const params = Array.from(this.f64.subarray(F64_PARAMS, F64_EPOCH_US));
      if (Atomics.load(i32, H_CONFIG) !== v) continue;
      this.params = params;
      this.configVersion = v;
      return;
    }
  }

  /**
   * Waits for a reconfigure() under way (the lock word at odd `v`); `waits` counts the
   * waits already spent on that same value. A lock held past CONFIG_STALE_MS belongs to a
   * reconfigure() whose thread or process died midway: it is released as it stands — the
   * options in the header are whole numbers each, old or new, and each slot was converted
   * by one CAS or not at all — and every thread is sent off the fast path to take them up.
   * @internal
   */
  private waitConfig(v: number, waits: number): number {
    const i32 = this.i32;
    if (Atomics.wait(i32, H_CONFIG, v, CONFIG_WAIT_MS) !== 'timed-out') return 0;
    if ((waits + 1) * CONFIG_WAIT_MS < CONFIG_STALE_MS) return waits + 1;
    if (Atomics.compareExchange(i32, H_CONFIG, v, v + 1) === v) {
      Atomics.add(i32, H_CONTROL, GEN_SAFE_SPAN);
      Atomics.notify(i32, H_CONFIG);
    }
    return 0;
  }

  /** @internal Makes `params` this thread's options. */
  private useParams(params: number[]): void {
    this.params = params;
    this.configure();
    this.core.limit = params[0]!;
  }

  /**
   * @internal Takes up the options another thread's reconfigure() wrote, if any (waiting
   * for it to finish); true when they changed. Only slow paths ask: a reference lookup
   * (the table), a decision that met a moved control word (stands() in decision.ts), a call
   * enter() would refuse. Never the decision's fast path: a reconfigure() sends every
   * thread off it (see reconfigure()).
   */
  syncConfig(): boolean {
    if (this.reconfiguring || Atomics.load(this.i32, H_CONFIG) === this.configVersion) {
      return false;
    }
    this.readConfig();
    this.useParams(this.params);
    return true;
  }

  /**
   * @internal Changes with every reconfigure() (as this thread takes it up): what caches
   * figures derived from the options (HTTP's policy headers) compares it to read them again.
   */
  get optionsVersion(): number {
    this.syncConfig();
    return this.configVersion;
  }

  /** @internal See Algorithm.decidedOnOldOptions() in decision.ts. */
  decidedOnOldOptions(): boolean {
    // A converted slot has a new generation: a decision that used a reference to it came
    // after this thread took up the new options, and one on the state before conversion
    // was made before the reconfigure() (the conversion would have failed its CAS).
    return this.syncConfig() && !this.convertsStates;
  }

  // ---- reconfigure --------------------------------------------------------------------

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
    const i32 = this.i32;
    let v: number;
    let waits = 0;
    for (;;) {
      v = Atomics.load(i32, H_CONFIG);
      if ((v & 1) !== 0) waits = this.waitConfig(v, waits);
      else if (Atomics.compareExchange(i32, H_CONFIG, v, v + 1) === v) break;
    }
    this.reconfiguring = true;
    let done = v;
    try {
      // The options as they are (this thread may not have taken up the last change yet).
      const old = Array.from(this.f64.subarray(F64_PARAMS, F64_EPOCH_US));
      if (this.configVersion !== v) {
        this.useParams(old);
        this.configVersion = v;
      }
      const next = this.reconfigured(name, opts);
      while (next.length < old.length) next.push(old[next.length]!);
      if (next.every((p, k) => p === old[k])) return;
      next.forEach((p, k) => {
        this.f64[F64_PARAMS + k] = p;
      });
      if (this.convertsStates) this.convertAll(old, next);
      else this.useParams(next);
      // Every thread's next decision leaves the fast path (see stands() in decision.ts) and
      // clears its key cache; and, as each slot was bumped at most once, the count of
      // generation bumps the control word keeps still bounds every slot's.
      Atomics.add(i32, H_CONTROL, GEN_SAFE_SPAN);
      done = v + 2;
    } finally {
      this.reconfiguring = false;
      this.configVersion = done;
      Atomics.store(i32, H_CONFIG, done);
      Atomics.notify(i32, H_CONFIG);
    }
    // Waiters decide again under the new options.
    this.table.forEachHotWord((w) => this.wakeWaiters(w));
    if (this.clock instanceof ManualClock) this.clock.tick();
  }

  /** @internal The options reconfigure() takes (the class's own options that size the rule). */
  protected reconfigurable(): readonly string[] {
    return [];
  }

  /**
   * @internal The options after `opts` (checked: names known) replace some of them: validated as the
   * constructor does, and refused when the table the limiter was created with cannot hold
   * them. Any option `opts` lacks keeps its value (param()).
   */
  protected reconfigured(_name: string, _opts: Record<string, unknown>): number[] {
    return [...this.params];
  }

  /**
   * @internal Whether a slot's state means something else under other options (bucket units, window
   * fields), so that reconfigure() rewrites every slot's state (see describe()). When not
   * (Concurrency's count, SlidingLog's head), the states stay as they are.
   */
  protected get convertsStates(): boolean {
    return true;
  }

  /**
   * @internal What a state amounts to, in terms that do not depend on the options (tokens owed, a
   * window's start and count), read with the options it was written under; undefined for
   * a state as good as fresh. restate() writes it back under the new options.
   */
  protected describe(_state: number, _stamp: number, _nowUs: number): number[] | undefined {
    return undefined;
  }

  /** @internal The state (a wide table's payload) carrying `d` (from describe()) under the new options. */
  protected restate(_d: number[], _nowUs: number): number {
    return this.core.wide ? W_FRESH : FRESH;
  }

  /**
   * Converts every slot's state from options `old` to `next`, under each stripe's lock, a
   * slot at a time RESERVED (decisions meeting it look the key up again, and wait on the
   * stripe lock), and bumps its generation: a thread whose reference predates the
   * conversion misses the slot, looks it up again, and takes up the new options first
   * (syncConfig()); none steps a converted state with the old options.
   * @internal
   */
  private convertAll(old: number[], next: number[]): void {
    const wide = this.core.wide;
    this.table.forEachLockedStripe((words) => {
      const i32 = this.i32;
      const nowUs = this.clock.nowUs();
      const stampNow = Math.floor((nowUs - this.epochUs) * STAMP_PER_US);
      this.useParams(old);
      const seen: number[] = [];
      const plans: (number[] | undefined)[] = [];
      for (const w of words) {
        for (;;) {
          const s = Atomics.load(i32, w + S_STATE);
          // A slot a dead inserter left reserved: voided with a new generation by the next.
          if ((s & PAYLOAD_MASK) === RESERVED) break;
          if (Atomics.compareExchange(i32, w + S_STATE, s, (s & GEN_MASK) | RESERVED) !== s) {
            continue;
          }
          const p = wide ? widePayload(s, Atomics.load(i32, w - 1)) : s;
          const fresh = (s & PAYLOAD_MASK) === FRESH;
          this.core.lastWord = w;
          seen.push(w, s);
          plans.push(fresh ? undefined : this.describe(p, this.stampOf(w, nowUs), nowUs));
          break;
        }
      }
      this.useParams(next);
      for (let k = 0; k < plans.length; k++) {
        const w = seen[2 * k]!;
        const gen = (((seen[2 * k + 1]! >>> GEN_SHIFT) + 1) & 15) << GEN_SHIFT;
        const d = plans[k];
        if (d === undefined) {
          Atomics.store(i32, w + S_STATE, gen | FRESH);
          continue;
        }
        // The new state is written relative to a stamp of now (only ever raised).
        for (;;) {
          const raw = Atomics.load(i32, w + S_STAMP);
          if (unwrapStamp(raw, stampNow) >= stampNow) break;
          const raised = (stampNow & STAMP_MASK) | (raw & ~STAMP_MASK);
          if (Atomics.compareExchange(i32, w + S_STAMP, raw, raised) === raw) break;
        }
        this.core.lastWord = w;
        const p = this.restate(d, nowUs);
        if (wide) {
          Atomics.store(i32, w - 1, wideExt(p));
          Atomics.store(i32, w + S_STATE, wideState(gen, p));
        } else {
          Atomics.store(i32, w + S_STATE, gen | (p & PAYLOAD_MASK));
        }
      }
    });
    this.useParams(next);
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
    const i32 = this.i32;
    return {
      slots: this.table.slotCount(),
      segments: Atomics.load(i32, H_SEGMENTS),
      inserts: Atomics.load(i32, H_INSERTS) >>> 0,
      reclaims: Atomics.load(i32, H_RECLAIMS) >>> 0,
      tableFull: Atomics.load(i32, H_TABLE_FULL) >>> 0,
    };
  }

  /** True once `close()` was called on any thread. */
  get closed(): boolean {
    return (Atomics.load(this.i32, H_CONTROL) & 1) !== 0;
  }

  // ---- what each algorithm provides ----------------------------------------------
  //
  // "state" below is the slot's state word, or in a wide table (layout.wide) its payload:
  // an integer below 2^53, or W_FRESH (see WIDE_LOW_BITS in layout.ts). Wide tables
  // decide with stepWide() (and stepQueuedWide()); every other method serves both kinds,
  // reading `this.core.wide` to tell them apart.

  /**
   * The state after granting `permits` at `nowUs`, or REJECT. Pure: reads the state
   * word's payload (decoded relative to `stamp`), never shared memory it does not own.
   * Must keep the generation bits of `state`.
   * @internal
   */
  protected abstract step(state: number, stamp: number, nowUs: number, permits: number): number;
  /**
   * The state after giving back `permits` that were taken at `takenUs` (never above the
   * limit), or `state` itself. Windows credit the window the permits were taken in and drop
   * a give-back whose window has passed: crediting a newer window would over-admit.
   * @internal
   */
  protected abstract giveBack(
    state: number,
    stamp: number,
    nowUs: number,
    permits: number,
    takenUs: number,
  ): number;
  /** @internal Permits grantable now from `state`. */
  protected abstract available(state: number, stamp: number, nowUs: number): number;
  /** @internal Microseconds until `state` is equivalent to a fresh one (0 if it is). */
  protected abstract untilFreshUs(state: number, stamp: number, nowUs: number): number;
  /** @internal A first guess, in µs from `nowUs`, of when `permits` could be granted; refined exactly. */
  protected abstract retryEstimateUs(
    state: number,
    stamp: number,
    nowUs: number,
    permits: number,
  ): number;

  /** @internal */
  isIdle(state: number, w: number, nowUs: number): boolean {
    // Options changed and not taken up yet: the state may be written under the new ones.
    if (Atomics.load(this.i32, H_CONFIG) !== this.configVersion) return false;
    this.core.lastWord = w;
    if (this.i32[w + S_STAMP]! < 0) return false; // waiters queued
    if ((state & PAYLOAD_MASK) === FRESH) return true;
    const s = this.core.wide ? widePayload(state, this.i32[w - 1]!) : state;
    return this.untilFreshUs(s, this.stampOf(w, nowUs), nowUs) <= 0;
  }

  /**
   * The wide table's step (see stepWide in decision.ts): the payload after granting
   * `permits`, or REJECT. Classes whose options can choose a wide table override it.
   * @internal
   */
  protected stepWide(_p: number, _stamp: number, _nowUs: number, _permits: number): number {
    throw new Error(`${this.owner}: no wide table`);
  }

  /** @internal stepQueued() for a wide table. */
  protected stepQueuedWide(p: number, stamp: number, nowUs: number, permits: number): number {
    return this.stepWide(p, stamp, nowUs, permits);
  }

  /** @internal The decision for a wide table: tryAcquire() calls it when `core.wide`. */
  protected tryAcquireWide(key: Key | undefined, permits: number): boolean {
    const core = this.core;
    return decideWide(core, this, this.stepWide, key, permits, core.clock.nowUs());
  }

  /** @internal What the algorithm reads for slot word `w` now: its state word, or wide payload. */
  protected stateAt(w: number): number {
    const s = Atomics.load(this.i32, w + S_STATE);
    return this.core.wide ? widePayload(s, Atomics.load(this.i32, w - 1)) : s;
  }

  /** @internal */
  initSlot(_s: number): void {}

  /** @internal */
  rebuilding(_w: number): void {}

  /**
   * step() for the head of the wait queue (`core.queuedSinceUs` tells when it was refused
   * and queued). Every algorithm here grants the head as any caller, at the time it wakes.
   * @internal
   */
  protected stepQueued(state: number, stamp: number, nowUs: number, permits: number): number {
    return this.step(state, stamp, nowUs, permits);
  }

  /**
   * @internal Hook after a grant by CAS (SlidingLog writes its entries here, Concurrency
   * its holder record), run by whoever called run(): `before` is the state replaced.
   * @internal
   */
  admitted(_w: number, _before: number, _nowUs: number, _permits: number): void {}

  // ---- the decision path --------------------------------------------------------------

  /**
   * Takes `permits` for `key` if the limit allows, at once; never waits, never allocates.
   * With `queueOrder: 'oldest-first'` it never takes permits ahead of waiting callers.
   *
   * Every class writes this as the same call, in a method of its own (e.g. Gcra's:
   * `core.wide ? this.tryAcquireWide(…) : decide(core, this, this.step, …)`), so that V8
   * specialises the decision for that class: see decide().
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

  /** @internal consume()'s Decision on a refusal, or on a key that got no slot (`whenFull` decided). */
  protected explain(allowed: boolean, key: Key | undefined, permits: number): Decision {
    const core = this.core;
    const nowUs = core.decisionUs;
    if (core.lastWord === NO_SLOT) return this.tableFullDecision(allowed, key!);
    const state = core.lastState;
    const stamp = core.lastStamp;
    let remaining = this.available(state, stamp, nowUs);
    // Waiters queued ahead (FIFO) take the permits first, whether they are there or not yet:
    // what is left is what they leave, and the wait is until theirs and then these are due.
    const queued = core.fifo ? this.queues.waitingPermits(core.lastWord) : 0;
    let retryUs: number;
    if (queued > 0) {
      remaining = Math.max(0, remaining - queued);
      retryUs = this.retryBehindUs(state, stamp, nowUs, queued, permits);
    } else {
      retryUs = this.retryAfterUs(state, stamp, nowUs, permits);
    }
    return {
      allowed: false,
      remaining,
      limit: this.limit,
      retryAfterMs: retryUs / 1000,
      resetAfterMs: this.untilFreshUs(state, stamp, nowUs) / 1000,
      reason: 'limited',
    };
  }

  /** @internal A key with no slot, allowed or refused by `whenFull`. */
  private tableFullDecision(allowed: boolean, key: Key): Decision {
    return {
      allowed,
      remaining: 0,
      limit: this.limit,
      retryAfterMs: allowed ? 0 : this.tableFullRetryUs(key, this.core.decisionUs) / 1000,
      resetAfterMs: 0,
      reason: 'table-full',
    };
  }

  /** @internal A decision for acquire(): its first try, or the head waiter's turn. */
  private attempt(key: Key | undefined, permits: number, nowUs: number, mode: AttemptMode) {
    const core = this.core;
    const ref = enter(core, this, key, permits, nowUs);
    if (
      !(core.wide
        ? runWide(
            core,
            this,
            mode === HEAD ? this.stepQueuedWide : this.stepWide,
            ref,
            permits,
            key,
            mode,
          )
        : run(core, this, mode === HEAD ? this.stepQueued : this.step, ref, permits, key, mode))
    ) {
      return false;
    }
    // NO_SLOT: allowed without a slot by whenFull 'allow'.
    if (core.lastWord !== NO_SLOT) this.admitted(core.lastWord, core.priorState, nowUs, permits);
    return true;
  }

  /** @internal A new key found no slot: report it, and decide by `whenFull`. */
  tableFull(key: Key | undefined): boolean {
    if (tableFullChannel.hasSubscribers) {
      tableFullChannel.publish({ limiter: this, key, whenFull: this.whenFull });
    }
    return this.whenFull === 'allow';
  }

  /**
   * When a slot for `key` may be free: the soonest time one of its candidate slots
   * returns to its initial state (and so can be reclaimed). Whole µs, finite.
   * @internal
   */
  private tableFullRetryUs(key: Key, nowUs: number): number {
    const us = this.table.soonestIdleUs(key, (_state, w) => {
      this.core.lastWord = w;
      return this.untilFreshUs(this.stateAt(w), this.stampOf(w, nowUs), nowUs);
    });
    this.core.lastWord = NO_SLOT;
    // None frees by time alone (Concurrency slots held): only a release can help.
    return Number.isFinite(us) ? Math.max(1, Math.ceil(us)) : Number.POSITIVE_INFINITY;
  }

  /**
   * The wait in whole µs for `permits` behind `queued` permits waiting ahead. Here the
   * least time at which the queue's permits and these fit in one grant (at most the
   * limit's worth: past it, the least the queue ahead takes to drain); algorithms whose
   * state is a time line (GCRA) charge the queue to it and answer exactly.
   * @internal
   */
  protected retryBehindUs(
    state: number,
    stamp: number,
    nowUs: number,
    queued: number,
    permits: number,
  ): number {
    return this.retryAfterUs(state, stamp, nowUs, Math.min(this.limit, queued + permits));
  }

  /**
   * Exact wait in whole µs: step succeeds at now + r and fails at now + r − 1. Infinity past
   * MAX_RETRY_US, where whole µs stop being exact doubles (a search there would not end).
   * @internal
   */
  protected retryAfterUs(state: number, stamp: number, nowUs: number, permits: number): number {
    const guess = this.retryEstimateUs(state, stamp, nowUs, permits);
    if (!(guess <= MAX_RETRY_US)) return Number.POSITIVE_INFINITY;
    const step = this.core.wide ? this.stepWide : this.step;
    const ok = (r: number) => step.call(this, state, stamp, nowUs + r, permits) !== REJECT;
    this.core.probing = true;
    try {
      let hi = Math.max(0, Math.ceil(guess));
      let lo = 0;
      if (ok(hi)) {
        if (hi === 0 || !ok(hi - 1)) return hi;
      } else {
        // The estimate was short (rounding): search upwards, doubling.
        let step = 1;
        do {
          lo = hi + 1;
          hi += step;
          step *= 2;
          if (hi > MAX_RETRY_US) return Number.POSITIVE_INFINITY;
        } while (!ok(hi));
      }
      while (lo < hi) {
        const mid = Math.floor((lo + hi) / 2);
        if (ok(mid)) hi = mid;
        else lo = mid + 1;
      }
      return hi;
    } finally {
      this.core.probing = false;
    }
  }

  // ---- waiting ------------------------------------------------------------------------

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
    try {
      const { signal, timeoutMs } = acquireOptions(this.owner, options);
      if (signal?.aborted) return Promise.reject(signal.reason);
      let w = NO_SLOT;
      let r = MOVED;
      while (r === MOVED) {
        if (this.attempt(key, permits, this.clock.nowUs(), ENQUEUE)) {
          // Granted with no slot (whenFull: 'allow'): nothing was taken, nothing to give back.
          if (this.core.lastWord === NO_SLOT) return Promise.resolve(NO_OP_LEASE);
          return Promise.resolve(this.leaseFor(key, permits));
        }
        if (this.core.lastWord === NO_SLOT) {
          throw new QueueFullError(
            `${this.owner}: no slot for this key: every candidate slot holds an active key (option "keys")`,
          );
        }
        w = this.core.lastWord;
        try {
          const queueLimit = this.effectiveQueueLimit();
          if (queueLimit === 0) {
            throw new QueueFullError(
              `${this.owner}: option "queueLimit" is 0, so acquire() never waits`,
            );
          }
          // MOVED: the slot went to another key between the attempt and the queue; the
          // waiter must queue where the key is now, so try again from the lookup.
          r = this.queues.enqueue(
            w,
            permits,
            queueLimit,
            !this.core.fifo,
            key === undefined ? -1 : this.lastGeneration(),
            this.table.epoch,
          );
          // 'newest-first' may have evicted the head waiter, which under a ManualClock
          // listens for the clock's ticks alone (its time moves only by advance()/set()).
          if (!this.core.fifo && this.clock instanceof ManualClock) this.clock.tick();
        } catch (error) {
          Atomics.add(this.i32, this.table.rejectedWord(w), permits); // refused: no room to wait
          throw error;
        }
      }
      return new Promise<Lease>((resolve, reject) => {
        const x: Waiter = {
          key,
          permits,
          sinceUs: this.core.decisionUs,
          w,
          r,
          id: this.queues.id(r),
          resolve,
          reject,
          done: false,
          signal,
          timer: undefined,
          onAbort: undefined,
        };
        if (signal) {
          x.onAbort = () => this.leaveQueue(x, signal.reason);
          signal.addEventListener('abort', x.onAbort, { once: true });
        }
        if (timeoutMs !== undefined) {
          x.timer = setTimeout(
            () => this.leaveQueue(x, new DOMException('The operation timed out.', 'TimeoutError')),
            timeoutMs,
          );
        }
        this.track(x);
        this.pump(x);
      });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** @internal The generation of the slot the last decision read (the state word it read). */
  private lastGeneration(): number {
    return this.core.priorState >>> GEN_SHIFT;
  }

  /**
   * Whether the head waiter must wake at its due time to the microsecond rather than the
   * millisecond: a rate whose waiters are granted one after another (GCRA) loses each
   * wake-up's lateness for good (it is never made up: see Gcra), so a late wake-up costs
   * rate. Such a head waits the last PUNCTUAL_MS by turning the event loop.
   * @internal
   */
  protected punctual(_permits: number): boolean {
    return false;
  }

  /** @internal The queue limit in permits (LeakyBucket: its capacity). */
  protected effectiveQueueLimit(): number {
    return this.queueLimit;
  }

  /** @internal */
  private leaseFor(key: Key | undefined, permits: number): Lease {
    return this.releasable ? new HeldLease(this, key, permits) : NO_OP_LEASE;
  }

  /** @internal Whether a Lease gives its permits back on release (Concurrency). */
  protected get releasable(): boolean {
    return false;
  }

  /** @internal Gives a Concurrency lease's permits back. */
  giveLeaseBack(key: Key | undefined, permits: number): void {
    this.refund(key, permits);
  }

  /** @internal Runs a waiter until it parks (Atomics.waitAsync) or settles. */
  private pump(x: Waiter): void {
    try {
      this.pumpOnce(x);
    } catch (error) {
      // close() from another thread between our checks and attempt() makes attempt()
      // throw; whatever it is, the waiter settles instead of hanging.
      this.leaveQueue(x, error);
    }
  }

  /** @internal */
  private pumpOnce(x: Waiter): void {
    const i32 = this.i32;
    const manual = this.clock instanceof ManualClock ? this.clock : undefined;
    for (let spins = 0; !x.done; spins++) {
      const status = this.queues.status(x.r);
      const ours = this.queues.id(x.r) === x.id;
      if ((Atomics.load(i32, H_CONTROL) & 1) !== 0 || (ours && status === W_CLOSED)) {
        this.leaveQueue(x, new LimiterClosedError());
        return;
      }
      if (!ours || status === W_EVICTED) {
        this.settle(x, ours ? this.evictedError() : this.skippedError());
        return;
      }
      // Read the words we may park on before looking: a wake-up after this read changes
      // them, so waitAsync returns at once instead of missing it.
      const futex = this.queues.futex(x.r);
      const seen = Atomics.load(i32, futex);
      const tick = manual?.tickWord;
      const tickSeen = tick ? Atomics.load(tick.words, tick.index) : 0;
      let timeoutMs = Number.POSITIVE_INFINITY;
      let head = false;
      if (this.queues.isHead(x.w, x.r)) {
        head = true;
        const nowUs = this.clock.nowUs();
        this.core.queuedSinceUs = x.sinceUs;
        if (this.attempt(x.key, x.permits, nowUs, HEAD)) {
          const was = this.queues.leave(x.w, x.r, x.id);
          if (was === W_WAITING) {
            this.settle(x, null, this.leaseFor(x.key, x.permits));
            return;
          }
          // Evicted, closed or swept while taking them: exactly one outcome, so give them
          // back.
          this.giveBackUnchecked(x.key, x.permits, nowUs);
          this.settle(
            x,
            was === W_EVICTED
              ? this.evictedError()
              : was === W_FREE
                ? this.skippedError()
                : new LimiterClosedError(),
          );
          return;
        }
        timeoutMs =
          this.retryAfterUs(this.core.lastState, this.core.lastStamp, nowUs, x.permits) / 1000;
        // A coarse clock moves once per resolution: waiting less would wake to the same
        // time and wait again, spinning until its next tick.
        if (this.clock instanceof CoarseClock) {
          timeoutMs = Math.max(timeoutMs, this.clock.resolutionMs);
        } else if (!manual && this.punctual(x.permits)) {
          // A timed wait rounds to whole milliseconds, early or late: it ends PUNCTUAL_MS
          // early, and the last stretch is spent turning the event loop, so that the grant
          // falls due on time.
          if (timeoutMs < PUNCTUAL_MS) {
            setImmediate(() => this.pump(x));
            return;
          }
          timeoutMs -= PUNCTUAL_MS;
        }
      }
      let result: ReturnType<typeof Atomics.waitAsync>;
      const wait = this.waits ?? Atomics;
      if (head && tick) {
        // Under a ManualClock time moves only by advance()/set(), which tick this word;
        // releases tick it too.
        result = wait.waitAsync(tick.words, tick.index, tickSeen);
      } else {
        result = Number.isFinite(timeoutMs)
          ? wait.waitAsync(i32, futex, seen, Math.max(timeoutMs, 0.001))
          : wait.waitAsync(i32, futex, seen);
      }
      if (result.async) {
        result.value.then(() => this.pump(x));
        return;
      }
      if (spins > 1000) {
        // Never expected; a guard against a livelock turning into a busy loop.
        setImmediate(() => this.pump(x));
        return;
      }
    }
  }

  /** @internal */
  private evictedError(): QueueFullError {
    return new QueueFullError(
      `${this.owner}: evicted by a newer waiter (queueOrder "newest-first")`,
    );
  }

  /** @internal */
  private skippedError(): QueueFullError {
    return new QueueFullError(
      `${this.owner}: the waiter was skipped: its thread was silent for too long`,
    );
  }

  /** @internal The waiter leaves (abort, timeout, close): out of the queue, then settled. */
  private leaveQueue(x: Waiter, error: unknown): void {
    if (x.done) return;
    this.queues.leave(x.w, x.r, x.id);
    this.settle(x, error);
  }

  /** @internal */
  private settle(x: Waiter, error: unknown, lease?: Lease): void {
    if (x.done) return;
    x.done = true;
    if (x.timer) clearTimeout(x.timer);
    if (x.onAbort) x.signal?.removeEventListener('abort', x.onAbort);
    if (this.queues.id(x.r) === x.id) this.queues.free(x.r);
    this.untrack(x);
    if (this.waitObservers) {
      const ms = (this.clock.nowUs() - x.sinceUs) / 1000;
      for (const observe of this.waitObservers) observe(ms, lease !== undefined);
    }
    if (lease) x.resolve(lease);
    else x.reject(error);
  }

  // A pending Atomics.waitAsync does not keep Node's event loop alive. While this thread
  // has waiters, one interval per limiter (not per key) does: it also proves the thread
  // alive to the others, and removes dead threads' waiters from the heads of our queues.
  /** @internal */
  private track(x: Waiter): void {
    this.waiting.add(x);
    if (this.heartbeatTimer) return;
    this.heartbeatTimer = setInterval(() => {
      // A timer: nobody would catch a throw. A waiter has its entry (enqueue() took it).
      this.queues.tryHeartbeat();
      this.onHeartbeat();
      const seen = new Set<number>();
      for (const y of this.waiting) {
        if (!seen.has(y.w)) {
          seen.add(y.w);
          this.queues.sweep(y.w);
        }
      }
    }, HEARTBEAT_MS);
  }

  /** @internal */
  private untrack(x: Waiter): void {
    this.waiting.delete(x);
    if (this.waiting.size === 0 && this.heartbeatTimer) {
      clearInterval(this.heartbeatTimer);
      this.heartbeatTimer = undefined;
    }
  }

  /** @internal After permits came back to slot `w`: wake its head waiter, if it has waiters. */
  protected wakeWaiters(w: number): void {
    if (this.i32[w + S_STAMP]! >= 0) return; // nobody waits: no notify (a call into a builtin)
    this.queues.wakeHead(w);
    if (this.clock instanceof ManualClock) this.clock.tick();
  }

  // ---- the rest of the API ------------------------------------------------------------

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
   * @internal
   */
  refundTaken(key: Key | undefined, permits: number, takenUs: number): void {
    this.checkOpen();
    if (!(permits >= 1 && permits <= this.limit) || (permits | 0) !== permits) {
      throw permitsError(`${this.owner}.refund`, permits, this.limit);
    }
    this.giveBackUnchecked(key, permits, takenUs);
  }

  /**
   * @internal Until when (this limiter's clock, µs) permits taken at `takenUs` count where
   * they were counted: spent later, they would count in the wrong place and the limit could
   * be exceeded. A window's end (FixedWindow), a segment's or window's (SlidingWindow);
   * Infinity where no such time exists. The cluster's permit blocks expire by it.
   * @internal
   */
  countsUntilUs(_takenUs: number): number {
    return Number.POSITIVE_INFINITY;
  }

  /** @internal The clock time of this thread's last decision (the chain's rollback reads it). */
  get lastDecisionUs(): number {
    return this.core.decisionUs;
  }

  /** @internal refund() without the closed check: a waiter settling during close() still returns what it took. */
  protected giveBackUnchecked(key: Key | undefined, permits: number, takenUs: number): void {
    const nowUs = this.clock.nowUs();
    const at = Number.isNaN(takenUs) ? nowUs : takenUs;
    this.update(key, nowUs, (s, stamp) => this.giveBack(s, stamp, nowUs, permits, at));
  }

  /**
   * @internal atomic-limiter/metrics: called in this thread when one of its acquire() calls
   * that waited settles, with the wait in ms and whether it got its permits. Undefined
   * (nothing to do) unless a meter observes this limiter here.
   * @internal
   */
  waitObservers: Set<(waitedMs: number, granted: boolean) => void> | undefined = undefined;

  /**
   * @internal atomic-limiter/metrics: totals over every key, read when a meter collects
   * (never on the decision path). `admitted` and `rejected` are permits modulo 2^32, those
   * of keys since reclaimed or reset included; `queued` permits waiting now; `held` keys
   * holding a slot (the default key while it has state), `active` slots whose key is not
   * idle (could not be reclaimed now), `slots` the table's slots now.
   * @internal
   */
  totals(): LimiterTotals {
    const nowUs = this.clock.nowUs();
    const i32 = this.i32;
    let admitted = Atomics.load(i32, H_RETIRED_ADMITTED) >>> 0;
    let rejected = Atomics.load(i32, H_RETIRED_REJECTED) >>> 0;
    let queued = 0;
    let active = 0;
    const lastWord = this.core.lastWord;
    this.table.forEachHotWord((w) => {
      admitted += Atomics.load(i32, w + S_ADMITTED) >>> 0;
      rejected += Atomics.load(i32, this.table.rejectedWord(w)) >>> 0;
      queued += this.queues.waitingPermits(w);
      const s = Atomics.load(i32, w + S_STATE);
      if ((s & PAYLOAD_MASK) !== RESERVED && !this.isIdle(s, w, nowUs)) active++;
    });
    this.core.lastWord = lastWord; // isIdle() sets it
    // Keyed slots are counted as they are given to a key; the default key while it has state.
    const d = Atomics.load(i32, this.table.defaultSlot >>> 4);
    return {
      admitted: admitted % 2 ** 32,
      rejected: rejected % 2 ** 32,
      queued,
      held: (Atomics.load(i32, H_INSERTS) >>> 0) + ((d & PAYLOAD_MASK) === FRESH ? 0 : 1),
      active,
      slots: this.table.slotCount(),
    };
  }

  /** @internal Hook on every heartbeat of a thread with waiters (Concurrency looks for dead holders). */
  protected onHeartbeat(): void {}

  /** The key's counters and the permits available now; a key never seen reads as fresh. */
  stats(key?: Key): Stats {
    const nowUs = this.clock.nowUs();
    const ref = this.table.find(key);
    if (ref === NO_SLOT)
      return { available: this.limitWhenFresh(), queued: 0, admitted: 0, rejected: 0 };
    const w = ref >>> 4;
    this.core.lastWord = w;
    const s = this.stateAt(w);
    const stamp = this.stampOf(w, nowUs);
    return {
      available: this.available(s, stamp, nowUs),
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
    if (!this.table.rebuild(ref, this, key)) return;
    this.table.retireCounters(ref >>> 4);
    this.wakeWaiters(ref >>> 4);
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

  /** @internal */
  protected limitWhenFresh(): number {
    return this.available(this.core.wide ? W_FRESH : FRESH, 0, this.clock.nowUs());
  }

  /**
   * Applies `f` to the key's state (a wide table's payload) by CAS until it sticks; no-op
   * for unknown keys. Returns the state written, or NO_SLOT.
   * @internal
   */
  protected update(
    key: Key | undefined,
    nowUs: number,
    f: (state: number, stamp: number) => number,
  ): number {
    for (let ref = this.table.find(key); ref !== NO_SLOT; ref = this.table.find(key)) {
      const next = this.updateSlot(ref >>> 4, ref & 15, nowUs, f, key);
      if (next !== SLOT_GONE) return next;
    }
    return NO_SLOT;
  }

  /**
   * update() on slot word `w` while it holds generation `gen` (and, for a `key`, while the
   * reference is trusted; see GEN_SAFE_SPAN). SLOT_GONE when the slot went to another key
   * before the CAS, or (undone then) at it.
   * @internal
   */
  private updateSlot(
    w: number,
    gen: number,
    nowUs: number,
    f: (state: number, stamp: number) => number,
    key: Key | undefined,
  ): number {
    const wide = this.core.wide;
    // Not shared (see Core.shared): plain reads, and swap() stores.
    const shared = this.core.shared;
    for (;;) {
      const i32 = this.i32;
      const s = shared ? Atomics.load(i32, w + S_STATE) : i32[w + S_STATE]!;
      if (
        s >>> GEN_SHIFT !== gen ||
        (s & PAYLOAD_MASK) === RESERVED ||
        (key !== undefined && i32[H_CONTROL]! - this.table.epoch >= GEN_SAFE_SPAN)
      ) {
        return SLOT_GONE;
      }
      this.core.lastWord = w;
      const x = wide ? (shared ? Atomics.load(i32, w - 1) : i32[w - 1]!) : 0;
      const p = wide ? widePayload(s, x) : s;
      const next = f(p, this.stampOf(w, nowUs));
      if (next === p) return next;
      if (!this.swap(w, s, x, next)) continue;
      // As in run(): a thread descheduled between the check and the CAS may have met the
      // slot reassigned round to its generation. Undone while nobody decided on it since
      // (if somebody did, the key holding the slot keeps what `f` gave it).
      if (
        key !== undefined &&
        Atomics.load(this.i32, H_CONTROL) - this.table.epoch >= GEN_SAFE_SPAN &&
        !this.table.holds(w, gen, key) &&
        this.unswap(w, s, x, next)
      ) {
        return SLOT_GONE;
      }
      this.core.priorState = s;
      this.wakeWaiters(w);
      return next;
    }
  }

  /**
   * One CAS of slot word `w` from state `s` (ext `x`) to the algorithm's `next` (a wide
   * table's payload); plain stores while no other thread can reach the buffer (see
   * Core.shared). True when it took.
   * @internal
   */
  protected swap(w: number, s: number, x: number, next: number): boolean {
    const core = this.core;
    if (core.wide) {
      const ns = wideState(s, next);
      const nx = wideExt(next);
      if (core.shared) return cas64(core.b64, w, s, x, ns, nx);
      storeWide(this.i32, w, ns, nx);
      return true;
    }
    if (core.shared) return Atomics.compareExchange(this.i32, w + S_STATE, s, next) === s;
    this.i32[w + S_STATE] = next;
    return true;
  }

  /** @internal Undoes swap(w, s, x, next) if nothing changed the slot since; true when it did. */
  private unswap(w: number, s: number, x: number, next: number): boolean {
    const core = this.core;
    if (!core.shared) {
      // Nothing else writes the words: they hold what swap() stored.
      if (core.wide) storeWide(this.i32, w, s, x);
      else this.i32[w + S_STATE] = s;
      return true;
    }
    if (core.wide) return cas64(core.b64, w, wideState(s, next), wideExt(next), s, x);
    return Atomics.compareExchange(this.i32, w + S_STATE, next, s) === next;
  }

  /** @internal See Algorithm.takeBack() in decision.ts. */
  takeBack(w: number, s: number, x: number, next: number, permits: number): void {
    // Nobody decided on the slot since: put it back as it was.
    if (!this.unswap(w, s, x, next)) {
      // Somebody did: give the permits back to the key holding the slot, as a refund of
      // permits taken now would, while it holds it (reassigned again, its state is gone).
      const nowUs = this.core.decisionUs;
      this.updateSlot(
        w,
        s >>> GEN_SHIFT,
        nowUs,
        (q, stamp) => this.giveBack(q, stamp, nowUs, permits, nowUs),
        undefined,
      );
    }
    this.wakeWaiters(w);
  }

  /** @internal The slot's stamp, unwrapped relative to `nowUs` (see STAMP_US). */
  protected stampOf(w: number, nowUs: number): number {
    const stampNow = Math.floor((nowUs - this.epochUs) * STAMP_PER_US);
    return unwrapStamp(this.i32[w + S_STAMP]!, stampNow);
  }

  /** @internal Slot number of a packed reference (for algorithms with per-slot memory). */
  protected slotOfRef(ref: number): number {
    return slotOfHotWord(this.layout, ref >>> 4);
  }

  /** @internal Decodes a time-like payload field of `bits` bits relative to `ref` (any integer). */
  protected static near(field: number, ref: number, bits: number): number {
    const shift = 32 - bits;
    return ref + (((field - ref) << shift) >> shift);
  }
}

interface Waiter {
  key: Key | undefined;
  permits: number;
  /** The time of the refused attempt that queued it. */
  sinceUs: number;
  w: number;
  r: number;
  id: number;
  resolve: (lease: Lease) => void;
  reject: (error: unknown) => void;
  done: boolean;
  signal: AbortSignal | undefined;
  timer: ReturnType<typeof setTimeout> | undefined;
  onAbort: (() => void) | undefined;
}

const NO_OP_LEASE: Lease = Object.freeze({
  release(): void {},
  [Symbol.dispose](): void {},
});

class HeldLease implements Lease {
  private held = true;
  constructor(
    private readonly limiter: Limiter,
    private readonly key: Key | undefined,
    private readonly permits: number,
  ) {}
  release(): void {
    if (!this.held) return;
    this.held = false;
    this.limiter.giveLeaseBack(this.key, this.permits);
  }
  [Symbol.dispose](): void {
    this.release();
  }
}
