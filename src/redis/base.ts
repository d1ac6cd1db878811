import type { ManualClock } from '../clock.js';
import { LimiterClosedError } from '../errors.js';
import type { Key } from '../limiter.js';
import type { AcquireOptions, AlgorithmName, Decision, Stats } from '../options.js';
import { acquireOptions, checkOptionsObject, checkPermits, rangeError, show } from '../validate.js';
import type { Adapter } from './client.js';
import { composeScript } from './compose.lua.js';
import { Blocks } from './fleet/blocks.js';
import { Fleet } from './fleet/fleet.js';
import { slotOf, tagOf } from './keys.js';
import { WaitingLine } from './line.js';
import {
  MANUAL_SLACK_MS,
  REDIS_TIME_SLACK_MS,
  type RedisCommon,
  type RedisHandle,
  type RedisLease,
  type WhenUnavailable,
} from './options.js';
import { badReply, decisionOf, parseReply, type Reply, replyNumber } from './replies.js';
import type { Rule } from './rule.js';
import { failedFast, Runner, Script, Unavailable } from './runner.js';
import { NEWER_ERROR } from './state.lua.js';
import {
  acquireUnavailable,
  decideUnavailable,
  NO_OP_LEASE,
  type PolicyHost,
  reportLost,
  unavailableError,
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
export { NO_OP_LEASE, reportLost } from './unavailable.js';
export type { AlgorithmName };

const SLACK_ARG = String(MANUAL_SLACK_MS);
const REDIS_SLACK_ARG = String(REDIS_TIME_SLACK_MS);
/** The scripts carry their limiter's parameters in their source: no ARGV[6…]. */
const NO_PARAMS: readonly string[] = [];

/**
 * A limiter's options record, `<prefix>:<class>:{#config}` (a hash tag no user key makes:
 * its own slot, read by its own command, never inside a key's script). `v`: the options
 * version, +1 per reconfigure(); `p`: JSON, the options of every version, 0 … v (the
 * in-memory class's parameters), so a state written under any of them can be read; `t`:
 * when each version from 1 on was made (µs, comma-separated), as a state of an earlier
 * version is converted version by version at those times; `k`: the record's own key, which
 * a read (one HMGET, refresh()) checks: a reply handed to the wrong command names another.
 * No record: version 0, the constructor's options. Ops: 's' writes version ARGV[2] + 1
 * with options ARGV[3], made at ARGV[4] ('' = Redis TIME), if the record is at version
 * ARGV[2]; 'k' only checks that it is. Replies {1, time} done, else {0, version, p, t}.
 */
const CONFIG = new Script(
  'atomic-limiter:config',
  `-- atomic-limiter:config
local TOKEN = ARGV[#ARGV]
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
local op, known = ARGV[1], tonumber(ARGV[2])
if v == known then
  if op == 's' then
    local at = ARGV[4]
    if at == '' then
      local t = redis.call('TIME')
      at = t[1] .. string.format('%06d', tonumber(t[2]))
    end
    local times = redis.call('HGET', KEYS[1], 't')
    if times and times ~= '' then times = times .. ',' .. at else times = at end
    redis.call('HSET', KEYS[1], 'k', KEYS[1], 'v', known + 1, 'p', ARGV[3], 't', times)
    return {TOKEN, {1, at}}
  end
  return {TOKEN, {1, ''}}
end
return {TOKEN, {0, v, redis.call('HGET', KEYS[1], 'p') or '', redis.call('HGET', KEYS[1], 't') or ''}}`,
);

/** An options record as read: its version and the options of each version. */
interface ConfigRecord {
  readonly version: number;
  readonly lineage: readonly (readonly number[])[];
  /** When each version from 1 on was made, µs. */
  readonly times: readonly number[];
}

/** A limiter's options at one options version: what configure() builds its scripts from. */
export interface OptionsAt {
  /** The in-memory class's parameters. */
  readonly params: readonly number[];
  /** The options version: 0 until the first reconfigure() on the prefix. */
  readonly version: number;
  /** The parameters of versions 0 … version − 1. */
  readonly past: readonly (readonly number[])[];
  /** When each version from 1 on was made (µs, the limiter's clock). */
  readonly times: readonly number[];
}

/**
 * What the six Redis limiters share: options, the script runner, the failure policy, the
 * per-key local wait queues of acquire(). Each subclass names its script, keys and
 * parameters, and how acquire() waits.
 *
 * Fleet mode (`block: n`) is one more op of the same scripts (take up to n permits), spent
 * locally (fleet/): nothing here assumes one permit per round trip.
 */
export abstract class RedisLimiter {
  abstract readonly algorithm: AlgorithmName;
  /** Permits a call may take at once (reconfigure() changes it). */
  get limit(): number {
    return this.params[0]!;
  }
  /** Namespace of this limiter's keys. */
  readonly prefix: string;
  /** Longest wait for Redis per call, ms. */
  readonly timeoutMs: number;
  /** What a call does while Redis cannot be reached. */
  readonly whenUnavailable: WhenUnavailable;
  /** Permits that may wait per key in `acquire()` (0: never wait). */
  readonly queueLimit: number;
  /** The ManualClock given, or undefined: time comes from Redis TIME. */
  readonly clock: ManualClock | undefined;
  /** @internal The slack added to every TTL this limiter's scripts set: its clock's. */
  protected get ttlSlackMs(): number {
    return this.clock ? MANUAL_SLACK_MS : REDIS_TIME_SLACK_MS;
  }
  /** @internal */
  protected readonly adapter: Adapter;
  /** @internal */
  protected readonly runner: Runner;
  /** @internal */
  protected closed = false;
  /** @internal This process's waiters per key (line.ts). */
  private readonly line = new WaitingLine();
  /** @internal */
  private readonly waiters = new Set<Waiter>();
  /** @internal */
  private readonly keyPrefix: string;
  /** @internal */
  private readonly common: RedisCommon;
  /** Fleet mode: permits per block (0: off), and this thread's side of the shared blocks. */
  readonly block: number;
  /** Fleet mode: how long a leased block may be spent before it goes back, ms. */
  readonly blockTtlMs: number;
  /** @internal */
  private fleet: Fleet | undefined;
  /** @internal True for the limiter that made the blocks (its close() gives them back). */
  private ownsBlocks = false;
  /** @internal */
  private sweep: ReturnType<typeof setInterval> | undefined;
  /** Longest time between two reads of the options record, ms on the limiter's clock. */
  readonly configRefreshMs: number;
  /**
   * @internal The options that size the rule, as the in-memory class keeps them (its
   * parameters): the constructor's, or a reconfigure()'s.
   */
  protected params: readonly number[] = [];
  /** @internal The options version this limiter decides under (0: never reconfigured). */
  protected version = 0;
  /** @internal The options of versions 0 … version. */
  private lineage: readonly (readonly number[])[] = [];
  /** @internal When versions 1 … version were made, µs. */
  private times: readonly number[] = [];
  /** @internal The constructor's options. */
  private own: readonly number[] = [];
  /** @internal When (ms, limiter's clock) the next call reads the options record first. */
  private pollAtMs = Number.NEGATIVE_INFINITY;
  /** @internal The record read under way, shared by the calls waiting for it. */
  private reading: Promise<Unavailable | undefined> | undefined;
  /**
   * @internal Set when the record shows that this prefix's limiter was created with other
   * settings: every call rejects with it.
   */
  private foreign: Error | undefined;
  /** @internal The options record's Redis key and hash slot. */
  private readonly recordKey: readonly string[];
  /** @internal */
  private readonly recordSlot: number;

  /** @internal */
  protected constructor(
    protected readonly owner: string,
    common: RedisCommon,
  ) {
    this.adapter = common.adapter;
    this.prefix = common.prefix;
    this.timeoutMs = common.timeoutMs;
    this.whenUnavailable = common.whenUnavailable;
    this.queueLimit = common.queueLimit;
    this.clock = common.clock;
    this.runner = new Runner(this.adapter, this.timeoutMs);
    this.keyPrefix = `${this.prefix}:${owner}:`;
    this.common = common;
    this.block = common.block;
    this.blockTtlMs = common.blockTtlMs;
    this.configRefreshMs = common.configRefreshMs;
    this.changed = new Promise<void>((resolve) => {
      this.wakeWaiters = resolve;
    });
    this.recordKey = [`${this.keyPrefix}{#config}`];
    this.recordSlot = this.adapter.cluster ? slotOf('#config') : 0;
  }

  // ---- reconfigure() -----------------------------------------------------------------

  /**
   * @internal Makes `at.params` (the in-memory class's parameters) the limiter's options:
   * its public figures and its scripts.
   */
  protected abstract configure(at: OptionsAt): void;

  /** @internal The options reconfigure() takes (the in-memory class's list). */
  protected abstract reconfigurable(): readonly string[];

  /**
   * @internal The parameters after `opts` (names checked) replace some of this.params':
   * validated as the constructor and the in-memory class validate them.
   */
  protected abstract reconfigured(name: string, opts: Record<string, unknown>): number[];

  /**
   * @internal What the numbers of a key's state mean under `params` (a window's length, a
   * bucket's units), as text naming the options: two limiters created with other such
   * settings cannot share a prefix. '' where states mean the same under any options.
   */
  protected abstract settings(params: readonly number[]): string;

  /**
   * @internal The options version this limiter decides under: what caches figures derived
   * from the options (HTTP's policy headers) compares it to read them again.
   */
  get optionsVersion(): number {
    return this.version;
  }

  /** @internal Sets the constructor's options (subclasses call it once, before startFleet()). */
  protected start(params: readonly number[]): void {
    this.own = params;
    this.params = params;
    this.lineage = [params];
    this.configure({ params, version: 0, past: [], times: [] });
  }

  /**
   * @internal Settles when this limiter takes up other options: the head waiter of each
   * key's line then decides again at once, as in memory, instead of after its pause.
   */
  protected changed: Promise<void>;
  /** @internal */
  private wakeWaiters: () => void = () => {};

  /** @internal Takes up options version `r.version`. */
  private adopt(r: ConfigRecord): void {
    const wake = this.wakeWaiters;
    this.changed = new Promise<void>((resolve) => {
      this.wakeWaiters = resolve;
    });
    wake();
    this.version = r.version;
    this.lineage = r.lineage;
    this.times = r.times;
    this.params = r.lineage[r.version]!;
    this.configure({
      params: this.params,
      version: r.version,
      past: r.lineage.slice(0, r.version),
      times: r.times,
    });
  }

  /**
   * @internal Takes up a record newer than this limiter's options — unless its limiter was
   * created with other settings (a prefix shared by mistake): then every call refuses.
   */
  private learn(r: ConfigRecord | undefined): void {
    if (r === undefined || r.version <= this.version) return;
    const first = this.settings(r.lineage[0]!);
    const own = this.settings(this.own);
    if (first !== own) {
      this.foreign = new Error(
        `atomic-limiter/redis: ${this.owner} on prefix "${this.prefix}" was created with ${own}, and the limiter reconfigured on that prefix (options version ${r.version}) with ${first}: limiters whose settings differ need a prefix each`,
      );
      return;
    }
    this.adopt(r);
  }

  /** @internal Runs an op of the options record's script. */
  private record(op: 's' | 'k', body = ''): Promise<unknown> {
    const head = [op, String(this.version), body, this.clock ? String(this.clock.nowUs()) : ''];
    return this.runner.run(CONFIG, CONFIG, this.recordKey, head, NO_PARAMS, this.recordSlot);
  }

  /** @internal A record's reply as a record (undefined: at this limiter's version). */
  private recordOf(reply: unknown): ConfigRecord | undefined {
    const version = this.num(reply, 1);
    const text = (reply as unknown[])[2];
    if (text === '' || text === null || text === undefined) return undefined;
    let lineage: unknown;
    try {
      lineage = JSON.parse(String(text));
    } catch {
      throw this.badReply(reply);
    }
    const times = String((reply as unknown[])[3] ?? '')
      .split(',')
      .filter((t) => t !== '')
      .map(Number);
    if (
      !Array.isArray(lineage) ||
      lineage.length !== version + 1 ||
      times.length !== version ||
      !times.every(Number.isFinite) ||
      !lineage.every((p) => Array.isArray(p) && p.every((x) => typeof x === 'number'))
    ) {
      throw this.badReply(reply);
    }
    return { version, lineage, times };
  }

  /**
   * @internal Reads the options record (one read at a time: calls meanwhile share it) and
   * takes up what is newer: one HMGET, no script. Resolves with the Unavailable error the
   * calls waiting for it fail with when Redis does not answer within timeoutMs (each call
   * waits timeoutMs at most, the read included); a read that fails otherwise changes
   * nothing, and the calls go on. Undefined (nothing to wait for) while the client is not
   * ready (the read would wait in its queue) or Redis is known to be unavailable.
   */
  private refresh(): Promise<Unavailable | undefined> | undefined {
    if (this.reading) return this.reading;
    this.pollAtMs = this.clockMs() + this.configRefreshMs;
    const slot = this.recordSlot;
    if (!this.adapter.ready() || this.adapter.health.failsFast(slot, this.timeoutMs)) {
      return undefined;
    }
    const key = this.recordKey[0]!;
    const sentAt = performance.now();
    let settled = false;
    const reading = new Promise<Unavailable | undefined>((resolve) => {
      const done = (error?: Unavailable) => {
        settled = true;
        clearTimeout(timer);
        this.reading = undefined;
        resolve(error);
      };
      const timer = setTimeout(() => {
        this.adapter.health.markDown(slot, key, sentAt);
        done(new Unavailable(`no answer from Redis within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.adapter.hmget(key, ['k', 'v', 'p', 't']).then(
        (reply) => {
          if (settled) return;
          try {
            // A reply naming another key went to the wrong command: nothing is learnt.
            if (Array.isArray(reply) && String(reply[0]) === key) {
              this.learn(this.recordOf(['', ...reply.slice(1)]));
            }
          } catch {
            // Not a record this library wrote: nothing to learn.
          }
          done();
        },
        () => {
          if (!settled) done();
        },
      );
    });
    this.reading = reading;
    return reading;
  }

  /** @internal The limiter's clock in ms, for the record's reads. */
  private clockMs(): number {
    return this.clock ? this.clock.nowUs() / 1000 : performance.now();
  }

  /**
   * Changes the options that size the rule (the in-memory class's list, ranges and
   * messages), for every process sharing the prefix: this limiter decides under them once
   * the promise resolves, a process meeting a key written under them at once, every other
   * process within `configRefreshMs`. What was admitted stays counted (see the class).
   * Validated before any Redis call (TypeError, RangeError); concurrent reconfigure()s each
   * get their own options version, applied in turn (options left out keep the newest
   * values): the last wins. Rejects with BackendUnavailableError when Redis cannot be
   * reached (nothing changed then, or everything), LimiterClosedError after close() and
   * at once when close() comes while it waits for Redis (the change may have been made).
   */
  reconfigure(options: object): Promise<void> {
    const name = `${this.owner}.reconfigure`;
    let opts: Record<string, unknown>;
    try {
      if (this.closed) throw new LimiterClosedError();
      opts = checkOptionsObject(name, options, this.reconfigurable());
      this.check(this.reconfigured(name, opts));
    } catch (error) {
      return Promise.reject(error);
    }
    return this.reconfigureFrom(name, opts);
  }

  /** @internal What close() rejects: the record writes of reconfigure()s under way. */
  private readonly stops = new Set<() => void>();

  /**
   * @internal `pending`, or a LimiterClosedError as soon as close() is called (the change
   * may have been made by then: Redis may have run the write already).
   */
  private untilClosed<T>(pending: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const stop = () => reject(new LimiterClosedError());
      this.stops.add(stop);
      pending.then(resolve, reject).finally(() => this.stops.delete(stop));
    });
  }

  /** @internal Refuses parameters fleet mode cannot lease under. */
  private check(next: readonly number[]): void {
    if (this.block > 0 && next[0]! < this.block) {
      throw rangeError(
        `${this.owner}.reconfigure: the limit (${next[0]}) must be at least option "block" (${this.block}) in fleet mode`,
      );
    }
  }

  /** @internal reconfigure() from the options this limiter knows, taking up newer ones first. */
  private async reconfigureFrom(name: string, opts: Record<string, unknown>): Promise<void> {
    for (;;) {
      if (this.foreign) throw this.foreign;
      if (this.closed) throw new LimiterClosedError();
      const next = this.reconfigured(name, opts);
      this.check(next);
      const same = next.length === this.params.length && next.every((x, i) => x === this.params[i]);
      const lineage = same ? this.lineage : [...this.lineage, next];
      let reply: unknown;
      try {
        reply = await this.untilClosed(
          this.record(same ? 'k' : 's', same ? '' : JSON.stringify(lineage)),
        );
      } catch (error) {
        throw this.unavailableError(error);
      }
      if (this.num(reply, 0) === 1) {
        if (!same) {
          const times = [...this.times, this.num(reply, 1)];
          this.adopt({ version: this.version + 1, lineage, times });
        }
        return;
      }
      const r = this.recordOf(reply);
      if (r === undefined || r.version < this.version) {
        throw new Error(
          `atomic-limiter/redis: ${name}: the options record ${this.recordKey[0]} is at version ${this.num(reply, 1)}, behind this limiter's ${this.version} (was it deleted?)`,
        );
      }
      // Another reconfigure() came first: the change goes on top of it.
      this.learn(r);
    }
  }

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
    return this.grantCall('c', tag, permits, id).then(
      (reply) => this.decision(this.parse(reply)),
      (error) => this.fallback(error, key, permits),
    );
  }

  /** @internal Redis keys of a tag; every one carries `{tag}`, so all share one slot. */
  protected keysOf(tag: string): readonly string[] {
    return [`${this.keyPrefix}{${tag}}`];
  }

  /** The Redis key names of `key` (for inspection and tests). */
  redisKeys(key?: Key): readonly string[] {
    return this.keysOf(tagOf(this.owner, key));
  }

  /** @internal The limiter's script: every op (its batch form decides calls beside others). */
  protected script!: Script;
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
    if (this.reading !== undefined || this.clockMs() >= this.pollAtMs) {
      const reading = this.refresh();
      if (reading !== undefined) {
        return reading.then((error) =>
          error === undefined ? this.send(op, tag, head, late, 0) : Promise.reject(error),
        );
      }
    }
    return this.send(op, tag, head, late, 0);
  }

  /**
   * @internal Runs a call under the options this limiter has now. A key written under newer
   * options stops it unchanged (NEWER): the record is read, and the call runs again under
   * them.
   */
  private send(
    op: string,
    tag: string,
    head: readonly string[],
    late: ((reply: unknown) => void) | undefined,
    tries: number,
  ): Promise<unknown> {
    if (this.foreign) return Promise.reject(this.foreign);
    // The slot only groups a Cluster's batches; standalone it is not computed.
    const alone =
      (op === 't'
        ? this.tryScript
        : op === 'c'
          ? this.consumeScript
          : op === 'b'
            ? this.leaseScript
            : undefined) ?? this.script;
    return this.runner
      .run(
        this.script,
        alone,
        this.keysOf(tag),
        head,
        NO_PARAMS,
        this.adapter.cluster ? slotOf(tag) : 0,
        late,
      )
      .catch((error: unknown) => {
        const newer =
          error instanceof Error && !(error instanceof Unavailable)
            ? NEWER_ERROR.exec(error.message)
            : null;
        if (newer === null) throw error;
        if (tries >= 3) {
          throw new Error(
            `atomic-limiter/redis: ${this.owner}: ${this.keysOf(tag)[0]} holds a state of options version ${newer[1]}, and the options record ${this.recordKey[0]} is at version ${this.version}`,
          );
        }
        return (this.refresh() ?? Promise.resolve(undefined)).then((error) =>
          error === undefined ? this.send(op, tag, head, late, tries + 1) : Promise.reject(error),
        );
      });
  }

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

  /** @internal An error naming the script for a reply that is not what it returns. */
  protected badReply(reply: unknown): Error {
    return badReply(this.script.name, reply);
  }

  /** @internal The number at `reply[i]` (scripts send numbers as strings or integers). */
  protected num(reply: unknown, i: number): number {
    return replyNumber(this.script.name, reply, i);
  }

  /** @internal */
  protected parse(reply: unknown): Reply {
    return parseReply(this.script.name, reply);
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

  /** @internal */
  protected unavailableError(error: unknown): unknown {
    return unavailableError(this.owner, error);
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
    const deadline = options.timeoutMs === undefined ? 0 : performance.now() + options.timeoutMs;
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
          return acquireUnavailable(this.policyHost(), error, key, permits, options, deadline);
        throw error;
      },
    );
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
