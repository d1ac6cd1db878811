import { randomBytes } from 'node:crypto';
import { MAX_WIDE_CONCURRENCY } from '../algorithms/concurrency.js';
import { LimiterClosedError } from '../errors.js';
import type { Key } from '../limiter.js';
import {
  checkPermits,
  integerOption,
  isPermits,
  permitsError,
  rangeError,
  typeError,
} from '../validate.js';
import {
  type OptionsAt,
  type RedisLease,
  RedisLimiter,
  type RedisOptions,
  readRedisCommon,
  reportLost,
} from './base.js';
import type { Subscription } from './client.js';
import { concurrencyRule } from './concurrency.lua.js';
import { tagOf } from './keys.js';
import { sleepUs, type Waiter } from './wait.js';

/** The options of atomic-limiter/redis's `new Concurrency()` (at most `limit` held at once): its own, then every Redis limiter's. */
export interface ConcurrencyOptions extends RedisOptions {
  /** Permits that may be held at once per key. Integer, 1 to 2^31 − 1. */
  limit: number;
  /**
   * A grant's lifetime in ms (default 60 000): a process that dies holding permits gives
   * them back when its leases expire. Hold permits no longer than this.
   */
  leaseMs?: number;
}

// How long the Pub/Sub connection stays after the last waiter, for the next one.
const SUBSCRIBER_IDLE_MS = 1000;
// A waiter's re-check back-off (pause()) and the orphans' (freeOrphans()), ms.
const RECHECK_MIN_MS = 50;
const RECHECK_MAX_MS = 1000;

/**
 * Concurrency with its state in Redis: at most `limit` permits held at once per key. Each
 * grant is a lease that expires after `leaseMs`; release() gives permits back at once, and
 * acquire() is woken by releases through Pub/Sub (or by the earliest lease's expiry).
 */
export class Concurrency extends RedisLimiter {
  readonly algorithm = 'Concurrency';
  readonly leaseMs: number;
  /** @internal */
  private readonly channel: string;
  /** @internal */
  private readonly idPrefix = randomBytes(6).toString('base64url');
  /** @internal */
  private nextId = 0;
  /** @internal */
  private subscription: Promise<Subscription> | undefined;
  /** @internal Aborts `subscription` while it is being made (unsubscribe()). */
  private subscribing: AbortController | undefined;
  /** @internal Whether `subscription` is made (Redis confirmed it), not only asked for. */
  private subscribed = false;
  /** @internal */
  private readonly listening = new Map<string, Set<Waiter>>();
  /** @internal */
  private idleTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: ConcurrencyOptions) {
    const { opts, common } = readRedisCommon('Concurrency', options, ['limit', 'leaseMs']);
    for (const name of ['block', 'blockTtlMs', 'blockKeys', 'maxBlock', 'leaseAhead']) {
      if (opts[name] !== undefined) {
        // A lease is held, not spent: there is nothing to hand out in blocks.
        throw typeError(
          `Concurrency: option "${name}" is for rate limiters; Concurrency has no blocks (leases are held, not spent)`,
        );
      }
    }
    const limit = integerOption('Concurrency', 'limit', opts.limit, 1, MAX_WIDE_CONCURRENCY);
    const leaseMs = integerOption('Concurrency', 'leaseMs', opts.leaseMs, 1, 2 ** 31 - 1, 60_000);
    super('Concurrency', common);
    this.leaseMs = leaseMs;
    this.channel = `${this.prefix}:Concurrency:released`;
    // Parameters as in memory: the limit, and the largest limit a reconfigure() gave it.
    this.start([limit, 0]);
  }

  /**
   * Takes `limit`, as the in-memory Concurrency: permits held stay held; a lower limit
   * admits nothing more until releases bring a key under it.
   */
  override reconfigure(options: { limit?: number }): Promise<void> {
    return super.reconfigure(options);
  }

  /** @internal */
  protected configure({ params, version }: OptionsAt): void {
    const leaseUs = this.leaseMs * 1000;
    const rule = concurrencyRule({ limit: params[0]!, leaseUs, channel: this.channel, version });
    this.useRule(rule, false);
  }

  /** @internal */
  protected reconfigurable(): readonly string[] {
    return ['limit'];
  }

  /** @internal */
  protected reconfigured(name: string, opts: Record<string, unknown>): number[] {
    const current = this.params;
    const limit = integerOption(name, 'limit', opts.limit ?? current[0], 1, MAX_WIDE_CONCURRENCY);
    return [limit, Math.max(current[1]!, current[0]!, limit)];
  }

  /** @internal Leases are held, not counted in settings: the same under any limit. */
  protected settings(): string {
    return '';
  }

  /** @internal */
  protected override keysOf(tag: string): readonly string[] {
    const base = `${this.prefix}:Concurrency:{${tag}}`;
    return [base, `${base}:z`];
  }

  /** @internal */
  protected override grantId(): string {
    return `${this.idPrefix}.${(this.nextId++).toString(36)}`;
  }

  /**
   * Returns `permits` held for `key`, from its grants of tryAcquire()/consume() first (a
   * lease frees its own on its release()), oldest first. Releasing more than the key
   * holds is a RangeError, as in memory (nothing is released then). Rejects with
   * BackendUnavailableError when Redis cannot be reached: a release is never dropped.
   */
  release(key?: Key, permits = 1): Promise<void> {
    let tag: string;
    try {
      if (this.closed) throw new LimiterClosedError();
      // Up to the largest limit it had: a key may hold that much after a lower limit.
      checkPermits('Concurrency.release', permits, Math.max(this.limit, this.params[1]!));
      tag = tagOf(this.owner, key);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.call('l', tag, permits).then(
      (reply) => {
        const status = this.num(reply, 0);
        if (status === -1) {
          throw rangeError(
            `Concurrency.release: permits (${permits}) exceed the permits held for this key (${this.num(reply, 1)})`,
          );
        }
        if (status !== 1) throw this.badReply(reply);
      },
      (error) => {
        throw this.unavailableError(error);
      },
    );
  }

  /** @internal Releases one lease by its id; a lease that already expired releases nothing. */
  private releaseLease(tag: string, permits: number, id: string): Promise<void> {
    // A lease holds what it was granted, whatever the limit is now.
    if (!isPermits(permits, MAX_WIDE_CONCURRENCY)) {
      return Promise.reject(permitsError('Concurrency.release', permits, MAX_WIDE_CONCURRENCY));
    }
    // After close() too: a lease taken is always given back.
    return this.call('l', tag, permits, id, true).then(
      (reply) => {
        const status = this.num(reply, 0);
        if (status !== 0 && status !== 1) throw this.badReply(reply);
      },
      (error) => {
        throw this.unavailableError(error);
      },
    );
  }

  /** @internal */
  protected override lease(tag: string, permits: number, id: string): RedisLease {
    // A release in flight or done is shared; one that failed is not kept: a release by id
    // is idempotent, so release() may be called again until Redis takes it.
    let released: Promise<void> | undefined;
    const release = (): Promise<void> => {
      if (released) return released;
      const p = this.releaseLease(tag, permits, id);
      released = p;
      p.catch(() => {
        if (released === p) released = undefined;
      });
      return p;
    };
    return {
      release,
      // dispose cannot report a failure: use `await lease.release()` to see it.
      [Symbol.dispose]: () => {
        release().catch(reportLost);
      },
    };
  }

  /**
   * A tryAcquire() or consume() whose call timed out and ran after all (Redis paused, a
   * slow network) holds a grant its caller never got: released at once, by its id ('~':
   * concurrency.lua.ts), rather than held until it expires.
   * @internal
   */
  protected override lateGrant(op: 't' | 'c' | 'w', tag: string, permits: number, id: string) {
    if (!this.holdsNothing(op)) return undefined;
    return (reply: unknown): void => {
      const granted = op === 't' ? reply === 1 : Array.isArray(reply) && reply[0] === 1;
      // An acquire()'s grant ('w') is a lease's: its id has no '~' (concurrency.lua.ts).
      // Freed as an orphan: retried until Redis takes it (calls may still fail fast).
      if (granted) this.lostGrant(op, tag, permits, id);
    };
  }

  /**
   * Whether a caller told "unavailable" by a grant call of `op` holds nothing by it. An
   * acquire() ('w') never does (its lease is the fallback's, or none). A tryAcquire() or
   * consume() under 'allow' or a fallback limiter may have gone on as granted: then the
   * grant, if Redis made it, counts what it does, and its release(key) frees it.
   * @internal
   */
  private holdsNothing(op: 't' | 'c' | 'w'): boolean {
    return op === 'w' || this.whenUnavailable === 'throw' || this.whenUnavailable === 'deny';
  }

  /**
   * Grants whose calls got no answer, by lease id (as stored: '~' for tryAcquire() and
   * consume()), freed by id as soon as Redis takes a release: the caller was told
   * "unavailable", and without this the permits would stay held until leaseMs. Kept no
   * longer than a lease lives (past it Redis has freed them itself).
   * @internal
   */
  private readonly orphans = new Map<string, { tag: string; permits: number; untilMs: number }>();
  /** @internal */
  private freeing = false;
  /** @internal */
  private freeDelayMs = 0;

  /** @internal */
  protected override lostGrant(op: 't' | 'c' | 'w', tag: string, permits: number, id: string) {
    if (!this.holdsNothing(op)) return;
    const untilMs = performance.now() + this.leaseMs;
    this.orphans.set(op === 'w' ? id : `~${id}`, { tag, permits, untilMs });
    this.freeOrphans();
  }

  /** @internal Releases the orphans by id; those Redis does not take are tried again, backing off. */
  private freeOrphans(): void {
    if (this.freeing) return;
    this.freeing = true;
    const now = performance.now();
    const tries: Promise<void>[] = [];
    for (const [id, o] of this.orphans) {
      if (o.untilMs <= now) {
        this.orphans.delete(id);
        continue;
      }
      tries.push(this.releaseLease(o.tag, o.permits, id).then(() => void this.orphans.delete(id)));
    }
    void Promise.allSettled(tries).then(() => {
      this.freeing = false;
      if (this.orphans.size === 0) {
        this.freeDelayMs = 0;
        return;
      }
      this.freeDelayMs = Math.min(RECHECK_MAX_MS, Math.max(RECHECK_MIN_MS, this.freeDelayMs * 2));
      setTimeout(() => this.freeOrphans(), this.freeDelayMs).unref();
    });
  }

  /** @internal */
  protected override undoGrant(tag: string, permits: number, id: string): void {
    this.releaseLease(tag, permits, id).catch(reportLost);
  }

  /** @internal Subscribes once (lazily) to the release channel; messages wake that key's head. */
  private subscribe(): Promise<Subscription> {
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = undefined;
    }
    if (this.subscription === undefined) {
      this.subscribing = new AbortController();
      this.subscription = this.adapter.subscribe(
        this.channel,
        (tag) => {
          for (const w of this.listening.get(tag) ?? []) this.rouse(w);
        },
        // Messages published while the subscriber reconnected reached nobody: every waiter
        // tries again.
        () => {
          for (const set of this.listening.values()) for (const w of set) this.rouse(w);
        },
        this.subscribing.signal,
      );
    }
    const s = this.subscription;
    s.then(
      () => {
        if (this.subscription === s) this.subscribed = true;
      },
      () => {
        if (this.subscription === s) this.subscription = undefined;
      },
    );
    return s;
  }

  /** @internal Wakes a waiter to try again, its back-off restarted. */
  private rouse(w: Waiter): void {
    w.woken = true;
    w.recheckMs = 0;
    w.wake?.();
  }

  /** @internal */
  protected override async waitFor(w: Waiter): Promise<RedisLease> {
    let set = this.listening.get(w.tag);
    if (!set) this.listening.set(w.tag, (set = new Set()));
    set.add(w);
    try {
      return await super.waitFor(w);
    } finally {
      set.delete(w);
      if (set.size === 0) this.listening.delete(w.tag);
      if (this.listening.size === 0 && this.subscription && !this.idleTimer) {
        // Not unref'd: the subscriber's own connection would keep the process alive, and
        // only this timer closes it when nobody calls close().
        this.idleTimer = setTimeout(() => this.unsubscribe(), SUBSCRIBER_IDLE_MS);
      }
    }
  }

  /** @internal */
  private unsubscribe(): Promise<void> {
    this.idleTimer = undefined;
    // A subscription still being made (while Redis is down its connection reconnects for
    // good) is given up: it rejects, and its connection closes.
    this.subscribing?.abort(new LimiterClosedError());
    this.subscribing = undefined;
    const s = this.subscription;
    this.subscription = undefined;
    this.subscribed = false;
    return s ? s.then((x) => x.close()).catch(() => {}) : Promise.resolve();
  }

  /**
   * After a refusal: wait for a release of this key, or the earliest lease's expiry. The
   * subscription is made before the next try, and `woken` is cleared before each try, so a
   * release between the try and the wait is not missed.
   * @internal
   */
  protected override async pause(w: Waiter, r: { hintUs: number }): Promise<void> {
    // Not only when none was asked for: while another waiter's subscription is being made,
    // a release published meanwhile reaches nobody, so this one waits for it to be made
    // and tries again too.
    if (!this.subscribed) {
      try {
        await this.subscribe();
        return; // subscribed now: try again at once
      } catch {
        // No Pub/Sub: the lease expiry (or a short retry) still wakes us.
      }
    }
    if (w.woken) return;
    const woken = new Promise<void>((resolve) => {
      w.wake = resolve;
    });
    // Other options (a limit raised by reconfigure()) wake it too.
    const waits: Promise<void>[] = [woken, this.changed];
    if (r.hintUs >= 0) waits.push(sleepUs(this.clock, r.hintUs + 1, w));
    // One message is not trusted: it is lost while the subscriber reconnects, and none
    // comes when the key is wiped (FLUSHALL, a restart without persistence, a failover).
    // So the head also tries again on a back-off of its own, on the real clock, from
    // RECHECK_MIN_MS doubling to RECHECK_MAX_MS.
    w.recheckMs = Math.min(RECHECK_MAX_MS, w.recheckMs === 0 ? RECHECK_MIN_MS : w.recheckMs * 2);
    waits.push(sleepUs(undefined, w.recheckMs * 1000, w));
    await Promise.race(waits);
  }

  /** @internal */
  protected override onClose(): Promise<void> {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    return this.unsubscribe();
  }
}
