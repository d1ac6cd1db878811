import { LimiterClosedError } from '../errors.js';
import { checkOptionsObject, rangeError } from '../validate.js';
import { NO_PARAMS, RedisFields } from './fields.js';
import { slotOf } from './keys.js';
import type { RedisCommon } from './options.js';
import { Script, Unavailable } from './runner.js';

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
 * The options record and reconfigure(): which options version a Redis limiter decides
 * under, how it learns another process's reconfigure() (a read of the record at most once
 * per configRefreshMs, or when a key holds a state of a newer version), and how its own
 * reconfigure() writes a version. The calls (base.ts) check `foreign` and the time of the
 * next read before each call, and refresh() when it is due; subclasses give configure(),
 * reconfigurable(), reconfigured() and settings().
 */
export abstract class Reconfigurable extends RedisFields {
  /** Permits a call may take at once (reconfigure() changes it). */
  get limit(): number {
    return this.params[0]!;
  }
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
  protected pollAtMs = Number.NEGATIVE_INFINITY;
  /** @internal The record read under way, shared by the calls waiting for it. */
  protected reading: Promise<Unavailable | undefined> | undefined;
  /**
   * @internal Set when the record shows that this prefix's limiter was created with other
   * settings: every call rejects with it.
   */
  protected foreign: Error | undefined;
  /** @internal The options record's Redis key and hash slot. */
  protected readonly recordKey: readonly string[];
  /** @internal */
  private readonly recordSlot: number;

  /** @internal */
  protected constructor(owner: string, common: RedisCommon) {
    super(owner, common);
    this.changed = new Promise<void>((resolve) => {
      this.wakeWaiters = resolve;
    });
    this.recordKey = [`${this.keyPrefix}{#config}`];
    this.recordSlot = this.adapter.cluster ? slotOf('#config') : 0;
  }

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
  protected refresh(): Promise<Unavailable | undefined> | undefined {
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
            // A reply naming another key went to the wrong command: nothing is learnt. The
            // record names its key as Redis saw it: with the client's keyPrefix.
            if (Array.isArray(reply) && String(reply[0]) === this.adapter.keyPrefix + key) {
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
  protected clockMs(): number {
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
  protected readonly stops = new Set<() => void>();

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
}
