/**
 * The cluster primary's side: answers every worker's batches with the named limiters.
 *
 * Everything a worker process sends is untrusted input: each message's shape and size are
 * checked, a call that fails becomes an error answer, and a message that is not ours or
 * not well formed is dropped (or answered with an error when it names its batch) — never
 * an exception in the primary. A worker that dies gives back everything it held, and no
 * state is ever made for a worker that is already dead.
 *
 * Back-pressure, per worker: answers the IPC channel has not written yet (the worker reads
 * them more slowly than it sends calls) are counted, and past MAX_QUEUED_VALUES or
 * MAX_QUEUED_MESSAGES a batch from that worker is refused (its calls reject with
 * ClusterUnavailableError) instead of run: one worker cannot grow the primary's memory
 * without bound, nor take its time from the others. Only its give-backs run, and settle
 * their calls: a permit released is never lost to back-pressure.
 */
import cluster, { type Worker } from 'node:cluster';
import type { AnyLimiter } from '../attach.js';
import { H_CONFIG } from '../engine/layout.js';
import { ClusterUnavailableError } from '../errors.js';
import type { Key } from '../limiter.js';
import type { Lease } from '../options.js';
import { show, typeError } from '../validate.js';
import {
  ABORT,
  ACQUIRE,
  CALL_WIDTHS,
  CONSUME,
  type Description,
  DROP,
  GIVE,
  isOurs,
  MARK,
  MAX_RECORD_VALUES,
  type Message,
  NAME,
  pushDecision,
  REFUND,
  RELEASE,
  RESET,
  STATS,
  TAKE,
  TRY,
  toWire,
  untilToWire,
  type Value,
} from './protocol.js';

type Releasable = AnyLimiter & { release(key?: Key, permits?: number): void };

export interface Served {
  limiter: AnyLimiter;
  /** What workers were last told; replaced when the limiter's options version moves. */
  description: Description;
  /** Describes the limiter as it is now. */
  describe(): Description;
  /** Its buffer's header: the options' sequence lock (H_CONFIG) is waited on there. */
  header: Int32Array;
  concurrency: boolean;
}

/** A Concurrency lease from acquire() a worker holds. */
interface Held {
  lease: Lease;
  limiter: AnyLimiter;
  key: Key | undefined;
  /** A reset of its key voided it: the worker's exit gives nothing back for it. */
  voided: boolean;
}

/** An acquire() call pending at the primary. */
interface Waiting {
  controller: AbortController;
  limiter: AnyLimiter;
  key: Key | undefined;
  /** Its key was reset while it was pending (it may have been granted before that). */
  reset: boolean;
}

interface WorkerState {
  worker: Worker;
  dead: boolean;
  /** acquire() outcomes waiting for this tick's message: [id, ok, value, …]. */
  out: unknown[];
  /** Leases from acquire() the worker still holds, by lease id. */
  leases: Map<number, Held>;
  /** Pending acquire() calls, by call id, to abort when the worker goes. */
  waiting: Map<number, Waiting>;
  /** Concurrency permits taken by tryAcquire/consume and not yet released. */
  held: Map<Releasable, Map<Key | undefined, number>>;
  /** Messages sent to it that its channel has not written yet, and their answer values. */
  queuedMessages: number;
  queuedValues: number;
}

const ignore = () => {};

/**
 * Answer values (and messages) queued for one worker, not yet written to its channel, past
 * which its batches are refused: four full batches' worth, about a megabyte of JSON. A
 * worker that reads its answers queues none; one whose event loop stalled for a moment
 * stays well within it.
 */
export const MAX_QUEUED_VALUES = 4 * MAX_RECORD_VALUES;
export const MAX_QUEUED_MESSAGES = 1024;
/**
 * Refusals are small, but a worker that never reads would queue one per batch for ever:
 * past this many messages queued, a batch gets no answer at all (its calls time out there).
 */
const MAX_QUEUED_WITH_REFUSALS = 2 * MAX_QUEUED_MESSAGES;

/**
 * The names served in this process, shared by every serveCluster() of it: one batch may
 * address limiters of several servers and is answered in one message.
 */
export class Dispatcher {
  readonly named = new Map<string, Served>();
  private readonly states = new Map<number, WorkerState>();
  private leaseIds = 0;
  private listening = false;

  private readonly onMessage = (worker: Worker, msg: unknown) => {
    if (!isOurs(msg)) return;
    try {
      this.handle(worker, msg);
    } catch {
      // Nothing a worker sends may take the primary down; what failed here was the
      // worker's message (for example an object whose fields throw when read).
    }
  };

  private readonly onExit = (worker: Worker) => {
    const s = this.states.get(worker.id);
    if (!s) return;
    this.states.delete(worker.id);
    s.dead = true;
    // Each give-back may throw (the limiter was closed meanwhile: nothing left to give
    // back); none may stop the others, nor reach the 'exit' event's emitter.
    for (const w of s.waiting.values()) attempt(() => w.controller.abort());
    for (const held of s.leases.values()) if (!held.voided) attempt(() => held.lease.release());
    for (const [limiter, keys] of s.held) {
      for (const [key, n] of keys) attempt(() => limiter.release(key, n));
    }
  };

  add(entries: [string, Served][]): void {
    for (const [name, served] of entries) this.named.set(name, served);
    if (!this.listening) {
      this.listening = true;
      cluster.on('message', this.onMessage);
      cluster.on('exit', this.onExit);
    }
    this.announce();
    for (const [name, served] of entries) this.watch(name, served);
  }

  /**
   * Tells every worker the new figures once `served` is reconfigured, by whichever thread or
   * process: reconfigure() wakes the waiters on its options' sequence lock when it finishes.
   * A pending waitAsync keeps no process alive, and costs nothing while nothing changes. The
   * batches check too (run()), so that an answer decided under new options never reaches a
   * worker before the figures do.
   */
  private watch(name: string, served: Served): void {
    const result = Atomics.waitAsync(served.header, H_CONFIG, served.description.version);
    const woken = () => {
      if (this.named.get(name) !== served) return; // no longer served: stop watching
      attempt(() => {
        if (this.refreshed(served)) this.announce();
      });
      this.watch(name, served);
    };
    if (result.async) void result.value.then(woken);
    else queueMicrotask(woken); // changed already (or under way: refreshed() waits for it)
  }

  /** Describes `served` again if its options changed since; true when they had. */
  private refreshed(served: Served): boolean {
    if (served.limiter.optionsVersion === served.description.version) return false;
    served.description = served.describe();
    return true;
  }

  remove(names: string[], served: Served[]): void {
    names.forEach((name, i) => {
      if (this.named.get(name) === served[i]) this.named.delete(name);
    });
    this.announce();
  }

  /** Tells every worker what is served now; workers waiting for it send their calls. */
  private announce(): void {
    const msg = this.readyMessage();
    for (const worker of Object.values(cluster.workers ?? {})) if (worker) send(worker, msg);
  }

  private readyMessage(): Message {
    const served: Record<string, Description> = {};
    for (const [name, s] of this.named) served[name] = s.description;
    return { mark: MARK, t: 'ready', served };
  }

  private handle(worker: Worker, msg: { t: unknown } & Record<string, unknown>): void {
    // A dead worker's calls are never run: nobody waits for their answers, and permits
    // taken for it now would have nobody to give them back (its exit has been handled).
    if (worker.isDead()) return;
    if (msg.t === 'hello') {
      send(worker, this.readyMessage());
      return;
    }
    if (msg.t !== 'c') return;
    const seq = msg.s;
    if (typeof seq !== 'number' || !Number.isSafeInteger(seq)) return; // cannot be answered
    const records = msg.c;
    if (!Array.isArray(records) || records.length > MAX_RECORD_VALUES) {
      const got = Array.isArray(records) ? `${records.length} values` : show(records);
      send(worker, {
        mark: MARK,
        t: 'r',
        s: seq,
        v: [],
        e: toWire(
          typeError(
            `cluster primary: a batch must be an array of at most ${MAX_RECORD_VALUES} values, got ${got}`,
          ),
        ),
      });
      return;
    }
    let s = this.states.get(worker.id);
    if (!s) {
      s = {
        worker,
        dead: false,
        out: [],
        leases: new Map(),
        waiting: new Map(),
        held: new Map(),
        queuedMessages: 0,
        queuedValues: 0,
      };
      this.states.set(worker.id, s);
    }
    if (s.queuedValues > MAX_QUEUED_VALUES || s.queuedMessages > MAX_QUEUED_MESSAGES) {
      this.refuse(s, seq, records as Value[]);
      return;
    }
    const answers: unknown[] = [];
    const broken = this.run(s, records as Value[], answers);
    // A batch of only DROP/ABORT records (a lease given back) expects no answer.
    if (answers.length === 0 && !broken) return;
    this.send(s, {
      mark: MARK,
      t: 'r',
      s: seq,
      v: answers,
      ...(broken ? { e: toWire(broken) } : {}),
    });
  }

  /**
   * Refuses batch `seq` of a worker whose answers pile up unread: its calls that take or
   * read do not run, and one small answer says so (the worker rejects them, its acquire()
   * calls too). Its give-backs run all the same — REFUND, RELEASE and GIVE records, DROP
   * and ABORT: they free what the worker holds or waits for and add no load — and the
   * refusal lists their answers (`g`), so the calls that made them settle as they ran.
   */
  private refuse(s: WorkerState, seq: number, c: Value[]): void {
    const ran: unknown[] = [];
    let served: Served | undefined;
    let name = '';
    let call = 0; // the calls before record i, numbered as the worker's batch holds them
    for (let i = 0; i < c.length; ) {
      const op = c[i];
      if (op === NAME || op === DROP || op === ABORT) {
        const value = c[i + 1];
        // Malformed from here: nothing more to free.
        if (i + 2 > c.length || (op === NAME && typeof value !== 'string')) break;
        if (op !== NAME) this.run(s, [op, value as Value], []);
        else served = this.named.get((name = value as string));
        i += 2;
        continue;
      }
      const width = CALL_WIDTHS[op as number];
      if (width === undefined || i + width > c.length) break;
      if (op === REFUND || op === RELEASE || op === GIVE) {
        const v: unknown[] = [];
        if (served === undefined) v.push(toWire(this.notServed(name)));
        else {
          const rawKey = c[i + 1];
          try {
            this.call(s, served, op, rawKey === null ? undefined : (rawKey as Key), c, i, v);
          } catch (error) {
            v.push(toWire(error));
          }
        }
        ran.push(call, v[0]);
      }
      if (op !== ACQUIRE) call++;
      i += width;
    }
    if (s.queuedMessages >= MAX_QUEUED_WITH_REFUSALS) return;
    this.send(s, {
      mark: MARK,
      t: 'r',
      s: seq,
      v: [],
      e: toWire(
        new ClusterUnavailableError(
          `cluster primary: batch refused: ${s.queuedMessages} answers (${s.queuedValues} values) to this worker are still unread; it reads its answers more slowly than it sends calls`,
        ),
      ),
      ...(ran.length > 0 ? { g: ran } : {}),
    });
  }

  /** Sends `msg` to `s`'s worker, counting it as queued until its channel has written it. */
  private send(s: WorkerState, msg: Message & { v?: unknown[]; g?: unknown[] }): void {
    const values = (msg.v === undefined ? 1 : msg.v.length + 1) + (msg.g?.length ?? 0);
    s.queuedMessages++;
    s.queuedValues += values;
    const written = () => {
      s.queuedMessages--;
      s.queuedValues -= values;
    };
    if (!send(s.worker, msg, written)) written();
  }

  /**
   * Runs a batch's records, appending one answer per answered call. Returns the error
   * that stopped it when a record is malformed (the rest of the batch is not run).
   */
  private run(s: WorkerState, c: Value[], v: unknown[]): Error | undefined {
    let served: Served | undefined;
    let name = '';
    let i = 0;
    const n = c.length;
    while (i < n) {
      const op = c[i];
      if (op === NAME) {
        const next = c[i + 1];
        if (typeof next !== 'string') return malformed(i, 'a name', next);
        name = next;
        served = this.named.get(name);
        // Reconfigured and not announced yet: the figures go out before this batch's answers.
        if (served !== undefined && this.refreshed(served)) this.announce();
        i += 2;
        continue;
      }
      if (op === DROP) {
        const leaseId = c[i + 1];
        i += 2;
        if (typeof leaseId !== 'number') continue;
        const held = s.leases.get(leaseId);
        s.leases.delete(leaseId);
        // Voided by a reset or not: the worker's own release acts on the key as it is now,
        // as a Lease's release() after reset() does in memory. No answer: a closed limiter
        // is fine.
        if (held) attempt(() => held.lease.release());
        continue;
      }
      if (op === ABORT) {
        const id = c[i + 1];
        i += 2;
        const w = typeof id === 'number' ? s.waiting.get(id) : undefined;
        if (w) attempt(() => w.controller.abort());
        continue;
      }
      const width = typeof op === 'number' ? CALL_WIDTHS[op] : undefined;
      if (width === undefined || i + width > n) return malformed(i, 'a call', op);
      if (served === undefined) {
        // The whole call is answered: the worker learns at once that the name is wrong.
        if (op !== ACQUIRE) v.push(toWire(this.notServed(name)));
        else this.settleAcquire(s, c[i + 1], 0, toWire(this.notServed(name)));
        i += width;
        continue;
      }
      const rawKey = c[op === ACQUIRE ? i + 2 : i + 1];
      const key = rawKey === null ? undefined : (rawKey as Key);
      try {
        this.call(s, served, op as number, key, c, i, v);
      } catch (error) {
        if (op !== ACQUIRE) v.push(toWire(error));
        else this.settleAcquire(s, c[i + 1], 0, toWire(error));
      }
      i += width;
    }
    return undefined;
  }

  private call(
    s: WorkerState,
    served: Served,
    op: number,
    key: Key | undefined,
    c: Value[],
    i: number,
    v: unknown[],
  ): void {
    const limiter = served.limiter;
    const permits = c[i + 2] as number;
    switch (op) {
      case TRY: {
        const ok = limiter.tryAcquire(key, permits);
        if (ok && served.concurrency) this.hold(s, limiter as Releasable, key, permits);
        v.push(ok ? 1 : 0);
        return;
      }
      case CONSUME: {
        const d = limiter.consume(key, permits);
        if (d.allowed && served.concurrency) this.hold(s, limiter as Releasable, key, permits);
        pushDecision(v, d);
        return;
      }
      case TAKE:
        this.take(served, key, permits, c[i + 3], v);
        return;
      case REFUND:
        limiter.refund(key, permits);
        if (served.concurrency) this.unhold(s, limiter as Releasable, key, permits);
        v.push(0);
        return;
      case GIVE: {
        // A block's unspent permits, with the time the TAKE that granted them answered:
        // back to the window they were taken in, so a window that has passed since is not
        // credited. (A worker could as well refund(): nothing to trust.)
        const takenUs = c[i + 3];
        if (typeof takenUs !== 'number' || !Number.isFinite(takenUs)) {
          throw typeError(
            `cluster primary: a give-back's time must be a number, got ${show(takenUs)}`,
          );
        }
        if (served.concurrency) {
          throw typeError('Concurrency: permit blocks (option "block") are for rate limiters');
        }
        limiter.refundTaken(key, permits, takenUs);
        v.push(0);
        return;
      }
      case RELEASE:
        if (!served.concurrency) {
          throw typeError(
            `${served.description.algorithm}: release() is for Concurrency limiters; rate limiters have refund()`,
          );
        }
        (limiter as Releasable).release(key, permits);
        this.unhold(s, limiter as Releasable, key, permits);
        v.push(0);
        return;
      case STATS: {
        const st = limiter.stats(key);
        v.push(st.available, st.queued, st.admitted, st.rejected);
        return;
      }
      case RESET:
        limiter.reset(key);
        if (served.concurrency) this.voidHolds(limiter, key);
        v.push(0);
        return;
      default:
        this.acquire(s, served, c[i + 1], key, c[i + 3] as number, c[i + 4]);
    }
  }

  /**
   * A permit block: between `min` and `max` permits, as many as are there, and the
   * Decision of the grant (on a refusal, the Decision of asking for `min`), then when they
   * were taken and until when they count there.
   */
  private take(served: Served, key: Key | undefined, min: number, max: unknown, v: unknown[]) {
    const limiter = served.limiter;
    if (served.concurrency) {
      throw typeError('Concurrency: permit blocks (option "block") are for rate limiters');
    }
    if (typeof max !== 'number' || !Number.isInteger(max) || !(max >= min)) {
      throw typeError(`cluster primary: a block's size must be an integer, got ${show(max)}`);
    }
    const want = Math.min(max, limiter.limit);
    let n = Math.max(min, Math.min(want, limiter.stats(key).available));
    let d = limiter.consume(key, n);
    // The estimate was high (a sliding window's weight, another thread): ask for min.
    if (!d.allowed && n > min) d = limiter.consume(key, (n = min));
    v.push(d.allowed ? n : 0);
    pushDecision(v, d);
    // When they were taken (the worker gives them back with it), and until when they count
    // there: the worker spends none of them later.
    const takenUs = limiter.lastDecisionUs;
    v.push(takenUs, untilToWire(limiter.countsUntilUs(takenUs)));
  }

  private acquire(
    s: WorkerState,
    served: Served,
    id: unknown,
    key: Key | undefined,
    permits: number,
    timeoutMs: unknown,
  ): void {
    if (typeof id !== 'number') return; // cannot be answered
    const controller = new AbortController();
    const w: Waiting = { controller, limiter: served.limiter, key, reset: false };
    s.waiting.set(id, w);
    // A lease granted within this call is recorded only when its promise's reaction runs,
    // after the rest of the batch (and of the batches received with it): a reset of its
    // key in between must void it too. Such a reaction runs before the microtask queued
    // below. A lease granted later has its reaction run in the microtasks of the turn that
    // granted it, before any other batch is handled: no reset comes between the two.
    let grantedAtCall = true;
    served.limiter
      .acquire(key, permits, {
        signal: controller.signal,
        ...(timeoutMs === -1 ? {} : { timeoutMs: timeoutMs as number }),
      })
      .then(
        (lease) => {
          s.waiting.delete(id);
          const voided = grantedAtCall && w.reset;
          if (s.dead) {
            if (!voided) attempt(() => lease.release()); // the worker is gone
            return;
          }
          const leaseId = ++this.leaseIds;
          if (served.concurrency) {
            s.leases.set(leaseId, { lease, limiter: served.limiter, key, voided });
          }
          this.settleAcquire(s, id, 1, leaseId);
        },
        (error) => {
          s.waiting.delete(id);
          this.settleAcquire(s, id, 0, toWire(error));
        },
      );
    queueMicrotask(() => {
      grantedAtCall = false;
    });
  }

  /** acquire() outcomes of one tick leave in one message. */
  private settleAcquire(s: WorkerState, id: unknown, ok: 0 | 1, value: unknown): void {
    if (typeof id !== 'number' || s.dead) return;
    if (s.out.push(id, ok, value) > 3) return;
    queueMicrotask(() => {
      const v = s.out;
      s.out = [];
      this.send(s, { mark: MARK, t: 'a', v });
    });
  }

  private hold(s: WorkerState, limiter: Releasable, key: Key | undefined, n: number): void {
    let keys = s.held.get(limiter);
    if (!keys) s.held.set(limiter, (keys = new Map()));
    keys.set(key, (keys.get(key) ?? 0) + n);
  }

  /**
   * A reset of a Concurrency key through this bridge: what the workers hold of it went with
   * the key's state (as reset() voids the holder records of threads), so none of it is
   * given back when they exit — else a dead worker's permits taken before the reset would
   * free permits taken after it. (A reset() called on the limiter itself, here or on
   * another thread, does not pass here: the limiter tells nobody of it.)
   */
  private voidHolds(limiter: AnyLimiter, key: Key | undefined): void {
    for (const t of this.states.values()) {
      t.held.get(limiter as Releasable)?.delete(key);
      for (const held of t.leases.values()) {
        if (held.limiter === limiter && held.key === key) held.voided = true;
      }
      for (const w of t.waiting.values()) {
        if (w.limiter === limiter && w.key === key) w.reset = true;
      }
    }
  }

  // Permits given back: first from what this worker holds, then (a worker may release
  // another's permits) from the others, so that a dead worker never releases permits a
  // live one took after them.
  private unhold(s: WorkerState, limiter: Releasable, key: Key | undefined, n: number): void {
    for (const t of [s, ...this.states.values()]) {
      const keys = t.held.get(limiter);
      const have = keys?.get(key) ?? 0;
      if (have === 0 || !keys) continue;
      const take = Math.min(have, n);
      if (have === take) keys.delete(key);
      else keys.set(key, have - take);
      n -= take;
      if (n === 0) return;
    }
  }

  private notServed(name: string): ClusterUnavailableError {
    const names = [...this.named.keys()];
    const list =
      names.length === 0
        ? 'it serves no limiter'
        : `it serves ${names
            .slice(0, 10)
            .map((x) => JSON.stringify(x))
            .join(', ')}${names.length > 10 ? ', …' : ''}`;
    return new ClusterUnavailableError(
      `connectCluster(${JSON.stringify(name)}): the cluster primary does not serve this name (${list})`,
    );
  }
}

/** Runs a give-back whose failure has nobody to tell (its limiter was closed). */
function attempt(giveBack: () => void): void {
  try {
    giveBack();
  } catch {
    // LimiterClosedError: the permits went with the limiter.
  }
}

function malformed(at: number, expected: string, got: unknown): TypeError {
  return typeError(
    `cluster primary: malformed batch: expected ${expected} at value ${at}, got ${show(got)}`,
  );
}

/**
 * Sends without ever throwing: a worker that just died makes the write fail (EPIPE).
 * `written` runs once the channel has written the message or failed to; returns false
 * (and never runs it) when nothing was sent.
 */
function send(worker: Worker, msg: Message, written: () => void = ignore): boolean {
  if (!worker.isConnected()) return false;
  try {
    // The callback takes the write error that would otherwise be an 'error' event
    // nobody listens to, which would end the primary.
    worker.send(msg, undefined, undefined, written);
    return true;
  } catch {
    // The channel closed between the check and the write.
    return false;
  }
}

// One dispatcher per process, shared by every copy of this module (an ESM and a CJS copy
// serving different names must still answer each batch in one message).
const DISPATCHER = Symbol.for('atomic-limiter.cluster-dispatcher@2');
export function dispatcher(): Dispatcher {
  const g = globalThis as { [DISPATCHER]?: Dispatcher };
  g[DISPATCHER] ??= new Dispatcher();
  return g[DISPATCHER];
}
