import { show, typeError } from '../validate.js';
import { type Health, healthOf } from './health.js';

/**
 * One adapter over the clients people use, chosen by the methods a client has (never by
 * its constructor's name, which bundlers rename and subclasses change):
 *
 * - ioredis `Redis` / `Cluster` (v5, v6): `evalsha` and `pipeline`; a Cluster also has
 *   `nodes`. The commands of one send() (the runner's batches of one tick, one per hash
 *   slot) go out as one pipeline (per hash slot on a Cluster).
 * - node-redis `createClient` / `createCluster` (v5, v6): `evalSha` and `sendCommand`; a
 *   cluster also has `getSlotMaster`, and its `sendCommand` takes the routing key first.
 *   node-redis writes every command of one tick in one write by itself.
 */
export interface Adapter {
  readonly kind: 'ioredis' | 'node-redis';
  readonly cluster: boolean;
  /**
   * Whether a command given to the client is written to its socket at once (ioredis), not at
   * the end of the tick (node-redis, which writes every command of one tick in one write).
   */
  readonly writesAtOnce: boolean;
  /** Sends `EVALSHA`/`EVAL` calls; each call's promise settles with its own reply or error. */
  send(calls: readonly Command[]): Promise<unknown>[];
  /** send() of one call: its reply (the path of a call alone, without the arrays). */
  sendOne(call: Command): Promise<unknown>;
  /**
   * Subscribes to `channel` on a connection of its own; resolves once subscribed.
   * `onReconnect` is called each time that connection is ready again after a drop
   * (messages published meanwhile were lost); not for a node-redis cluster, which keeps its
   * own Pub/Sub connection. `signal` aborted while it subscribes rejects it and closes that
   * connection (one made while Redis is down would otherwise reconnect for good).
   */
  subscribe(
    channel: string,
    onMessage: (message: string) => void,
    onReconnect?: () => void,
    signal?: AbortSignal,
  ): Promise<Subscription>;
  /**
   * False while the client connects or reconnects: a command given to it then waits in its
   * offline queue and goes to Redis when it is ready again — maybe long after the call
   * answered by its deadline, charging a decision nobody got. True when a command goes out
   * now, or fails at once (a client closed for good, or one that connects on first use).
   */
  ready(): boolean;
  /** Calls `f` once, when the client is ready again. */
  onceReady(f: () => void): void;
  /**
   * A command of no effect that Redis answers when it serves `key`'s slot: PING, or on a
   * Cluster EXISTS `key` (routed to the key's node).
   */
  probe(key: string): Promise<unknown>;
  /** Whether Redis answers, shared by every adapter of the client (health.ts). */
  readonly health: Health;
  /** HMGET of `fields` of the hash at `key`: one plain command, no script. */
  hmget(key: string, fields: readonly string[]): Promise<unknown>;
  /**
   * What the client puts before every key it sends (ioredis `keyPrefix`; '' for node-redis):
   * a key's name as Redis, and a script's KEYS, see it.
   */
  readonly keyPrefix: string;
}

export interface Command {
  /** 'EVALSHA' with the script's SHA1, or 'EVAL' with its source. */
  readonly verb: 'EVALSHA' | 'EVAL';
  readonly script: string;
  readonly keys: readonly string[];
  readonly args: readonly string[];
  /** The hash slot of the keys (all share one). */
  readonly slot: number;
}

export interface Subscription {
  close(): Promise<void>;
}

type Fn = (...args: unknown[]) => unknown;
type AnyClient = Record<string, unknown>;

function has(client: AnyClient, ...methods: string[]): boolean {
  return methods.every((m) => typeof client[m] === 'function');
}

/** The adapter for `client`, or a TypeError naming the option. */
export function adapt(owner: string, client: unknown): Adapter {
  if (typeof client === 'object' && client !== null) {
    const c = client as AnyClient;
    if (has(c, 'evalsha', 'pipeline')) return new IoRedisAdapter(c, has(c, 'nodes'));
    if (has(c, 'evalSha', 'sendCommand')) {
      return new NodeRedisAdapter(c, has(c, 'getSlotMaster'));
    }
  }
  throw typeError(
    `${owner}: option "redis" must be an ioredis client (Redis or Cluster) or a node-redis client (createClient or createCluster), got ${show(client)}`,
  );
}

/**
 * `pending`, or a rejection with the signal's reason once `signal` aborts: a subscriber's
 * command waiting for a Redis that is down may never settle.
 */
function untilAborted<T>(pending: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return pending;
  pending.catch(() => {});
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener('abort', abort, { once: true });
    pending.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort));
  });
}

function argv(call: Command): string[] {
  return [call.script, String(call.keys.length), ...call.keys, ...call.args];
}

// ioredis statuses in which a command waits in the offline queue: not connected yet
// (`wait`: lazyConnect, connected by the first command), connecting (`connect`: the
// connection is up, its ready check not done) and reconnecting (`close` comes first).
const IOREDIS_WAITING = new Set(['wait', 'connecting', 'connect', 'reconnecting', 'close']);

/**
 * The runners waiting for a client to be ready, by client: one 'ready' listener per client
 * however many limiters share it (a listener each would pass EventEmitter's warning
 * threshold at eleven).
 */
const readyWaiters = new WeakMap<object, (() => void)[]>();

function onceReady(client: AnyClient, f: () => void): void {
  const waiting = readyWaiters.get(client);
  if (waiting !== undefined) {
    waiting.push(f);
    return;
  }
  readyWaiters.set(client, [f]);
  (client.once as Fn).call(client, 'ready', () => {
    const all = readyWaiters.get(client) ?? [];
    readyWaiters.delete(client);
    for (const g of all) g();
  });
}

let warnedResend = false;

/**
 * ioredis sends the commands a dropped connection left unanswered again once it reconnects
 * (`autoResendUnfulfilledCommands`, on by default): a decision whose reply was lost — it ran
 * on Redis — runs twice, charging its permits twice. Nothing of a command tells ioredis not
 * to, so a client that does it gets a warning, once per process.
 */
function warnIfResending(options: Record<string, unknown> | undefined, cluster: boolean): void {
  const own = (cluster ? options?.redisOptions : options) as Record<string, unknown> | undefined;
  // A Cluster also sends a command again after "Connection is closed" while
  // retryDelayOnFailover is above 0 (its default is 100).
  const resends =
    own?.autoResendUnfulfilledCommands !== false ||
    (cluster && options?.retryDelayOnFailover !== 0);
  if (warnedResend || !resends) return;
  warnedResend = true;
  process.emitWarning(
    cluster
      ? 'atomic-limiter/redis: this ioredis Cluster sends commands a dropped connection left unanswered again, so a decision whose reply was lost is charged twice; create it with { redisOptions: { autoResendUnfulfilledCommands: false }, retryDelayOnFailover: 0 }'
      : 'atomic-limiter/redis: this ioredis client sends commands a dropped connection left unanswered again when it reconnects, so a decision whose reply was lost is charged twice; create it with { autoResendUnfulfilledCommands: false }',
    { code: 'ATOMIC_LIMITER_REDIS_RESEND' },
  );
}

class IoRedisAdapter implements Adapter {
  readonly kind = 'ioredis';
  readonly writesAtOnce = true;
  readonly health: Health;
  readonly keyPrefix: string;
  constructor(
    private readonly client: AnyClient,
    readonly cluster: boolean,
  ) {
    const options = client.options as Record<string, unknown> | undefined;
    warnIfResending(options, cluster);
    // Without an offline queue a command fails at once while not connected: nothing waits.
    this.queues = options?.enableOfflineQueue !== false;
    // A Cluster takes its redisOptions' keyPrefix as its own.
    this.keyPrefix = typeof options?.keyPrefix === 'string' ? options.keyPrefix : '';
    this.health = healthOf(client, this);
  }

  probe(key: string): Promise<unknown> {
    return (
      this.cluster
        ? (this.client.exists as Fn).call(this.client, key)
        : (this.client.ping as Fn).call(this.client)
    ) as Promise<unknown>;
  }

  private readonly queues: boolean;

  hmget(key: string, fields: readonly string[]): Promise<unknown> {
    return (this.client.hmget as Fn).call(this.client, key, ...fields) as Promise<unknown>;
  }

  ready(): boolean {
    return !this.queues || !IOREDIS_WAITING.has(this.client.status as string);
  }

  onceReady(f: () => void): void {
    onceReady(this.client, f);
    // A lazyConnect client connects on its first command, which is held back: connect it.
    if (this.client.status === 'wait') {
      Promise.resolve((this.client.connect as Fn).call(this.client)).catch(() => {});
    }
  }

  sendOne(call: Command): Promise<unknown> {
    const method = (call.verb === 'EVALSHA' ? this.client.evalsha : this.client.eval) as Fn;
    return method.apply(this.client, argv(call)) as Promise<unknown>;
  }

  send(calls: readonly Command[]): Promise<unknown>[] {
    if (calls.length === 1) return [this.sendOne(calls[0]!)];
    // A Cluster pipeline must stay on one node: group by slot (one slot, one node).
    const groups = new Map<number, number[]>();
    calls.forEach((call, i) => {
      const slot = this.cluster ? call.slot : 0;
      const g = groups.get(slot);
      if (g) g.push(i);
      else groups.set(slot, [i]);
    });
    const out: Promise<unknown>[] = new Array(calls.length);
    for (const indexes of groups.values()) {
      if (indexes.length === 1) {
        out[indexes[0]!] = this.sendOne(calls[indexes[0]!]!);
        continue;
      }
      const pipeline = (this.client.pipeline as Fn).call(this.client) as AnyClient;
      for (const i of indexes) {
        const call = calls[i]!;
        const method = (call.verb === 'EVALSHA' ? pipeline.evalsha : pipeline.eval) as Fn;
        method.apply(pipeline, argv(call));
      }
      const done = (pipeline.exec as Fn).call(pipeline) as Promise<[Error | null, unknown][]>;
      indexes.forEach((i, j) => {
        out[i] = done.then((results) => {
          const r = results?.[j];
          if (!r) throw new Error('the pipeline returned no reply for this call');
          if (r[0]) throw r[0];
          return r[1];
        });
      });
    }
    return out;
  }

  async subscribe(
    channel: string,
    onMessage: (message: string) => void,
    onReconnect?: () => void,
    signal?: AbortSignal,
  ): Promise<Subscription> {
    const sub = (this.client.duplicate as Fn).call(this.client) as AnyClient;
    // A subscriber's own errors (reconnecting) must not crash the host: ioredis emits
    // 'error' events, and an EventEmitter with no listener throws them.
    (sub.on as Fn).call(sub, 'error', () => {});
    (sub.on as Fn).call(sub, 'message', (ch: string, message: string) => {
      if (ch === channel) onMessage(message);
    });
    let subscribed = false;
    // ioredis subscribes again by itself on a new connection ('ready').
    (sub.on as Fn).call(sub, 'ready', () => {
      if (subscribed) onReconnect?.();
    });
    try {
      await untilAborted((sub.subscribe as Fn).call(sub, channel) as Promise<unknown>, signal);
      subscribed = true;
    } catch (error) {
      (sub.disconnect as Fn).call(sub);
      throw error;
    }
    return {
      close: async () => {
        (sub.disconnect as Fn).call(sub);
      },
    };
  }
}

class NodeRedisAdapter implements Adapter {
  readonly kind = 'node-redis';
  readonly writesAtOnce = false;
  readonly keyPrefix = '';
  readonly health: Health;
  constructor(
    private readonly client: AnyClient,
    readonly cluster: boolean,
  ) {
    const options = client.options as Record<string, unknown> | undefined;
    // Without an offline queue a command fails at once while not connected: nothing waits.
    this.queues = options?.disableOfflineQueue !== true;
    this.health = healthOf(client, this);
  }

  probe(key: string): Promise<unknown> {
    const send = this.client.sendCommand as Fn;
    try {
      return (
        this.cluster
          ? send.call(this.client, key, true, ['EXISTS', key])
          : send.call(this.client, ['PING'])
      ) as Promise<unknown>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private readonly queues: boolean;

  hmget(key: string, fields: readonly string[]): Promise<unknown> {
    const send = this.client.sendCommand as Fn;
    const args = ['HMGET', key, ...fields];
    try {
      return (
        this.cluster ? send.call(this.client, key, true, args) : send.call(this.client, args)
      ) as Promise<unknown>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  ready(): boolean {
    // Open (connected, connecting or reconnecting) but not ready: its offline queue would
    // hold the command. A client without these flags (a cluster) is taken as ready.
    return !this.queues || !(this.client.isOpen === true && this.client.isReady === false);
  }

  onceReady(f: () => void): void {
    onceReady(this.client, f);
  }

  send(calls: readonly Command[]): Promise<unknown>[] {
    return calls.map((call) => this.sendOne(call));
  }

  sendOne(call: Command): Promise<unknown> {
    const send = this.client.sendCommand as Fn;
    const args = [call.verb, ...argv(call)];
    try {
      return (
        this.cluster
          ? send.call(this.client, call.keys[0], false, args)
          : send.call(this.client, args)
      ) as Promise<unknown>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  async subscribe(
    channel: string,
    onMessage: (message: string) => void,
    onReconnect?: () => void,
    signal?: AbortSignal,
  ): Promise<Subscription> {
    if (this.cluster) {
      // A node-redis cluster keeps a pub/sub connection of its own.
      await ((this.client.subscribe as Fn).call(this.client, channel, onMessage) as Promise<void>);
      return {
        close: async () => {
          await ((this.client.unsubscribe as Fn).call(
            this.client,
            channel,
            onMessage,
          ) as Promise<void>);
        },
      };
    }
    const sub = (this.client.duplicate as Fn).call(this.client) as AnyClient;
    (sub.on as Fn).call(sub, 'error', () => {});
    let subscribed = false;
    // node-redis subscribes again by itself on a new connection ('ready').
    (sub.on as Fn).call(sub, 'ready', () => {
      if (subscribed) onReconnect?.();
    });
    try {
      await untilAborted((sub.connect as Fn).call(sub) as Promise<unknown>, signal);
      await untilAborted(
        (sub.subscribe as Fn).call(sub, channel, onMessage) as Promise<unknown>,
        signal,
      );
      subscribed = true;
    } catch (error) {
      void Promise.resolve()
        .then(() => (sub.destroy as Fn | undefined)?.call(sub))
        .catch(() => {});
      throw error;
    }
    return {
      close: async () => {
        const destroy = (sub.destroy ?? sub.disconnect) as Fn;
        await Promise.resolve(destroy.call(sub)).catch(() => {});
      },
    };
  }
}
