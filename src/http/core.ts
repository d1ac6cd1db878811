import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { types } from 'node:util';
import { QueueFullError, warnGiveBackFailed } from '../errors.js';
import type { Key } from '../limiter.js';
import type { Decision, Lease } from '../options.js';
import { isKey, isPermits, isThenable, rangeError, show, typeError } from '../validate.js';
import { clientAddress } from './address.js';
import { docsAnchor, noAddressError } from './client-key.js';
import { closed, giveBack, release, releaseLate, tookFrom, whenGone } from './give-back.js';
import {
  flattenDecisions,
  HeaderWriter,
  isChain,
  type LimiterFace,
  retryAfterSeconds,
  retryAfterWaited,
} from './headers.js';
import type { Config } from './options.js';
import type { Plan } from './plan.js';

/**
 * The one decision path every server style shares. `run()` answers synchronously while
 * everything it calls does (an in-memory limiter: no promise, nothing allocated beyond the
 * header strings) and returns a promise as soon as something answers with one (a key
 * function, a cluster client, Redis, a chain with such members, `wait`).
 */

/** What `Host.visit` returns for a request the engine has decided already. */
export const REVISIT: unique symbol = Symbol('atomic-limiter/http: revisit');

/** The request may go on. */
export const GO = 1;
/** The request was answered (refused), or its client is gone: do not go on. */
export const ANSWERED = 0;
export type Outcome = typeof GO | typeof ANSWERED;

/** What the engine needs from a server style (Express/Connect/node:http, Fastify). */
export interface Host<Req, Res> {
  raw(req: Req): IncomingMessage;
  rawRes(res: Res): ServerResponse;
  /** The framework's own idea of the client address (`req.ip`), if it has one. */
  ip(req: Req): unknown;
  /** Whether the framework believes X-Forwarded-For from any client (trust proxy: true). */
  trustsAnyProxy(req: Req): boolean;
  /** The setting that decides which proxies are trusted, for messages. */
  trustName(req: Req): string;
  /**
   * Records that `engine` is deciding this request, and returns what `writeFields` will
   * write its fields through (the host's own handle, looked up once per request); REVISIT
   * if it already had: the same middleware mounted twice on a path must not count one
   * request twice.
   */
  visit(req: Req, res: Res, engine: object): unknown;
  /**
   * Writes the decision's fields, and `Retry-After` when given, unless the response has
   * started; false if it had (then nothing was written). `via`: what `visit` returned.
   */
  writeFields(
    res: Res,
    via: unknown,
    writer: HeaderWriter,
    d: Decision,
    retryAfter: string | undefined,
  ): boolean;
  /**
   * Sends a refusal: `body` is a string (text/plain) or any other value (JSON); with
   * `Retry-After` when given.
   */
  send(res: Res, statusCode: number, body: unknown, retryAfter?: string): void;
  /** Whether the response has been sent or has started. */
  answered(res: Res): boolean;
}

/**
 * What goes to a framework's error path: an Error as it is; any other value thrown or
 * rejected with, wrapped (as `cause`). Express, Connect and Fastify take `next(undefined)`
 * (or null, 0, '') for "go on", and Express `next('route')` for "skip this route": passed
 * as they are, such values would let the request through unlimited.
 */
export function asError(owner: string, thrown: unknown, by = "an option's function"): Error {
  if (thrown instanceof Error || types.isNativeError(thrown)) return thrown as Error;
  return new Error(`${owner}: ${by} threw or rejected with ${show(thrown)}, not an Error`, {
    cause: thrown,
  });
}

/** An error the limiter (its backend) raised, rather than the middleware's configuration. */
const limiterErrors = new WeakSet<object>();
export function isLimiterError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && limiterErrors.has(error);
}
function markLimiterError(owner: string, thrown: unknown): Error {
  const error = asError(owner, thrown, 'the limiter');
  limiterErrors.add(error);
  return error;
}

/**
 * Whether queueing can admit a refused request: not while a key table is full of held
 * permits, nor while a backend cannot be reached (a refusal of `whenUnavailable: 'deny'`,
 * the chain's own or a member's: acquire() fails as unavailable).
 */
function waitHelps(limiter: unknown, d: Decision): boolean {
  if (d.reason === 'table-full' || d.reason === 'unavailable') return false;
  if (!isChain(limiter)) return true;
  for (const x of flattenDecisions(limiter, d)) {
    if (x !== undefined && !x.allowed && x.reason === 'unavailable') return false;
  }
  return true;
}

const MAX_WARNINGS = 20;
/** Sets give-back failures apart from other warnings of the same message (see warned). */
const RELEASE_PREFIX = 'release: ';

/**
 * `Retry-After` of the 503 sent when the limiter's backend cannot be reached: when it
 * returns is unknown, so a short wait, as a hint to come back soon rather than hammer.
 */
const UNAVAILABLE_RETRY_AFTER = '1';

export class Engine<Req, Res> {
  private warnedNoAddress = false;
  private warnedTrustAll = false;
  private warnedForwarded = false;
  // Engines of other middlewares with the same limiter (see addPeers()); none once a
  // request counted twice was reported.
  private peers: Set<Engine<Req, Res>> | undefined;
  private warnedTwice = false;
  // The last request this engine decided, and its key (for the peers' check).
  private lastRaw: IncomingMessage | undefined;
  private lastKey: Key = '';
  // Whether addressKey() still looks for the proxy misconfigurations (see checkProxy()).
  private watchProxy = true;
  // Failure messages reported as warnings (at most MAX_WARNINGS distinct ones).
  private readonly warned = new Set<string>();

  constructor(
    private readonly host: Host<Req, Res>,
    private readonly c: Config<Req, Res>,
    private readonly owner: string,
  ) {
    if (c.trustProxy === true) {
      this.warnConfig(
        'ATOMIC_LIMITER_PERMISSIVE_TRUST_PROXY',
        'option "trustProxy" is true: a client picks its own key by sending X-Forwarded-For; trust the proxies you run (a hop count or their addresses)',
      );
    }
  }

  /**
   * `refundWhen`: asked once the response has finished (all of it handed to the
   * connection); when it says true, the request's permits go back to the limiter that gave
   * them, each to the window it came from (in memory; a Redis or cluster limiter's refund
   * credits the window current then). Held permits (Concurrency) are not refunded: they come
   * back when the response closes. A response that never finishes (the client went away
   * first) keeps its permits counted. A refundWhen that throws, or answers other than a
   * boolean, keeps them counted and is reported as a warning.
   */
  private refundWhenDone(
    plan: Plan,
    req: Req,
    res: Res,
    key: Key,
    permits: number,
    d: Decision | Lease,
    takenUs: number,
  ): void {
    const raw = this.host.rawRes(res);
    if (raw.writableFinished) return; // finished before the limiter answered: nothing to ask
    raw.once('finish', () => {
      let give: unknown;
      try {
        give = this.c.refundWhen!(req, res);
      } catch (error) {
        this.warnOnce(
          `${this.owner}: option "refundWhen" threw (the request's permits stay counted): ${(error as Error)?.message ?? show(error)}`,
          'ATOMIC_LIMITER_REFUND_WHEN_FAILED',
        );
        return;
      }
      if (give === false) return;
      if (give !== true) {
        this.warnOnce(
          `${this.owner}: option "refundWhen" must return a boolean, got ${show(give)} (the request's permits stay counted)`,
          'ATOMIC_LIMITER_REFUND_WHEN_FAILED',
        );
        return;
      }
      giveBack(plan.limiter, key, permits, d, takenUs, this.reportGiveBack);
    });
  }

  /**
   * A give-back after the response that failed (a Concurrency release, a refund): reported
   * as each distinct failure first occurs, with the others of this middleware (at most
   * MAX_WARNINGS): a backend that is down fails every request's give-back alike.
   */
  private readonly reportGiveBack = (error: unknown): void => {
    const message = `${RELEASE_PREFIX}${error instanceof Error ? error.message : String(error)}`;
    if (this.warned.size >= MAX_WARNINGS || this.warned.has(message)) return;
    this.warned.add(message);
    warnGiveBackFailed(this.owner, 'ATOMIC_LIMITER_RELEASE_FAILED', error);
  };

  private warnOnce(message: string, code: string): void {
    if (this.warned.size >= MAX_WARNINGS || this.warned.has(message)) return;
    this.warned.add(message);
    process.emitWarning(message, { code });
  }

  /**
   * Decides a request: GO, or ANSWERED (refused, or answered 503 because the limiter
   * failed; see failed()). Throws (or rejects) with what goes to the framework's error
   * path: an option's function that failed, or `onError` throwing.
   */
  run(req: Req, res: Res): Outcome | Promise<Outcome> {
    let r: Outcome | Promise<Outcome>;
    try {
      r = this.start(req, res);
    } catch (error) {
      return this.failed(req, res, error);
    }
    if (typeof r === 'number') return r;
    return r.then(undefined, (error) => this.failed(req, res, error));
  }

  /**
   * run() for a framework that goes on through a callback (Express and Connect's `next`,
   * Fastify's hook's `done`): `next()` when the request may go on, `next(error)` with what
   * goes to the framework's error path; not called when the response was answered here.
   */
  runThen(req: Req, res: Res, next: (error?: Error) => void): void {
    let r: Outcome | Promise<Outcome>;
    try {
      r = this.run(req, res);
    } catch (error) {
      next(asError(this.owner, error));
      return;
    }
    if (r === GO) next();
    else if (r !== ANSWERED) {
      r.then(
        (o) => {
          if (o === GO) next();
        },
        (error) => next(asError(this.owner, error)),
      );
    }
  }

  /**
   * A failure while deciding. The limiter's own (its backend unreachable under
   * `whenUnavailable: 'throw'`): `onError` when given — it answers, returns true to let the
   * request go on, or throws to hand the error to the framework — else a 503 with
   * `Retry-After`, reported once as a process warning. Anything else is rethrown.
   */
  private failed(req: Req, res: Res, error: unknown): Outcome | Promise<Outcome> {
    if (!isLimiterError(error)) throw error;
    const onError = this.c.onError;
    if (onError === undefined) return this.unavailable(res, error as Error);
    const r = onError(error as Error, req, res);
    if (isThenable(r)) return Promise.resolve(r).then((v) => this.afterOnError(res, error, v));
    return this.afterOnError(res, error, r);
  }

  private afterOnError(res: Res, error: unknown, result: unknown): Outcome {
    if (result === true) return GO;
    if (this.host.answered(res)) return ANSWERED;
    return this.unavailable(res, error as Error, false);
  }

  /**
   * The default answer to a limiter that failed: 503, `Retry-After`, never the error
   * itself; `report`: a warning, unless `onError` saw the error.
   */
  private unavailable(res: Res, error: Error, report = true): Outcome {
    const raw = this.host.rawRes(res);
    const started = this.host.answered(res);
    const message = `${error?.message ?? show(error)}`;
    if (report && this.warned.size < MAX_WARNINGS && !this.warned.has(message)) {
      // Nobody else sees it: the framework's error handler is not involved.
      this.warned.add(message);
      const what = started ? 'closed a response already started' : 'answered 503';
      process.emitWarning(`${this.owner}: ${what}: ${message}`, {
        code: 'ATOMIC_LIMITER_HTTP_ERROR',
      });
    }
    if (closed(raw)) return ANSWERED;
    if (started) {
      // Cannot become a 503 any more; ended as a framework's final handler would.
      raw.destroy();
      return ANSWERED;
    }
    this.host.send(res, 503, 'Service Unavailable', UNAVAILABLE_RETRY_AFTER);
    return ANSWERED;
  }

  private start(req: Req, res: Res): Outcome | Promise<Outcome> {
    const c = this.c;
    const via = this.host.visit(req, res, this);
    if (via === REVISIT) return GO;
    if (c.skip !== undefined && this.skipped(req)) return GO;
    if (c.plan !== undefined) return this.keyed(c.plan, req, res, via);
    const chosen = c.pick!(req);
    if (isThenable(chosen)) return this.planLater(req, res, via, chosen);
    return this.keyed(c.planOf(chosen), req, res, via);
  }

  private async planLater(
    req: Req,
    res: Res,
    via: unknown,
    chosen: PromiseLike<unknown>,
  ): Promise<Outcome> {
    return this.keyed(this.c.planOf(await chosen), req, res, via);
  }

  private keyed(plan: Plan, req: Req, res: Res, via: unknown): Outcome | Promise<Outcome> {
    const c = this.c;
    const key = c.key === undefined ? this.addressKey(req) : c.key(req);
    if (isThenable(key)) return this.keyLater(plan, req, res, via, key);
    return this.decide(plan, req, res, via, this.checkKey(key));
  }

  private skipped(req: Req): boolean {
    const s = this.c.skip!(req);
    if (typeof s !== 'boolean') {
      throw typeError(`${this.owner}: option "skip" must return a boolean, got ${show(s)}`);
    }
    return s;
  }

  private addressKey(req: Req): string {
    const raw = this.host.raw(req);
    const address = clientAddress(raw, this.host.ip(req), this.c.trust);
    const key = address === undefined ? undefined : this.c.addresses.keyOf(address);
    if (key === undefined) {
      // Never one shared bucket for every address-less request: that would let one client
      // starve all the others (or, keyed on "undefined", let all of them through as one).
      const error = noAddressError(this.owner, address);
      // Every such request takes the error path; the configuration problem is also reported
      // once as a process warning, where operators see it whatever the error handler does.
      if (!this.warnedNoAddress) {
        this.warnedNoAddress = true;
        process.emitWarning(error.message, { code: 'ERR_NO_CLIENT_ADDRESS' });
      }
      throw error;
    }
    if (this.watchProxy) this.checkProxy(req, raw, address!);
    return key;
  }

  /**
   * The misconfigurations of the client address, each reported once: a request through a
   * proxy (it says X-Forwarded-For) counted under the proxy's own address, and a framework
   * that believes any proxy. Asked until both are settled, by the default key only.
   */
  private checkProxy(req: Req, raw: IncomingMessage, address: string): void {
    if (!this.warnedTrustAll) {
      this.warnedTrustAll = true;
      if (this.host.trustsAnyProxy(req)) {
        this.warnConfig(
          'ATOMIC_LIMITER_PERMISSIVE_TRUST_PROXY',
          `the framework trusts any proxy ("trust proxy" true): a client picks its own key by sending X-Forwarded-For; trust the proxies you run (a hop count or their addresses)`,
        );
      }
    }
    if (
      !this.warnedForwarded &&
      this.c.trust === undefined &&
      raw.headers['x-forwarded-for'] !== undefined &&
      address === raw.socket?.remoteAddress
    ) {
      this.warnedForwarded = true;
      this.warnConfig(
        'ATOMIC_LIMITER_FORWARDED_IGNORED',
        `a request came with X-Forwarded-For, but it is not trusted (${this.host.trustName(req)}): every client behind that proxy is counted under the proxy's address, as one`,
      );
    }
    this.watchProxy = !this.warnedForwarded;
  }

  /** A misconfiguration, reported once as a process warning with its code and docs anchor. */
  warnConfig(code: string, text: string): void {
    process.emitWarning(`${this.owner}: ${text} (see ${docsAnchor(code)})`, { code });
  }

  /**
   * Called by a host that saw other middlewares decide a request this one decides too
   * (`others`: an engine or a set of them; this one may be among them): those with the same
   * limiter become peers, whose last request and key decide() compares with its own.
   */
  addPeers(others: object): void {
    if (this.warnedTwice) return;
    for (const e of others instanceof Set ? others : [others]) {
      if (e !== this && e instanceof Engine && e.c.limiterOption === this.c.limiterOption) {
        (this.peers ??= new Set()).add(e);
      }
    }
  }

  /** One request counted twice under one key of one limiter: reported once. */
  private checkTwice(raw: IncomingMessage, key: Key): void {
    for (const p of this.peers!) {
      if (p.lastRaw === raw && p.lastKey === key) {
        this.peers = undefined;
        this.warnedTwice = true;
        this.warnConfig(
          'ATOMIC_LIMITER_COUNTED_TWICE',
          'two middlewares with the same limiter counted one request under one key: it is counted twice; give each its own limiter, or mount one of them on fewer paths',
        );
        return;
      }
    }
  }

  private checkKey(key: unknown): Key {
    if (!isKey(key)) {
      const what = typeof key === 'string' ? 'a string over 4096 bytes of UTF-8' : show(key);
      throw typeError(
        `${this.owner}: option "key" must return a string (at most 4096 bytes of UTF-8) or a finite number, got ${what}`,
      );
    }
    return key;
  }

  private permitsOf(plan: Plan, req: Req): number {
    const p = this.c.permitsFn!(req);
    if (typeof p !== 'number') {
      throw typeError(`${this.owner}: option "permits" must return an integer, got ${show(p)}`);
    }
    if (!isPermits(p, plan.maxPermits)) {
      throw rangeError(
        `${this.owner}: option "permits" must return an integer from 1 to ${plan.maxPermits} (the limiter's limit), got ${show(p)}`,
      );
    }
    return p;
  }

  private async keyLater(
    plan: Plan,
    req: Req,
    res: Res,
    via: unknown,
    key: PromiseLike<unknown>,
  ): Promise<Outcome> {
    const k = this.checkKey(await key);
    return this.decide(plan, req, res, via, k);
  }

  private decide(
    plan: Plan,
    req: Req,
    res: Res,
    via: unknown,
    key: Key,
  ): Outcome | Promise<Outcome> {
    const c = this.c;
    const raw = this.host.raw(req);
    if (this.peers !== undefined) this.checkTwice(raw, key);
    this.lastRaw = raw;
    this.lastKey = key;
    const permits = c.permitsFn === undefined ? c.permits : this.permitsOf(plan, req);
    let d: Decision | PromiseLike<Decision>;
    try {
      d = plan.limiter.consume(key, permits);
    } catch (error) {
      throw markLimiterError(this.owner, error);
    }
    if (isThenable(d)) return this.decideLater(plan, req, res, via, key, permits, d);
    // When an in-memory limiter took them: a refund later goes to that window.
    const takenUs = plan.inMemory === undefined ? Number.NaN : plan.inMemory.lastDecisionUs;
    return this.conclude(plan, req, res, via, key, permits, d, takenUs);
  }

  private async decideLater(
    plan: Plan,
    req: Req,
    res: Res,
    via: unknown,
    key: Key,
    permits: number,
    pending: PromiseLike<Decision>,
  ): Promise<Outcome> {
    let d: Decision;
    try {
      d = await pending;
    } catch (error) {
      throw markLimiterError(this.owner, error);
    }
    if (closed(this.host.rawRes(res))) {
      // The client left while the limiter decided: nothing to answer; give held permits back.
      if (d.allowed && plan.holding()) {
        release(key, permits, tookFrom(plan, d), this.reportGiveBack);
      }
      return ANSWERED;
    }
    return this.conclude(plan, req, res, via, key, permits, d, Number.NaN);
  }

  private conclude(
    plan: Plan,
    req: Req,
    res: Res,
    via: unknown,
    key: Key,
    permits: number,
    d: Decision,
    takenUs: number,
  ): Outcome | Promise<Outcome> {
    const c = this.c;
    if (d.allowed) {
      // Nothing to write, nothing touched: a response with no fields is left as it was.
      if (plan.headers.enabled) this.host.writeFields(res, via, plan.headers, d, undefined);
      if (plan.holding()) this.holdUntilClosed(req, res, key, permits, tookFrom(plan, d));
      // Allowed with nothing taken (no slot, no backend): nothing to give back.
      if (c.refundWhen !== undefined && d.reason === undefined) {
        this.refundWhenDone(plan, req, res, key, permits, d, takenUs);
      }
      return GO;
    }
    if (c.wait !== false && waitHelps(plan.limiter, d)) {
      return this.waitFor(plan, req, res, via, key, permits, d);
    }
    return this.refuse(plan, req, res, via, d);
  }

  /** Keeps held permits for the response's life: released once, when it closes for any reason. */
  private holdUntilClosed(
    req: Req,
    res: Res,
    key: Key,
    permits: number,
    from: readonly LimiterFace[],
  ): void {
    if (from.length === 0) return;
    whenGone(this.host.raw(req), this.host.rawRes(res), () =>
      release(key, permits, from, this.reportGiveBack),
    );
  }

  /**
   * `wait`: the request queues in the limiter's FIFO (`acquire()`). A client that goes away
   * meanwhile leaves the queue; a full queue or a timeout gets the refusal response.
   * Requests that waited carry no RateLimit fields: the figures seen before waiting are stale
   * (a timed-out or evicted one's `Retry-After` is the refusal's less the time waited).
   */
  private async waitFor(
    plan: Plan,
    req: Req,
    res: Res,
    via: unknown,
    key: Key,
    permits: number,
    refused: Decision,
  ): Promise<Outcome> {
    const raw = this.host.rawRes(res);
    const left = new AbortController();
    const stopWatching = whenGone(this.host.raw(req), raw, () => left.abort());
    if (left.signal.aborted) return ANSWERED; // the client left before its turn to queue
    const since = performance.now();
    // A limiter that evicts (queueOrder 'newest-first') refuses a waiter it evicts with the
    // QueueFullError of a queue found full. The event loop turning while acquire() was
    // pending tells them apart: a full queue refuses before it turns, and the refusal's
    // figures hold; an eviction comes with a newer request, after: they are stale.
    let waited = false;
    const turn = plan.evicts
      ? setImmediate(() => {
          waited = true;
        })
      : undefined;
    let lease: Lease;
    try {
      lease = await plan.limiter.acquire!(key, permits, {
        signal: left.signal,
        timeoutMs: (this.c.wait as { timeoutMs: number | undefined }).timeoutMs,
      });
    } catch (error) {
      clearImmediate(turn);
      if (left.signal.aborted) return ANSWERED; // the client left: nobody to answer
      stopWatching();
      const full = error instanceof QueueFullError;
      if (full && !waited) return this.refuse(plan, req, res, via, refused);
      if (full || (error as Error)?.name === 'TimeoutError') {
        return this.refuse(plan, req, res, via, refused, performance.now() - since);
      }
      throw markLimiterError(this.owner, error);
    }
    clearImmediate(turn);
    // When an in-memory limiter granted the wait (its grant is this thread's last decision):
    // a refund later goes to that window, as for a request admitted at once.
    const takenUs = plan.inMemory === undefined ? Number.NaN : plan.inMemory.lastDecisionUs;
    stopWatching();
    if (closed(raw) || left.signal.aborted) {
      releaseLate(() => lease.release(), this.reportGiveBack);
      return ANSWERED;
    }
    if (plan.holding()) {
      whenGone(this.host.raw(req), raw, () =>
        releaseLate(() => lease.release(), this.reportGiveBack),
      );
    }
    // Given back as taken when it finishes (a chain's lease tells when each member took).
    // A lease with a reason took nothing (a Redis limiter's whenUnavailable granted it).
    if (this.c.refundWhen !== undefined && (lease as { reason?: unknown }).reason === undefined) {
      this.refundWhenDone(plan, req, res, key, permits, lease, takenUs);
    }
    return GO;
  }

  /** `waitedMs`: refused after waiting that long; then only `Retry-After` is written. */
  private refuse(
    plan: Plan,
    req: Req,
    res: Res,
    via: unknown,
    d: Decision,
    waitedMs?: number,
  ): Outcome | Promise<Outcome> {
    const c = this.c;
    if (waitedMs === undefined) {
      this.host.writeFields(res, via, plan.headers, d, retryAfterSeconds(d));
    } else {
      plan.retryAfterOnly ??= new HeaderWriter(plan.limiter, [], undefined);
      this.host.writeFields(res, via, plan.retryAfterOnly, d, retryAfterWaited(d, waitedMs));
    }
    if (c.onRejected !== undefined) {
      const r = c.onRejected(req, res, d);
      return isThenable(r) ? Promise.resolve(r).then(() => ANSWERED) : ANSWERED;
    }
    let body = c.message;
    if (typeof body === 'function') {
      body = body(req, d);
      if (isThenable(body)) return this.sendLater(res, body);
    }
    this.send(res, body);
    return ANSWERED;
  }

  private async sendLater(res: Res, body: PromiseLike<unknown>): Promise<Outcome> {
    this.send(res, await body);
    return ANSWERED;
  }

  private send(res: Res, body: unknown): void {
    if (body === undefined || body === null || typeof body === 'function') {
      throw typeError(
        `${this.owner}: option "message" must give a string or a value to send as JSON, got ${show(body)}`,
      );
    }
    // A client that left needs no answer. A response another middleware already started
    // cannot become a refusal: sending fails, and that failure takes the error path.
    if (closed(this.host.rawRes(res))) return;
    this.host.send(res, this.c.statusCode, body);
  }
}
