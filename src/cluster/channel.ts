/**
 * A worker process's side of the wire: one per process, shared by every client. Calls made
 * in one tick leave in one batch (in several when one would pass the primary's bounds, see
 * protocol.ts); answers come back in call order.
 */
import { performance } from 'node:perf_hooks';
import { DeadlineTimer, due } from '../deadlines.js';
import { ClusterTimeoutError, ClusterUnavailableError } from '../errors.js';
import type { Key } from '../limiter.js';
import type { AlgorithmName, Decision } from '../options.js';
import type { Caller, Check, Pending } from './pending.js';
import {
  ABORT,
  ACQUIRE,
  answerWidth,
  CALL_WIDTHS,
  CONSUME,
  type Description,
  DROP,
  fromWire,
  GIVE,
  type Grant,
  isOurs,
  MARK,
  MAX_CALLS_PER_BATCH,
  MAX_RECORD_VALUES,
  type Message,
  NAME,
  REFUND,
  RELEASE,
  RESET,
  readAnswer,
  STATS,
  TAKE,
  TRY,
  type Value,
  type WireError,
} from './protocol.js';

interface Batch {
  sentAt: number;
  calls: Pending[];
}

const ignore = () => {};
const MAX_UNANSWERED_BATCHES = 10_000;
/**
 * A tick's calls leave as soon as a batch holds a third of the calls in flight (and at
 * least EARLY_BATCH_MIN), not all at the tick's end: the primary decides the first batch
 * while this process still makes the tick's other calls, so the two processes work at
 * once instead of in turns. With about three batches out, each process always has one to
 * work on; smaller batches would cost more per call than the overlap saves (the bench's
 * cluster part measures it).
 */
const EARLY_BATCH_PARTS = 3;
const EARLY_BATCH_MIN = 8;
/**
 * Rate limiters whose give-back does not depend on when the permits were taken (the
 * primary's GIVE ignores the time there): a grant nobody waits for any more goes back by a
 * REFUND, which is what a GIVE with its time would do. A window's give-back needs that
 * time, which no answer but TAKE's carries: see giveBackLate(). Not a SlidingLog: its
 * refund takes back the newest entries, which may be an admission made since the late
 * grant — the late grant's own entry would then stay, and its window admit one more.
 */
const TIMELESS: ReadonlySet<AlgorithmName | undefined> = new Set<AlgorithmName>([
  'TokenBucket',
  'LeakyBucket',
  'WarmingBucket',
]);

export class Channel {
  /** What the primary serves; undefined until its first 'ready'. */
  private served: Map<string, Description> | undefined;
  /** Calls made before the first 'ready', in order. */
  private early: Pending[] = [];
  private out: Value[] = [];
  /** The records in `out`, NAME included (see room()). */
  private outRecords = 0;
  private outCalls: Pending[] = [];
  /** The calls of `outCalls` somebody awaits (not give-backs): what may send it early. */
  private outAwaited = 0;
  private outName: string | undefined;
  /** The smallest timeoutMs among `outCalls`: their batch's first deadline once it leaves. */
  private outTimeoutMs = Number.POSITIVE_INFINITY;
  private flushing = false;
  private seq = 0;
  /** Batches sent and not answered yet, oldest first. */
  private readonly sent = new Map<number, Batch>();
  /** acquire() calls waiting for their outcome, by id. */
  private readonly acquiring = new Map<number, Pending>();
  private nextId = 1;
  private inFlight = 0;
  /** The one timer for every call's deadline (deadlines.ts). */
  private readonly deadlines = new DeadlineTimer((now) => this.expire(now));
  private helloSent = false;
  private closed = false;
  /** ready() calls waiting for the primary's first 'ready': resolved then, rejected on shutDown. */
  private readonly waitingForReady = new Set<{ resolve: () => void; reject: (e: Error) => void }>();

  constructor() {
    process.on('message', (msg: unknown) => {
      if (!isOurs(msg)) return;
      const m = msg as Message;
      if (m.t === 'r') this.onResults(m.s, m.v, m.e, m.g);
      else if (m.t === 'a') this.onAcquired(m.v);
      else if (m.t === 'ready') this.onReady(m.served);
    });
    process.once('disconnect', () => this.shutDown());
  }

  /** The served limiter's description, once the primary told it. */
  describe(name: string): Description | undefined {
    return this.served?.get(name);
  }

  /** Resolves once the primary has said what it serves; rejects once the channel is closed. */
  whenReady(): Promise<void> {
    if (this.served) return Promise.resolve();
    if (this.closed || !process.connected) {
      return Promise.reject(
        new ClusterUnavailableError('the IPC channel to the cluster primary is closed'),
      );
    }
    this.hello();
    return new Promise((resolve, reject) => this.waitingForReady.add({ resolve, reject }));
  }

  hello(): void {
    if (this.helloSent) return;
    this.helloSent = true;
    this.send({ mark: MARK, t: 'hello' });
  }

  /**
   * Starts a call; its promise settles with the answer's value. Calls made before the
   * primary's first 'ready' wait for it (within their timeout); `check` runs then, and a
   * thrown error rejects the call without sending it.
   */
  call(
    caller: Caller,
    op: number,
    key: Key | undefined,
    permits: number,
    extra = 0,
    check?: Check,
  ): Promise<unknown> {
    if (this.closed || !process.connected) {
      return Promise.reject(
        new ClusterUnavailableError(
          `${caller.name}: the IPC channel to the cluster primary is closed`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const p: Pending = {
        resolve,
        reject,
        caller,
        op,
        key,
        permits,
        extra,
        settled: false,
        since: -1,
        id: 0,
        timeoutMs: caller.timeoutMs,
        check,
        batch: 0,
        at: 0,
      };
      this.start(p);
    });
  }

  /** acquire(): waits at the primary; `timeoutMs` is this call's own IPC deadline. */
  acquire(
    caller: Caller,
    key: Key | undefined,
    permits: number,
    waitMs: number | undefined,
    check: Check,
  ): { id: number; promise: Promise<unknown> } {
    const id = this.nextId++;
    if (this.closed || !process.connected) {
      const error = new ClusterUnavailableError(
        `${caller.name}: the IPC channel to the cluster primary is closed`,
      );
      return { id, promise: Promise.reject(error) };
    }
    const promise = new Promise((resolve, reject) => {
      const p: Pending = {
        resolve,
        reject,
        caller,
        op: ACQUIRE,
        key,
        permits,
        extra: waitMs ?? -1,
        settled: false,
        since: performance.now(),
        id,
        // Waiting is the point of acquire(): the IPC timeout covers only the answer's
        // trip after the primary's own timeoutMs (none: as long as it takes).
        timeoutMs: waitMs === undefined ? Number.POSITIVE_INFINITY : waitMs + caller.timeoutMs,
        check,
        batch: 0,
        at: 0,
      };
      this.start(p);
    });
    return { id, promise };
  }

  private start(p: Pending): void {
    const maxPending = p.caller.maxPending;
    if (this.inFlight >= maxPending) {
      p.settled = true;
      p.reject(
        new ClusterUnavailableError(
          `${p.caller.name}: ${maxPending} calls are already in flight (option "maxPending")`,
        ),
      );
      return;
    }
    this.inFlight++;
    if (p.op === ACQUIRE) this.acquiring.set(p.id, p);
    if (!this.served) {
      if (p.since < 0) p.since = performance.now();
      this.early.push(p);
      this.hello();
      this.deadlines.armFor(p.since + p.timeoutMs);
      return;
    }
    if (p.op === ACQUIRE) this.deadlines.armFor(p.since + p.timeoutMs);
    if (this.checked(p)) this.push(p);
  }

  /** Runs the call's check if the limiter is described; false when it refused the call. */
  private checked(p: Pending): boolean {
    const d = p.check && this.served?.get(p.caller.name);
    if (!d) return true;
    try {
      (p.check as Check)(d, p.key, p.permits);
      return true;
    } catch (error) {
      this.settle(p, error);
      return false;
    }
  }

  /** Settles an acquire() locally (its signal aborted); a late lease is given back. */
  settleAcquire(id: number, error: unknown): void {
    const p = this.acquiring.get(id);
    if (p) this.settle(p, error);
  }

  /** Settles a call locally (abort, timeout, a failed check) before its answer comes. */
  settle(p: Pending, error: unknown): void {
    if (p.settled) return;
    p.settled = true;
    this.inFlight--;
    p.reject(error);
  }

  /** Gives a lease back to the primary (fire and forget). */
  drop(name: string, leaseId: number): void {
    this.record(name, DROP, leaseId);
  }

  /** Tells the primary to stop a pending acquire() (fire and forget). */
  abort(name: string, id: number): void {
    this.record(name, ABORT, id);
  }

  /** Gives permits back on the primary (fire and forget; its answer is ignored). */
  /** `extra`: GIVE's taking time. */
  giveBack(
    caller: Caller,
    op: typeof REFUND | typeof RELEASE | typeof GIVE,
    key: Key | undefined,
    n: number,
    extra = 0,
  ) {
    if (this.closed || !process.connected) return;
    this.push({
      resolve: ignore,
      reject: ignore,
      caller,
      op,
      key,
      permits: n,
      extra,
      settled: true,
      since: -1,
      id: 0,
      timeoutMs: Number.POSITIVE_INFINITY,
      check: undefined,
      batch: 0,
      at: 0,
    });
  }

  /**
   * Rejects every call of `caller` still waiting (its client was closed), and makes sure
   * none of them runs at the primary afterwards: those not sent yet leave this tick's
   * batch, and acquire() calls waiting there are aborted (a grant would take permits that
   * nobody spends). Calls already sent are answered; their late grants go back where that
   * is sound (giveBackLate()).
   */
  closeCaller(caller: Caller, error: Error): void {
    for (const p of this.early) if (p.caller === caller) this.settle(p, error);
    this.unqueue(caller, error);
    for (const b of this.sent.values()) {
      for (const p of b.calls) if (p.caller === caller) this.settle(p, error);
    }
    for (const p of this.acquiring.values()) {
      // Unsettled here means sent: early and unsent ones were settled above.
      if (p.caller !== caller || p.settled) continue;
      this.record(caller.name, ABORT, p.id);
      this.settle(p, error);
    }
    // The give-backs and aborts leave now, not at the end of the tick: a worker that closes
    // its client and then disconnects (or exits) in the same tick would otherwise drop them.
    this.flush();
  }

  /**
   * Rejects `caller`'s waiting calls that are still in this tick's batch and takes their
   * records out of it. The records of settled calls (give-backs), ABORT and DROP stay: a
   * closing client gives its blocks back in this batch. Walks the batch once; only
   * close() pays for it.
   */
  private unqueue(caller: Caller, error: Error): void {
    const c = this.out;
    const calls = this.outCalls;
    const out: Value[] = [];
    const kept: Pending[] = [];
    let records = 0; // in `out`: never more than before, so within the bounds still
    let name: Value = null; // the name the records at i address
    let named: string | undefined; // the last name written to `out`
    let k = 0; // the next call of `calls`: one per record but NAME, ACQUIRE, ABORT, DROP
    for (let i = 0; i < c.length; ) {
      const op = c[i] as number;
      if (op === NAME) {
        name = c[i + 1] as Value;
        i += 2;
        continue;
      }
      const width = op === ABORT || op === DROP ? 2 : (CALL_WIDTHS[op] as number);
      let p: Pending | undefined;
      if (op === ACQUIRE) p = this.acquiring.get(c[i + 1] as number);
      else if (op !== ABORT && op !== DROP) p = calls[k++];
      if (p !== undefined && p.caller === caller && !p.settled) {
        this.settle(p, error);
        if (op === ACQUIRE) this.acquiring.delete(p.id); // never sent: no outcome comes
      } else {
        if (named !== name) {
          named = name as string;
          out.push(NAME, named);
          records++;
        }
        for (let j = i; j < i + width; j++) out.push(c[j] as Value);
        records++;
        if (p !== undefined) {
          if (op === ACQUIRE) p.at = kept.length;
          else kept.push(p);
        }
      }
      i += width;
    }
    this.out = out;
    this.outRecords = records;
    this.outCalls = kept;
    this.outAwaited = kept.filter((p) => !p.settled).length;
    this.outName = named;
  }

  /**
   * Makes room in this tick's batch for a record of `width` values addressed to `name`,
   * and counts it. The batch leaves first when the record, with the NAME it may need, would
   * take it past MAX_CALLS_PER_BATCH records or MAX_RECORD_VALUES values: the primary
   * refuses a larger batch whole, and nothing of it runs — neither its calls nor the
   * give-backs (DROP, RELEASE, GIVE) it carries.
   */
  private room(name: string, width: number): void {
    const named = this.outName === name;
    if (
      this.outRecords + (named ? 1 : 2) > MAX_CALLS_PER_BATCH ||
      this.out.length + width + (named ? 0 : 2) > MAX_RECORD_VALUES
    ) {
      this.flush();
    }
    if (this.outName !== name) {
      this.out.push(NAME, name);
      this.outName = name;
      this.outRecords++;
    }
    this.outRecords++;
  }

  private record(name: string, op: number, value: number): void {
    if (this.closed || !process.connected) return;
    this.room(name, 2);
    this.out.push(op, value);
    this.schedule();
  }

  private push(p: Pending): void {
    this.room(p.caller.name, CALL_WIDTHS[p.op] as number);
    const key = p.key === undefined ? null : p.key;
    switch (p.op) {
      case STATS:
      case RESET:
        this.out.push(p.op, key);
        break;
      case TAKE:
      case GIVE:
        this.out.push(p.op, key, p.permits, p.extra);
        break;
      case ACQUIRE:
        p.batch = this.seq + 1; // the next batch to leave holds it
        p.at = this.outCalls.length;
        this.out.push(ACQUIRE, p.id, key, p.permits, p.extra);
        this.schedule();
        return; // answered on its own, by id
      default:
        this.out.push(p.op, key, p.permits);
    }
    this.outCalls.push(p);
    if (p.timeoutMs < this.outTimeoutMs) this.outTimeoutMs = p.timeoutMs;
    // Give-backs (settled from the start) are not in flight: they never send a batch early.
    if (!p.settled) {
      const n = ++this.outAwaited;
      if (n >= EARLY_BATCH_MIN && n * EARLY_BATCH_PARTS >= this.inFlight) {
        this.flush();
        return;
      }
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.flushing) return;
    this.flushing = true;
    // The calls of this tick not sent yet leave in one message (push() and room() may have
    // sent some).
    queueMicrotask(() => this.flush());
  }

  private flush(): void {
    this.flushing = false;
    if (this.out.length === 0) return;
    const calls = this.outCalls;
    const c = this.out;
    this.out = [];
    this.outRecords = 0;
    this.outCalls = [];
    this.outAwaited = 0;
    this.outName = undefined;
    const timeoutMs = this.outTimeoutMs;
    this.outTimeoutMs = Number.POSITIVE_INFINITY;
    const s = ++this.seq;
    if (calls.length > 0) {
      const sentAt = performance.now();
      this.sent.set(s, { sentAt, calls });
      // Batches whose answers never came (a primary that stopped answering) are forgotten
      // once their calls timed out, oldest first, so that they cannot pile up.
      if (this.sent.size > MAX_UNANSWERED_BATCHES) this.forgetOldest();
      this.deadlines.armFor(sentAt + timeoutMs);
    }
    this.send({ mark: MARK, t: 'c', s, c }, calls);
  }

  private forgetOldest(): void {
    for (const [s, b] of this.sent) {
      if (this.sent.size <= MAX_UNANSWERED_BATCHES / 2) return;
      if (b.calls.some((p) => !p.settled)) return;
      this.sent.delete(s);
    }
  }

  private send(msg: Message, calls?: Pending[]): void {
    if (!process.connected || !process.send) return;
    try {
      process.send(msg, undefined, undefined, (error: Error | null) => {
        if (!error || !calls) return;
        const e = new ClusterUnavailableError(
          `the call could not be sent to the cluster primary: ${error.message}`,
        );
        for (const p of calls) this.settle(p, e);
      });
    } catch (error) {
      if (!calls) return;
      for (const p of calls) this.settle(p, error);
    }
  }

  private onReady(served: Record<string, Description>): void {
    if (typeof served !== 'object' || served === null) return;
    this.served = new Map(Object.entries(served));
    const early = this.early;
    this.early = [];
    for (const p of early) {
      if (p.settled || !this.checked(p)) {
        if (p.op === ACQUIRE) this.acquiring.delete(p.id); // never sent: no outcome comes
        continue;
      }
      this.push(p);
    }
    for (const w of this.waitingForReady) w.resolve();
    this.waitingForReady.clear();
  }

  private onResults(
    s: number,
    v: unknown[],
    e: WireError | undefined,
    g: unknown[] | undefined,
  ): void {
    const batch = this.sent.get(s);
    // A batch of only acquire() calls is not tracked: it is answered by id, or refused.
    if (!batch) {
      if (e) this.refused(s, 0, fromWire(e));
      return;
    }
    this.sent.delete(s);
    if (Array.isArray(g)) this.ranAnyway(batch, g);
    let i = 0;
    let answered = 0;
    for (const p of batch.calls) {
      if (i >= v.length) {
        const error = e
          ? fromWire(e)
          : new ClusterUnavailableError('the cluster primary did not answer this call');
        if (!p.settled) this.settle(p, error);
        continue;
      }
      answered++;
      const x = v[i];
      if (typeof x === 'object' && x !== null) {
        i++;
        if (!p.settled) this.settle(p, fromWire(x as WireError));
        continue;
      }
      const value = readAnswer(p.op, v, i);
      i += answerWidth(p.op);
      if (!p.settled) {
        p.settled = true;
        this.inFlight--;
        p.resolve(value);
      } else this.late(p, value);
    }
    if (e) this.refused(s, answered, fromWire(e));
  }

  /**
   * A batch the primary refused whole, whose give-backs (release(), refund(), a block or a
   * late grant given back) it ran all the same: `g` pairs a call's place in the batch with
   * its answer (0, or an error). Those calls settle as they ran; the others reject after.
   */
  private ranAnyway(batch: Batch, g: unknown[]): void {
    for (let j = 0; j + 1 < g.length; j += 2) {
      const p = batch.calls[g[j] as number];
      if (p === undefined || p.settled) continue;
      const x = g[j + 1];
      if (typeof x === 'object' && x !== null) this.settle(p, fromWire(x as WireError));
      else {
        p.settled = true;
        this.inFlight--;
        p.resolve(undefined);
      }
    }
  }

  /**
   * Batch `s` came back with an error after `answered` answers: the primary ran its records
   * up to the one it refused (none, for a batch refused whole). Its acquire() calls settle
   * with `error` too, or they would wait for an outcome by id that never comes. One with
   * more answered calls before it than came was not run. One with exactly as many may have
   * run before the refused record: it is aborted there and stays known, so that a grant
   * that comes anyway goes back.
   */
  private refused(s: number, answered: number, error: Error): void {
    for (const [id, p] of this.acquiring) {
      if (p.batch !== s || p.at < answered) continue; // it ran: its outcome comes
      if (p.at > answered) this.acquiring.delete(id);
      else if (!p.settled) this.record(p.caller.name, ABORT, id);
      this.settle(p, error);
    }
  }

  /** An answer after its caller stopped waiting: permits it granted go back. */
  private late(p: Pending, value: unknown): void {
    if (p.op === TAKE) {
      const { granted, takenUs } = value as Grant;
      if (granted > 0) this.giveBack(p.caller, GIVE, p.key, granted, takenUs);
    } else if (p.op === TRY || p.op === CONSUME) {
      const allowed = p.op === TRY ? value === true : (value as Decision).allowed;
      if (allowed) this.giveBackLate(p);
    }
  }

  /**
   * Gives back the permits of a TRY, CONSUME or acquire() grant nobody waits for any more:
   * a Concurrency's are released, a bucket's refunded (TIMELESS). A window's or a
   * SlidingLog's stay counted where they were taken: the answer does not say when that was,
   * and credited later they would admit more there than the limit.
   */
  private giveBackLate(p: Pending): void {
    if (p.caller.concurrency) this.giveBack(p.caller, RELEASE, p.key, p.permits);
    else if (TIMELESS.has(this.served?.get(p.caller.name)?.algorithm)) {
      this.giveBack(p.caller, REFUND, p.key, p.permits);
    }
  }

  private onAcquired(v: unknown[]): void {
    for (let i = 0; i + 2 < v.length; i += 3) {
      const id = v[i] as number;
      const p = this.acquiring.get(id);
      if (!p) continue;
      this.acquiring.delete(id);
      if (v[i + 1] === 1) {
        const leaseId = v[i + 2] as number;
        if (!p.settled) {
          p.settled = true;
          this.inFlight--;
          p.resolve(leaseId);
        } else if (p.caller.concurrency) this.drop(p.caller.name, leaseId);
        else this.giveBackLate(p);
      } else if (!p.settled) this.settle(p, fromWire(v[i + 2] as WireError));
    }
  }

  /** Times out every call past its deadline; returns the earliest deadline left. */
  private expire(now: number): number {
    let next = Number.POSITIVE_INFINITY;
    for (const p of this.early) next = Math.min(next, this.expireOne(p, p.since, now));
    for (const b of this.sent.values()) {
      for (const p of b.calls) {
        next = Math.min(next, this.expireOne(p, p.since < 0 ? b.sentAt : p.since, now));
      }
    }
    for (const p of this.acquiring.values()) {
      next = Math.min(next, this.expireOne(p, p.since, now));
      // Its outcome is still wanted (a late lease goes back); only a settled entry
      // whose answer never comes would stay: bounded below.
    }
    if (this.acquiring.size > 100_000) {
      for (const [id, p] of this.acquiring) {
        if (!p.settled) continue;
        this.acquiring.delete(id);
        if (this.acquiring.size <= 50_000) break;
      }
    }
    this.early = this.early.filter((p) => {
      if (p.settled && p.op === ACQUIRE) this.acquiring.delete(p.id); // never sent
      return !p.settled;
    });
    return next;
  }

  /** Times `p` out if its deadline has passed; its deadline if it still waits, else Infinity. */
  private expireOne(p: Pending, since: number, now: number): number {
    if (p.settled) return Number.POSITIVE_INFINITY;
    const deadline = since + p.timeoutMs;
    if (!due(deadline, now)) return deadline;
    this.settle(
      p,
      new ClusterTimeoutError(
        `${p.caller.name}: no answer from the cluster primary within ${p.caller.timeoutMs} ms`,
      ),
    );
    return Number.POSITIVE_INFINITY;
  }

  /** The channel closed: every call in flight rejects, later calls reject at once. */
  private shutDown(): void {
    this.closed = true;
    const error = new ClusterUnavailableError('the IPC channel to the cluster primary closed');
    for (const p of this.early) this.settle(p, error);
    for (const p of this.outCalls) this.settle(p, error);
    for (const b of this.sent.values()) for (const p of b.calls) this.settle(p, error);
    for (const p of this.acquiring.values()) this.settle(p, error);
    // No 'ready' can come now: ready() rejects as the calls do, not at its timeout.
    for (const w of this.waitingForReady) w.reject(error);
    this.waitingForReady.clear();
    this.early = [];
    this.sent.clear();
    this.acquiring.clear();
    this.deadlines.clear();
  }
}
