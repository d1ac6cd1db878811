import { ManualClock } from '../clock.js';
import { CoarseClock } from '../coarse-clock.js';
import { LimiterClosedError, QueueFullError } from '../errors.js';
import type { AcquireOptions, Lease, Waits } from '../options.js';
import { acquireOptions } from '../validate.js';
import type { Algorithm } from './algorithm.js';
import type { Core } from './core.js';
import { type AttemptMode, ENQUEUE, enter, giveBackToKey, HEAD, run } from './decision.js';
import { retryAfterUs } from './explain.js';
import { GEN_SHIFT, H_CONTROL, W_CLOSED, W_EVICTED, W_FREE, W_WAITING } from './layout.js';
import { HEARTBEAT_MS, MOVED } from './queue.js';
import { type Key, NO_SLOT } from './table.js';

/** A punctual head waiter turns the event loop for the last this many ms of its wait. */
const PUNCTUAL_MS = 1;

/**
 * acquire()'s waiting line on one limiter, in this thread: the waiters it has pending,
 * each run until it parks on its queue entry (Atomics.waitAsync) and again when woken,
 * and the heartbeat that keeps the thread alive and proves it so while any waits. The
 * queue itself, shared by every thread, is WaitQueues (queue.ts).
 */
export class WaitingRoom {
  /** This thread's pending acquire() calls on this limiter. */
  private readonly waiting = new Set<Waiter>();
  private heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  /**
   * atomic-limiter/metrics: called when one of this thread's acquire() calls that waited
   * settles, with the wait in ms and whether it got its permits (see Limiter.waitObservers).
   */
  observers: Set<(waitedMs: number, granted: boolean) => void> | undefined = undefined;

  constructor(
    private readonly algo: Algorithm,
    private readonly core: Core,
    /** The `queueLimit` option (an algorithm may say otherwise: effectiveQueueLimit()). */
    private readonly queueLimit: number,
    /** Waiting across processes (host memory); Atomics.waitAsync otherwise. */
    private readonly waits: Waits | undefined,
  ) {}

  /** A decision for acquire(): its first try, or the head waiter's turn. */
  private attempt(key: Key | undefined, permits: number, nowUs: number, mode: AttemptMode) {
    const core = this.core;
    const algo = this.algo;
    const ref = enter(core, algo, key, permits, nowUs);
    let step = mode === HEAD ? algo.stepQueued : algo.step;
    if (core.wide) step = mode === HEAD ? algo.stepQueuedWide : algo.stepWide;
    if (!run(core, algo, step, ref, permits, key, mode)) return false;
    // NO_SLOT: allowed without a slot by whenFull 'allow'.
    const last = core.last;
    if (last.word !== NO_SLOT) algo.admitted(last.word, last.prior, nowUs, permits);
    return true;
  }

  /** Limiter.acquire(): a grant now, or a place in the key's queue until one. */
  acquire(key?: Key, permits = 1, options: AcquireOptions = {}): Promise<Lease> {
    try {
      const { signal, timeoutMs } = acquireOptions(this.core.owner, options);
      if (signal?.aborted) return Promise.reject(signal.reason);
      let w = NO_SLOT;
      let r = MOVED;
      while (r === MOVED) {
        if (this.attempt(key, permits, this.core.clock.nowUs(), ENQUEUE)) {
          // Granted with no slot (whenFull: 'allow'): nothing was taken, nothing to give back.
          if (this.core.last.word === NO_SLOT) return Promise.resolve(NO_OP_LEASE);
          return Promise.resolve(this.leaseFor(key, permits));
        }
        if (this.core.last.word === NO_SLOT) {
          throw new QueueFullError(
            `${this.core.owner}: no slot for this key: every candidate slot holds an active key (option "keys")`,
          );
        }
        w = this.core.last.word;
        try {
          const queueLimit = this.algo.effectiveQueueLimit?.() ?? this.queueLimit;
          if (queueLimit === 0) {
            throw new QueueFullError(
              `${this.core.owner}: option "queueLimit" is 0, so acquire() never waits`,
            );
          }
          // MOVED: the slot went to another key between the attempt and the queue; the
          // waiter must queue where the key is now, so try again from the lookup.
          r = this.core.queues.enqueue(
            w,
            permits,
            queueLimit,
            !this.core.fifo,
            key === undefined ? -1 : this.core.last.prior >>> GEN_SHIFT,
            this.core.table.epoch,
          );
          // 'newest-first' may have evicted the head waiter, which under a ManualClock
          // listens for the clock's ticks alone (its time moves only by advance()/set()).
          if (!this.core.fifo && this.core.clock instanceof ManualClock) this.core.clock.tick();
        } catch (error) {
          Atomics.add(this.core.i32, this.core.table.rejectedWord(w), permits); // refused: no room to wait
          throw error;
        }
      }
      return new Promise<Lease>((resolve, reject) => {
        const x: Waiter = {
          key,
          permits,
          sinceUs: this.core.last.atUs,
          w,
          r,
          id: this.core.queues.id(r),
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

  /** The Lease of a grant: one that gives its permits back for an algorithm that has leases. */
  private leaseFor(key: Key | undefined, permits: number): Lease {
    return this.algo.releaseLease !== undefined
      ? new HeldLease(this.algo, key, permits)
      : NO_OP_LEASE;
  }

  /** Runs a waiter until it parks (Atomics.waitAsync) or settles. */
  private pump(x: Waiter): void {
    try {
      this.pumpOnce(x);
    } catch (error) {
      // close() from another thread between our checks and attempt() makes attempt()
      // throw; whatever it is, the waiter settles instead of hanging.
      this.leaveQueue(x, error);
    }
  }

  private pumpOnce(x: Waiter): void {
    const i32 = this.core.i32;
    const manual = this.core.clock instanceof ManualClock ? this.core.clock : undefined;
    for (let spins = 0; !x.done; spins++) {
      const status = this.core.queues.status(x.r);
      const ours = this.core.queues.id(x.r) === x.id;
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
      const futex = this.core.queues.futex(x.r);
      const seen = Atomics.load(i32, futex);
      const tick = manual?.tickWord;
      const tickSeen = tick ? Atomics.load(tick.words, tick.index) : 0;
      let timeoutMs = Number.POSITIVE_INFINITY;
      let head = false;
      if (this.core.queues.isHead(x.w, x.r)) {
        head = true;
        const nowUs = this.core.clock.nowUs();
        this.core.last.queuedSinceUs = x.sinceUs;
        if (this.attempt(x.key, x.permits, nowUs, HEAD)) {
          const was = this.core.queues.leave(x.w, x.r, x.id);
          if (was === W_WAITING) {
            this.settle(x, null, this.leaseFor(x.key, x.permits));
            return;
          }
          // Evicted, closed or swept while taking them: exactly one outcome, so give them
          // back.
          giveBackToKey(this.core, this.algo, x.key, x.permits, nowUs);
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
          retryAfterUs(
            this.core,
            this.algo,
            this.core.last.state,
            this.core.last.stamp,
            nowUs,
            x.permits,
          ) / 1000;
        // A coarse clock moves once per resolution: waiting less would wake to the same
        // time and wait again, spinning until its next tick.
        if (this.core.clock instanceof CoarseClock) {
          timeoutMs = Math.max(timeoutMs, this.core.clock.resolutionMs);
        } else if (!manual && this.algo.punctual(x.permits)) {
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

  private evictedError(): QueueFullError {
    return new QueueFullError(
      `${this.core.owner}: evicted by a newer waiter (queueOrder "newest-first")`,
    );
  }

  private skippedError(): QueueFullError {
    return new QueueFullError(
      `${this.core.owner}: the waiter was skipped: its thread was silent for too long`,
    );
  }

  /** The waiter leaves (abort, timeout, close): out of the queue, then settled. */
  private leaveQueue(x: Waiter, error: unknown): void {
    if (x.done) return;
    if (this.core.queues.leave(x.w, x.r, x.id) !== W_FREE) {
      // Nobody woke it: the waits it parked on its record's word (Atomics.waitAsync, and on
      // host memory the addon thread's) end now, not when the record is next used.
      this.core.queues.wakeRecord(x.r);
    }
    this.settle(x, error);
  }

  private settle(x: Waiter, error: unknown, lease?: Lease): void {
    if (x.done) return;
    x.done = true;
    if (x.timer) clearTimeout(x.timer);
    if (x.onAbort) x.signal?.removeEventListener('abort', x.onAbort);
    if (this.core.queues.id(x.r) === x.id) this.core.queues.free(x.r);
    this.untrack(x);
    if (this.observers) {
      const ms = (this.core.clock.nowUs() - x.sinceUs) / 1000;
      for (const observe of this.observers) observe(ms, lease !== undefined);
    }
    if (lease) x.resolve(lease);
    else x.reject(error);
  }

  // A pending Atomics.waitAsync does not keep Node's event loop alive. While this thread
  // has waiters, one interval per limiter (not per key) does: it also proves the thread
  // alive to the others, and removes dead threads' waiters from the heads of our queues.
  private track(x: Waiter): void {
    this.waiting.add(x);
    if (this.heartbeatTimer) return;
    this.heartbeatTimer = setInterval(() => {
      // A timer: nobody would catch a throw. A waiter has its entry (enqueue() took it).
      this.core.queues.tryHeartbeat();
      this.algo.onHeartbeat();
      const seen = new Set<number>();
      for (const y of this.waiting) {
        if (!seen.has(y.w)) {
          seen.add(y.w);
          this.core.queues.sweep(y.w);
        }
      }
    }, HEARTBEAT_MS);
  }

  private untrack(x: Waiter): void {
    this.waiting.delete(x);
    if (this.waiting.size === 0 && this.heartbeatTimer) {
      clearInterval(this.heartbeatTimer);
      this.heartbeatTimer = undefined;
    }
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
    private readonly algo: Algorithm,
    private readonly key: Key | undefined,
    private readonly permits: number,
  ) {}
  release(): void {
    if (!this.held) return;
    this.held = false;
    this.algo.releaseLease!(this.key, this.permits);
  }
  [Symbol.dispose](): void {
    this.release();
  }
}
