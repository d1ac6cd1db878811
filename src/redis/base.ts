import { LimiterClosedError } from '../errors.js';
import type { Key } from '../limiter.js';
import type { AcquireOptions, AlgorithmName, Decision, Stats } from '../options.js';
import { acquireOptions, checkPermits, permitsError, rangeError, show } from '../validate.js';
import { composeScript } from './compose.lua.js';
import { NO_PARAMS } from './fields.js';
import { Blocks } from './fleet/blocks.js';
import { Fleet } from './fleet/fleet.js';
import { slotOf, tagOf } from './keys.js';
import { WaitingLine } from './line.js';
import {
  MANUAL_SLACK_MS,
  REDIS_TIME_SLACK_MS,
  type RedisHandle,
  type RedisLease,
} from './options.js';
import { Reconfigurable } from './options-record.js';
import { decisionOf, decisionOfReply, type Reply } from './replies.js';
import type { Rule } from './rule.js';
import { type Call, failedFast, Script, Unavailable } from './runner.js';
import { NEWER_ERROR } from './state.lua.js';
import {
  acquireUnavailable,
  decideUnavailable,
  NO_OP_LEASE,
  type PolicyHost,
  reportLost,
} from './unavailable.js';
import { sleepUs, Waiter } from './wait.js';

export {
  BLOCKS,
  type LocalLimiter,
  MANUAL_SLACK_MS,
  REDIS_OPTIONS,
  REDIS_TIME_SLACK_MS,
  type RedisCommon,
  type RedisHandle,
  type RedisLease,
  type RedisOptions,
  readRedisCommon,
  type WhenUnavailable,
} from './options.js';
export type { OptionsAt } from './options-record.js';
export { NO_OP_LEASE, reportLost } from './unavailable.js';
export type { AlgorithmName };

const SLACK_ARG = String(MANUAL_SLACK_MS);
/** The ops that may grant permits: a decision, a wait's try, a reservation. */
const GRANTS = new Set(['t', 'c', 'w', 'q']);
const REDIS_SLACK_ARG = String(REDIS_TIME_SLACK_MS);

/**
 * What the seven Redis limiters share: their scripts and calls, the failure policy, fleet
 * mode's start, the per-key local wait queues of acquire(). The options record and
 * reconfigure() are options-record.ts; the fields every part reads, fields.ts. Each
 * subclass names its script, keys and parameters, and how acquire() waits.
 *
 * Fleet mode (`block: n`) is one more op of the same scripts (take up to n permits), spent
 * locally (fleet/): nothing here assumes one permit per round trip.
 */
export abstract class RedisLimiter extends Reconfigurable {
  abstract readonly algorithm: AlgorithmName;
  /** @internal This process's waiters per key (line.ts). */
  private readonly line = new WaitingLine();
  /** @internal */
  private readonly waiters = new Set<Waiter>();
  /** @internal */
  private fleet: Fleet | undefined;
  /** @internal True for the limiter that made the blocks (its close() gives them back). */
  private ownsBlocks = false;
  /** @internal */
  private sweep: ReturnType<typeof setInterval> | undefined;

  /**
   * Opens fleet mode's blocks; subclasses call it once `limit` is known. `leasesGrow`: a hot
   * key's leases may grow past one block, up to `maxBlock` (LeakyBucket: no, a lease is a
   * burst there).
   * @internal
   */
  protected startFleet(leasesGrow = true): void {
    const c = this.common;
    if (c.block === 0) return;
    if (c.block > this.limit) {
      throw rangeError(
        `${this.owner}: option "block" must be from 1 to the limit (${this.limit}), got ${show(c.block)}`,
      );
    }
    // A LeakyBucket's lease is a burst: its leases never grow, so maxBlock is refused there,
    // even equal to block (README).
    if (c.maxBlock > this.limit || (!leasesGrow && c.options.maxBlock !== undefined)) {
      throw rangeError(
        leasesGrow
          ? `${this.owner}: option "maxBlock" must be from "block" to the limit (${this.limit}), got ${show(c.maxBlock)}`
          : `${this.owner}: option "maxBlock" is not for a LeakyBucket (its lease is a burst: leases stay one block), got ${show(c.maxBlock)}`,
      );
    }
    const most = leasesGrow ? c.maxBlock : c.block;
    // What fleet mode asks of this limiter (fleet/fleet.ts), bound once.
    const self = this;
    const host = {
      // Read at each use: reconfigure() changes it.
      get limit() {
        return self.limit;
      },
      block: this.block,
      blockTtlMs: this.blockTtlMs,
      timeoutMs: this.timeoutMs,
      closed: () => this.closed,
      localMs: () => this.localMs(),
      manualTime: this.clock !== undefined,
      call: (op: string, tag: string, permits: number, extra: string) =>
        this.call(op, tag, permits, extra),
      sendNow: () => this.runner.flushNow(),
      parse: (reply: unknown) => this.parse(reply),
      badReply: (reply: unknown) => this.badReply(reply),
      fallback: (error: unknown, key: Key | undefined, permits: number) =>
        this.fallback(error, key, permits),
      direct: (tag: string, key: Key | undefined, permits: number) =>
        this.directConsume(tag, key, permits),
      giveBack: (tag: string, permits: number, takenUs: string) =>
        this.giveBack(tag, permits, takenUs),
      lost: reportLost,
    };
    if (c.blocks) {
      this.fleet = new Fleet(new Blocks(c.blocks), host, most, leasesGrow, c.leaseAhead);
      return;
    }
    const fleet = new Fleet(new Blocks(c.blockKeys), host, most, leasesGrow, c.leaseAhead);
    this.fleet = fleet;
    this.ownsBlocks = true;
    // Blocks nobody touches still age out: their permits go back. Nobody awaits the sweep,
    // so a give-back that cannot reach Redis is reported as a warning, never an unhandled
    // rejection (which would end the host process).
    this.sweep = setInterval(() => fleet.giveBack(true).catch(reportLost), this.blockTtlMs);
    this.sweep.unref();
  }

  /**
   * What another thread needs to open this limiter over the same blocks with
   * `attach(handle, { redis })`: structured-cloneable. A `whenUnavailable` limiter does not
   * travel (attach() may give one).
   */
  get handle(): RedisHandle {
    const options: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(this.common.options)) {
      if (k === 'redis' || k === 'clock') continue;
      if (k === 'whenUnavailable' && typeof v === 'object') continue;
      options[k] = v;
    }
    return {
      kind: 'atomic-limiter/redis',
      algorithm: this.algorithm,
      options,
      clock: this.clock?.handle,
      blocks: this.fleet?.blocks.handle,
    };
  }

  /** @internal Local time in ms for block ages and cached refusals (the ManualClock's when given). */
  private localMs(): number {
    return this.clock ? this.clock.nowUs() / 1000 : performance.timeOrigin + performance.now();
  }

  /** @internal */
  private directConsume(tag: string, key: Key | undefined, permits: number): Promise<Decision> {
    const id = this.grantId();
    return this.grantCall('c', tag, permits, id).then(this.decide, (error) =>
      this.fallback(error, key, permits),
    );
  }

  /** @internal A consume() reply as its Decision (made once: no closure per call). */
  private readonly decide = (reply: unknown): Decision =>
    decisionOfReply(this.script.name, reply, this.limit);

  /** @internal Redis keys of a tag; every one carries `{tag}`, so all share one slot. */
  protected keysOf(tag: string): readonly string[] {
    return [`${this.keyPrefix}{${tag}}`];
  }

  /** The Redis key names of `key` (for inspection and tests). */
  redisKeys(key?: Key): readonly string[] {
    return this.keysOf(tagOf(this.owner, key));
  }

  /**
   * Single-call forms for tryAcquire() ('t'), consume() ('c') and a fleet lease ('b'): what
   * such a call runs when it goes alone (not in a batch).
   * @internal
   */
  protected tryScript: Script | undefined;
  /** @internal */
  protected consumeScript: Script | undefined;
  /** @internal */
  protected leaseScript: Script | undefined;

  /**
   * @internal Sets the limiter's scripts, composed from its algorithm's rule (compose.lua.ts);
   * `singles`: whether calls alone take the single-call forms.
   */
  protected useRule(rule: Rule, singles = true): void {
    const forms = composeScript(rule, this.ttlSlackMs);
    const name = `atomic-limiter:${rule.name}`;
    this.script = new Script(name, forms.driver, forms.batch);
    if (!singles) return;
    this.tryScript = new Script(`${name}-try`, forms.single('t'), undefined, true);
    this.consumeScript = new Script(`${name}-consume`, forms.single('c'), undefined, true);
    if (this.block > 0) {
      this.leaseScript = new Script(`${name}-lease`, forms.single('b'), undefined, true);
    }
  }

  /** @internal Runs `op`; `force`: also after close() (give-backs: nothing taken is kept). */
  protected call(
    op: string,
    tag: string,
    permits: number,
    extra = '',
    force = false,
    late?: (reply: unknown) => void,
  ): Promise<unknown> {
    if (this.closed && !force) return Promise.reject(new LimiterClosedError());
    if (this.foreign) return Promise.reject(this.foreign);
    const head = [
      op,
      this.clock ? String(this.clock.nowUs()) : '',
      permits === 1 ? '1' : String(permits),
      extra,
      this.clock ? SLACK_ARG : REDIS_SLACK_ARG,
    ];
    // Another process's reconfigure(): the record is read first, at most once per
    // configRefreshMs (a read every call with 0). Calls made while it is read wait for it
    // too, in order: calls keep the order they were made in.
    // The slot only groups a Cluster's batches; standalone it is not computed.
    const keys = this.keysOf(tag);
    const slot = this.adapter.cluster ? slotOf(tag) : 0;
    if (this.reading !== undefined || this.clockMs() >= this.pollAtMs) {
      const reading = this.refresh();
      if (reading !== undefined) {
        const known = this.limit;
        return reading.then((error) =>
          error === undefined ? this.send(keys, slot, head, late, 0, known) : Promise.reject(error),
        );
      }
    }
    return this.send(keys, slot, head, late, 0);
  }

  /**
   * @internal Runs a call under the options this limiter has now. A key written under newer
   * options stops it unchanged (NEWER): the record is read, and the call runs again under
   * them (again()). `known`: the limit when the call was made, if options were read since.
   */
  private send(
    keys: readonly string[],
    slot: number,
    head: readonly string[],
    late: ((reply: unknown) => void) | undefined,
    tries: number,
    known?: number,
  ): Promise<unknown> {
    if (this.foreign) return Promise.reject(this.foreign);
    const op = head[0];
    // Permits were checked against the limit when the call was made; options read since
    // (the record, or a key of newer options) may have lowered it below them: a RangeError
    // then, as a call made under them gets (the scripts take permits past the limit as
    // never asked).
    if (
      known !== undefined &&
      this.limit < known &&
      GRANTS.has(op!) &&
      Number(head[2]) > this.limit
    ) {
      return Promise.reject(permitsError(this.owner, Number(head[2]), this.limit));
    }
    const alone =
      (op === 't'
        ? this.tryScript
        : op === 'c'
          ? this.consumeScript
          : op === 'b'
            ? this.leaseScript
            : undefined) ?? this.script;
    return this.runner.run(
      this.script,
      alone,
      keys,
      head,
      NO_PARAMS,
      slot,
      late,
      this.again,
      tries,
    );
  }

  /** @internal A call's script error (runner.ts Again): NEWER reads the record, then again. */
  private readonly again = (error: Error, c: Call): Promise<unknown> | undefined => {
    const newer = NEWER_ERROR.exec(error.message);
    if (newer === null) return undefined;
    if (c.tries >= 3) {
      return Promise.reject(
        new Error(
          `atomic-limiter/redis: ${this.owner}: ${c.keys[0]} holds a state of options version ${newer[1]}, and the options record ${this.recordKey[0]} is at version ${this.version}`,
        ),
      );
    }
    const known = this.limit;
    return (this.refresh() ?? Promise.resolve(undefined)).then((error) =>
      error === undefined
        ? this.send(c.keys, c.slot, c.head, c.late, c.tries + 1, known)
        : Promise.reject(error),
    );
  };

  /**
   * Runs a call that may grant ('t', 'c', 'w'). Where a grant has an id (Concurrency), a
   * call that got no answer may still have granted: lostGrant() is told.
   * @internal
   */
  private grantCall(op: 't' | 'c' | 'w', tag: string, permits: number, id: string) {
    const pending = this.call(op, tag, permits, id, false, this.lateGrant(op, tag, permits, id));
    if (id !== '') {
      pending.catch((error) => {
        if (error instanceof Unavailable && !failedFast(error)) {
          this.lostGrant(op, tag, permits, id);
        }
      });
    }
    return pending;
  }

  /**
   * A call that may have granted (`id`: its grant's) got no answer from Redis: its reply
   * was lost, came from elsewhere or not in time. Concurrency frees such a grant by its id.
   * @internal
   */
  protected lostGrant(_op: 't' | 'c' | 'w', _tag: string, _permits: number, _id: string): void {}

  /**
   * What to do with the reply of a grant ('t', 'c') that came after its call failed by
   * timeoutMs (undefined: nothing). Concurrency gives back a grant nobody holds.
   * @internal
   */
  protected lateGrant(_op: 't' | 'c' | 'w', _tag: string, _permits: number, _id: string) {
    return undefined as ((reply: unknown) => void) | undefined;
  }

  /**
   * @internal A call refused for `permits` above the limit this limiter knows: with
   * configRefreshMs 0 (the record read before every call) another process's reconfigure()
   * may have raised it, so the record is read, and the call made again if the limit
   * changed; else `error`, before any Redis call.
   */
  protected checkedAgain<T>(error: unknown, permits: unknown, again: () => Promise<T>): Promise<T> {
    if (
      this.configRefreshMs > 0 ||
      this.closed ||
      this.foreign ||
      typeof permits !== 'number' ||
      !Number.isInteger(permits) ||
      permits <= this.limit
    ) {
      return Promise.reject(error);
    }
    const limit = this.limit;
    return (this.refresh() ?? Promise.resolve()).then(() =>
      this.limit !== limit ? again() : Promise.reject(error),
    );
  }

  /** @internal Throws unless the limiter is open and `permits` is what the limit allows. */
  protected checkCall(method: string, permits: unknown): void {
    if (this.closed) throw new LimiterClosedError();
    checkPermits(method, permits, this.limit);
  }

  /** @internal */
  protected decision(r: Reply): Decision {
    return decisionOf(r, this.limit);
  }

  /** @internal What the unavailability policy reads of this limiter (on a failure only). */
  private policyHost(): PolicyHost {
    const { owner, limit, timeoutMs, whenUnavailable } = this;
    return { owner, limit, timeoutMs, whenUnavailable };
  }

  /** @internal The failure policy, for a call whose answer Redis could not give. */
  protected fallback(
    error: unknown,
    key: Key | undefined,
    permits: number,
  ): Decision | PromiseLike<Decision> {
    return decideUnavailable(this.policyHost(), error, key, permits);
  }

  /** Takes `permits` for `key` if the limit allows; never waits. */
  tryAcquire(key?: Key, permits = 1): Promise<boolean> {
    let tag: string;
    try {
      this.checkCall(this.owner, permits);
      tag = tagOf(this.owner, key);
    } catch (error) {
      return this.checkedAgain(error, permits, () => this.tryAcquire(key, permits));
    }
    if (this.fleet && permits <= this.block) return this.fleet.tryAcquire(tag, key, permits);
    const id = this.grantId();
    return this.grantCall('t', tag, permits, id).then(
      this.tryReply,
      async (error) => (await this.fallback(error, key, permits)).allowed,
    );
  }

  /** @internal A tryAcquire() reply as its answer (made once: no closure per call). */
  private readonly tryReply = (reply: unknown): boolean => {
    if (reply === 1) return true;
    if (reply === 0) return false;
    throw this.badReply(reply);
  };

  /** Like `tryAcquire`, and explains the outcome: the same Decision as in memory. */
  consume(key?: Key, permits = 1): Promise<Decision> {
    let tag: string;
    try {
      this.checkCall(this.owner, permits);
      tag = tagOf(this.owner, key);
    } catch (error) {
      return this.checkedAgain(error, permits, () => this.consume(key, permits));
    }
    if (this.fleet && permits <= this.block) return this.fleet.consume(tag, key, permits);
    return this.directConsume(tag, key, permits);
  }

  /** @internal Lease id of a grant (Concurrency); '' for rate limiters. */
  protected grantId(): string {
    return '';
  }

  /**
   * Gives `permits` back to `key` (never above its limit), as permits taken just now.
   * Rejects with BackendUnavailableError when Redis cannot be reached: never dropped.
   */
  refund(key?: Key, permits = 1): Promise<void> {
    let tag: string;
    try {
      this.checkCall(`${this.owner}.refund`, permits);
      tag = tagOf(this.owner, key);
    } catch (error) {
      return this.checkedAgain(error, permits, () => this.refund(key, permits));
    }
    const back = this.giveBack(tag, permits, '');
    const fleet = this.fleet;
    if (!fleet) return back;
    // Fleet mode: the key may have permits again, so this process's cached refusal of it
    // goes, for every thread: the next decision asks Redis. Cleared once Redis has answered
    // (a refusal cached meanwhile was Redis's word before the refund), or failed to.
    return back.finally(() => {
      const s = fleet.blocks.slotOf(tag);
      if (s >= 0) fleet.blocks.refuse(s, 0);
    });
  }

  /** @internal Runs a refund; `takenUs` ('' for now) is when the permits were taken. */
  protected giveBack(tag: string, permits: number, takenUs: string): Promise<void> {
    return this.call('r', tag, permits, takenUs, true).then(
      (reply) => {
        if (this.num(reply, 0) !== 1) throw this.badReply(reply);
      },
      (error) => {
        throw this.unavailableError(error);
      },
    );
  }

  /** The key's counters and the permits available now; `queued` counts this process's waiters. */
  stats(key?: Key): Promise<Stats> {
    let tag: string;
    try {
      tag = tagOf(this.owner, key);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.call('s', tag, 1).then(
      (reply) => ({
        available: this.num(reply, 0),
        queued: this.queuedPermits(tag),
        // Exact, wrapping at 2^32, as in memory (Redis keeps them whole).
        admitted: this.num(reply, 1) % 2 ** 32,
        rejected: this.num(reply, 2) % 2 ** 32,
      }),
      (error) => {
        throw this.unavailableError(error);
      },
    );
  }

  /** Puts `key` back in its initial state and zeroes its counters (deletes its keys). */
  reset(key?: Key): Promise<void> {
    let tag: string;
    try {
      tag = tagOf(this.owner, key);
      if (this.closed) throw new LimiterClosedError();
    } catch (error) {
      return Promise.reject(error);
    }
    // Fleet mode: the key starts afresh, so this process's block and cached refusal go too,
    // and leases still out land in nothing (Blocks.add()): now, for those sent before the
    // reset, and again once Redis has run it, for those sent meanwhile (their permits may
    // have been taken before it; one taken after it is dropped unspent, the safe direction).
    const blocks = this.fleet?.blocks;
    const s = blocks ? blocks.slotOf(tag) : -1;
    if (s >= 0) blocks!.forget(s);
    return this.call('x', tag, 1).then(
      () => {
        if (s >= 0) blocks!.forget(s);
      },
      (error) => {
        if (s >= 0) blocks!.forget(s);
        throw this.unavailableError(error);
      },
    );
  }

  /**
   * Stops this limiter's own work: every later call rejects with LimiterClosedError, and so
   * do its pending acquire() calls. The Redis client stays the caller's.
   */
  close(): Promise<void> {
    const first = !this.closed;
    this.closed = true;
    for (const w of [...this.waiters]) w.stop(new LimiterClosedError());
    for (const stop of [...this.stops]) stop();
    if (this.sweep) clearInterval(this.sweep);
    // Fleet mode: this thread's leases still out land in the blocks first; then the limiter
    // that made the blocks gives their unspent permits back (attach()ed ones leave them to
    // it: other threads may still be spending them).
    const fleet = this.fleet;
    const back =
      first && fleet
        ? fleet.settled().then(() => (this.ownsBlocks ? fleet.giveBack(false) : undefined))
        : Promise.resolve();
    return Promise.all([back, this.onClose()]).then(() => {});
  }

  /** @internal */
  protected onClose(): Promise<void> {
    return Promise.resolve();
  }

  // ---- acquire() -------------------------------------------------------------------

  /**
   * Takes `permits` for `key`, waiting when they are not there yet. Resolves with a Lease;
   * rejects with QueueFullError past `queueLimit`, LimiterClosedError on close(), the
   * signal's reason on abort, a TimeoutError after `timeoutMs`.
   */
  acquire(key?: Key, permits = 1, options: AcquireOptions = {}): Promise<RedisLease> {
    let tag: string;
    let w: Waiter;
    try {
      const { signal, timeoutMs } = acquireOptions(this.owner, options);
      this.checkCall(this.owner, permits);
      tag = tagOf(this.owner, key);
      if (signal?.aborted) return Promise.reject(signal.reason);
      w = new Waiter(tag, permits, signal, timeoutMs);
    } catch (error) {
      return this.checkedAgain(error, permits, () => this.acquire(key, permits, options));
    }
    // One deadline bounds the whole call: a fallback gets what the Redis wait left of it.
    // (timeoutMs 0 never waits: the fallback is given 0 too.)
    const deadline = !options.timeoutMs ? 0 : performance.now() + options.timeoutMs;
    this.waiters.add(w);
    return this.waitFor(w).then(
      (lease) => {
        this.waiters.delete(w);
        w.finish();
        return lease;
      },
      (error) => {
        this.waiters.delete(w);
        w.finish();
        if (error instanceof Unavailable)
          return this.acquireElsewhere(error, key, permits, options, deadline);
        throw error;
      },
    );
  }

  /**
   * @internal An acquire() that Redis could not answer, by the policy. A fallback limiter's
   * acquire() may wait long in Redis's place: it is given a signal that close() aborts too,
   * so that close() rejects it with LimiterClosedError as it does every waiter of its own.
   */
  private acquireElsewhere(
    error: Unavailable,
    key: Key | undefined,
    permits: number,
    options: AcquireOptions,
    deadline: number,
  ): RedisLease | PromiseLike<RedisLease> {
    if (this.closed) throw new LimiterClosedError();
    if (typeof this.whenUnavailable !== 'object') {
      return acquireUnavailable(this.policyHost(), error, key, permits, options, deadline);
    }
    const closing = new AbortController();
    const signal = options.signal;
    const stop = () => closing.abort(new LimiterClosedError());
    const abort = () => closing.abort(signal!.reason);
    this.stops.add(stop);
    signal?.addEventListener('abort', abort, { once: true });
    if (signal?.aborted) abort();
    const leave = () => {
      this.stops.delete(stop);
      signal?.removeEventListener('abort', abort);
    };
    try {
      const rest = { ...options, signal: closing.signal };
      const lease = acquireUnavailable(this.policyHost(), error, key, permits, rest, deadline);
      return Promise.resolve(lease).finally(leave);
    } catch (failure) {
      leave();
      throw failure;
    }
  }

  /** @internal How this algorithm waits; the default waits in line and retries after retryAfterMs. */
  protected waitFor(w: Waiter): Promise<RedisLease> {
    return this.waitInLine(w);
  }

  /** @internal */
  protected lease(_tag: string, _permits: number, _id: string): RedisLease {
    return NO_OP_LEASE;
  }

  /** @internal Permits this process has waiting for `tag`. */
  protected queuedPermits(tag: string): number {
    return this.line.queued(tag);
  }

  /**
   * Windows, log and Concurrency: this process's waiters for a key form a FIFO line; only
   * its head asks Redis, after each refusal's retryAfterMs (Concurrency: when a release is
   * published or the earliest lease expires). Across processes heads race: see README.
   * @internal
   */
  private waitInLine(w: Waiter): Promise<RedisLease> {
    return this.line.wait(w, this.owner, this.queueLimit, this.attemptFn, this.pauseFn);
  }

  /** @internal attempt() and pause(), bound once. */
  private readonly attemptFn = (w: Waiter) => this.attempt(w);
  /** @internal */
  private readonly pauseFn = (w: Waiter, r: Reply) => this.pause(w, r);

  /** @internal One waiter's try; a grant that lands after the waiter was cancelled is given back. */
  private async attempt(w: Waiter): Promise<{ lease?: RedisLease; reply?: Reply }> {
    if (this.closed) throw new LimiterClosedError();
    // A reconfigure() lowered the limit below what the waiter asks: it can never be granted,
    // a RangeError as in memory (the scripts take permits past the limit as never asked).
    if (w.permits > this.limit) throw permitsError(this.owner, w.permits, this.limit);
    const id = this.grantId();
    w.woken = false;
    // 'w': a caller about to wait is not counted as refused (as in memory).
    const pending = this.grantCall('w', w.tag, w.permits, id).then((reply) => this.parse(reply));
    pending.then(
      (r) => {
        if (r.allowed && w.done) this.undoGrant(w.tag, w.permits, id, r.nowUs);
      },
      () => {},
    );
    const r = await w.race(pending);
    return r.allowed ? { lease: this.lease(w.tag, w.permits, id) } : { reply: r };
  }

  /** @internal Gives back what a cancelled waiter was granted. */
  protected undoGrant(tag: string, permits: number, _id: string, nowUs: number): void {
    this.giveBack(tag, permits, String(nowUs)).catch(reportLost);
  }

  /** @internal How the head waits after a refusal: the refusal's retryAfterMs. */
  protected pause(w: Waiter, r: Reply): Promise<void> {
    const us = Number.isFinite(r.retryAfterUs) ? r.retryAfterUs : 1000;
    return Promise.race([sleepUs(this.clock, us, w), this.changed]);
  }
}
