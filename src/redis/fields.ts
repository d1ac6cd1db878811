import type { ManualClock } from '../clock.js';
import type { Adapter } from './client.js';
import {
  MANUAL_SLACK_MS,
  REDIS_TIME_SLACK_MS,
  type RedisCommon,
  type WhenUnavailable,
} from './options.js';
import { badReply, parseReply, type Reply, replyNumber } from './replies.js';
import { Runner, type Script } from './runner.js';
import { unavailableError } from './unavailable.js';

/** The scripts carry their limiter's parameters in their source: no ARGV[6…]. */
export const NO_PARAMS: readonly string[] = [];

/**
 * What every part of a Redis limiter reads: the options common to the seven classes, the
 * client and its script runner, whether it is closed, and how a reply is read. The options
 * record (options-record.ts) and the calls (base.ts) build on it.
 */
export abstract class RedisFields {
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
  /** @internal `<prefix>:<class>:`, what every key of this limiter starts with. */
  protected readonly keyPrefix: string;
  /** @internal */
  protected readonly common: RedisCommon;
  /** Fleet mode: permits per block (0: off), and this thread's side of the shared blocks. */
  readonly block: number;
  /** Fleet mode: how long a leased block may be spent before it goes back, ms. */
  readonly blockTtlMs: number;
  /** Longest time between two reads of the options record, ms on the limiter's clock. */
  readonly configRefreshMs: number;
  /** @internal The limiter's script: every op (its batch form decides calls beside others). */
  protected script!: Script;

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
  protected unavailableError(error: unknown): unknown {
    return unavailableError(this.owner, error);
  }
}
