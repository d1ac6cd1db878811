/**
 * atomic-limiter/cluster: one limiter for every process of a `node:cluster`.
 *
 * A SharedArrayBuffer cannot cross a process boundary, so the primary owns the limiters
 * and answers its workers over the IPC channel. A round trip costs tens of microseconds
 * against ~0.1 µs in-process, so both sides batch: every call a worker makes in one tick
 * travels in one message, and every answer the primary has in one tick comes back in one.
 *
 * primary:  serveCluster({ api: limiter });
 * worker:   const api = connectCluster('api'); await api.tryAcquire(ip);
 */
import cluster, { type Worker } from 'node:cluster';
import type { AnyLimiter } from './attach.js';
import {
  ClusterTimeoutError,
  ClusterUnavailableError,
  LimiterClosedError,
  QueueFullError,
} from './errors.js';
import type { Decision, Key, Lease, Stats } from './limiter.js';
import { show } from './validate.js';

// ---- the protocol ------------------------------------------------------------------------
// Every message carries MARK, so the user's own IPC messages pass through untouched.
const MARK = 'atomic-limiter/cluster@1';

type Op =
  | 'try'
  | 'consume'
  | 'acquire'
  | 'release'
  | 'refund'
  | 'stats'
  | 'reset'
  | 'abort'
  | 'drop'
  | 'take';
/** [id, limiter name, op, key, permits, acquire timeoutMs / lease id / block size] */
type Call = [number, string, Op, Key | null, number, number | null];
/**
 * [id, ok, value, held]: value is the result, or a serialized error when not ok; `held` is
 * 1 when the call left Concurrency permits held for the worker (so a worker that stopped
 * waiting for the answer knows to give them back).
 */
type Result = [number, 0 | 1, unknown, 1?];

// Lease ids are unique in the primary, across every serveCluster() of it: a worker's
// 'drop' then finds exactly one lease, in the server that granted it.
let leaseIds = 0;

type Message =
  | { mark: typeof MARK; t: 'hello' }
  | { mark: typeof MARK; t: 'ready'; names: string[] }
  | { mark: typeof MARK; t: 'calls'; calls: Call[] }
  | { mark: typeof MARK; t: 'results'; results: Result[] };

interface WireError {
  name: string;
  code?: string;
  message: string;
}

function isOurs(msg: unknown): msg is Message {
  return typeof msg === 'object' && msg !== null && (msg as { mark?: unknown }).mark === MARK;
}

function toWire(error: unknown): WireError {
  if (error instanceof Error) {
    return { name: error.name, code: (error as { code?: string }).code, message: error.message };
  }
  return { name: 'Error', message: String(error) };
}

/** Rebuilds an error as the same class, with the same code, as the primary threw. */
function fromWire(e: WireError): Error {
  switch (e.name) {
    case 'LimiterClosedError':
      return new LimiterClosedError(e.message);
    case 'QueueFullError':
      return new QueueFullError(e.message);
    case 'TypeError':
      return new TypeError(e.message);
    case 'RangeError':
      return new RangeError(e.message);
    case 'AbortError':
    case 'TimeoutError':
      return new DOMException(e.message, e.name);
    default:
      return Object.assign(new Error(e.message), { name: e.name, code: e.code });
  }
}

// JSON (the default IPC serialization) turns Infinity into null; decisions carry it.
function decisionToWire(d: Decision): unknown {
  return {
    ...d,
    retryAfterMs: finiteOrNull(d.retryAfterMs),
    resetAfterMs: finiteOrNull(d.resetAfterMs),
  };
}
function finiteOrNull(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}
function decisionFromWire(w: Record<string, unknown>): Decision {
  return {
    ...(w as unknown as Decision),
    retryAfterMs: w.retryAfterMs === null ? Number.POSITIVE_INFINITY : (w.retryAfterMs as number),
    resetAfterMs: w.resetAfterMs === null ? Number.POSITIVE_INFINITY : (w.resetAfterMs as number),
  };
}

// ---- the primary -------------------------------------------------------------------------

/** What `serveCluster` returns. */
export interface ClusterServer {
  /** Stops answering (workers' later calls time out). Held permits stay held. */
  close(): void;
}

interface WorkerState {
  worker: Worker;
  out: Result[];
  flushing: boolean;
  /** Leases from acquire() the worker still holds, by lease id. */
  leases: Map<number, Lease>;
  /** Pending acquire() calls, by call id, to abort when the worker goes. */
  waiting: Map<number, AbortController>;
  /** Concurrency permits taken by tryAcquire/consume and not yet released: name → key → n. */
  held: Map<string, Map<Key | undefined, number>>;
}

/**
 * In the primary: answers every current and future cluster worker's calls on these
 * limiters, by name. When a worker process dies, the `Concurrency` permits it held and
 * its queued `acquire()` calls are released at once.
 */
export function serveCluster(limiters: Record<string, AnyLimiter>): ClusterServer {
  if (!cluster.isPrimary) {
    throw new TypeError('serveCluster: call it in the cluster primary (cluster.isPrimary)');
  }
  if (typeof limiters !== 'object' || limiters === null) {
    throw new TypeError(
      `serveCluster: expected an object of named limiters, got ${show(limiters)}`,
    );
  }
  const named = new Map(Object.entries(limiters));
  for (const [name, limiter] of named) {
    if (typeof (limiter as AnyLimiter)?.tryAcquire !== 'function') {
      throw new TypeError(`serveCluster: "${name}" is not a limiter, got ${show(limiter)}`);
    }
  }
  const names = [...named.keys()];
  const states = new Map<number, WorkerState>();

  const stateOf = (worker: Worker): WorkerState => {
    let s = states.get(worker.id);
    if (!s) {
      s = {
        worker,
        out: [],
        flushing: false,
        leases: new Map(),
        waiting: new Map(),
        held: new Map(),
      };
      states.set(worker.id, s);
    }
    return s;
  };

  const send = (worker: Worker, msg: Message) => {
    if (worker.isConnected()) worker.send(msg);
  };

  const answer = (s: WorkerState, result: Result) => {
    s.out.push(result);
    if (s.flushing) return;
    s.flushing = true;
    queueMicrotask(() => {
      s.flushing = false;
      const results = s.out;
      s.out = [];
      send(s.worker, { mark: MARK, t: 'results', results });
    });
  };

  const hold = (s: WorkerState, name: string, key: Key | undefined, n: number) => {
    let keys = s.held.get(name);
    if (!keys) s.held.set(name, (keys = new Map()));
    keys.set(key, (keys.get(key) ?? 0) + n);
  };

  // Permits given back: first from what this worker holds, then (a worker may release
  // another's permits) from the others, so that a dead worker never releases permits a
  // live one took after them.
  const unhold = (s: WorkerState, name: string, key: Key | undefined, n: number) => {
    for (const t of [s, ...states.values()]) {
      const keys = t.held.get(name);
      const have = keys?.get(key) ?? 0;
      if (have === 0 || !keys) continue;
      const take = Math.min(have, n);
      if (have === take) keys.delete(key);
      else keys.set(key, have - take);
      n -= take;
      if (n === 0) return;
    }
  };

  const run = (s: WorkerState, call: Call) => {
    const [id, name, op, wireKey, permits, extra] = call;
    if (op === 'drop') {
      // A lease given back by the worker (extra = lease id; leases are ids of this server).
      const lease = s.leases.get(extra ?? -1);
      s.leases.delete(extra ?? -1);
      lease?.release();
      return;
    }
    const key = wireKey ?? undefined;
    const limiter = named.get(name);
    if (!limiter) return; // not ours: another serveCluster may serve this name
    const concurrency = 'release' in limiter;
    try {
      switch (op) {
        case 'take': {
          // A permit block: between `permits` and `extra` permits, as many as there are.
          if (concurrency) throw new TypeError(`${name}: permit blocks are for rate limiters`);
          const want = Math.min(extra ?? permits, limiter.limit);
          const have = Math.min(want, limiter.stats(key).available);
          const got = have >= permits && limiter.tryAcquire(key, have) ? have : 0;
          return answer(s, [id, 1, got]);
        }
        case 'try': {
          const ok = limiter.tryAcquire(key, permits);
          if (ok && concurrency) {
            hold(s, name, key, permits);
            return answer(s, [id, 1, ok, 1]);
          }
          return answer(s, [id, 1, ok]);
        }
        case 'consume': {
          const d = limiter.consume(key, permits);
          if (d.allowed && concurrency) {
            hold(s, name, key, permits);
            return answer(s, [id, 1, decisionToWire(d), 1]);
          }
          return answer(s, [id, 1, decisionToWire(d)]);
        }
        case 'release':
        case 'refund': {
          if (op === 'release') {
            if (!concurrency) throw new TypeError(`${name}: release() is for Concurrency limiters`);
            (limiter as { release(k?: Key, n?: number): void }).release(key, permits);
          } else {
            limiter.refund(key, permits);
          }
          if (concurrency) unhold(s, name, key, permits);
          return answer(s, [id, 1, null]);
        }
        case 'stats':
          return answer(s, [id, 1, limiter.stats(key) as Stats]);
        case 'reset':
          limiter.reset(key);
          return answer(s, [id, 1, null]);
        case 'abort':
          s.waiting.get(id)?.abort();
          return;
        case 'acquire': {
          const controller = new AbortController();
          s.waiting.set(id, controller);
          limiter
            .acquire(key, permits, {
              signal: controller.signal,
              ...(extra === null ? {} : { timeoutMs: extra }),
            })
            .then(
              (lease) => {
                s.waiting.delete(id);
                if (!states.has(s.worker.id)) return lease.release(); // the worker is gone
                const leaseId = ++leaseIds;
                if (concurrency) s.leases.set(leaseId, lease);
                answer(
                  s,
                  concurrency
                    ? [id, 1, { lease: leaseId, releasable: true }, 1]
                    : [id, 1, { lease: leaseId, releasable: false }],
                );
              },
              (error) => {
                s.waiting.delete(id);
                answer(s, [id, 0, toWire(error)]);
              },
            );
          return;
        }
      }
    } catch (error) {
      answer(s, [id, 0, toWire(error)]);
    }
  };

  const onMessage = (worker: Worker, msg: unknown) => {
    if (!isOurs(msg)) return;
    if (msg.t === 'hello') send(worker, { mark: MARK, t: 'ready', names });
    else if (msg.t === 'calls') {
      const s = stateOf(worker);
      for (const call of msg.calls) run(s, call);
    }
  };

  // A dead worker gives back everything it held and stops waiting.
  const onExit = (worker: Worker) => {
    const s = states.get(worker.id);
    if (!s) return;
    states.delete(worker.id);
    for (const controller of s.waiting.values()) controller.abort();
    for (const lease of s.leases.values()) lease.release();
    for (const [name, keys] of s.held) {
      const limiter = named.get(name) as { release(k?: Key, n?: number): void };
      for (const [key, n] of keys) {
        try {
          limiter.release(key, n);
        } catch {
          // Closed, or released some other way meanwhile: nothing left to give back.
        }
      }
    }
  };

  cluster.on('message', onMessage);
  cluster.on('exit', onExit);
  // Workers that connected before we served are waiting for this; no polling on either side.
  for (const worker of Object.values(cluster.workers ?? {})) {
    if (worker) send(worker, { mark: MARK, t: 'ready', names });
  }
  return {
    close() {
      cluster.off('message', onMessage);
      cluster.off('exit', onExit);
    },
  };
}

// ---- a worker ----------------------------------------------------------------------------

/** Options of `connectCluster`. */
export interface ConnectOptions {
  /** Longest wait for the primary's answer, in ms (default 5000); then ClusterTimeoutError. */
  timeoutMs?: number;
  /** Calls in flight at most (default 10 000); past it calls reject at once. */
  maxPending?: number;
  /**
   * Permit blocks (rate limiters only; default off): `tryAcquire` takes up to `block`
   * permits per trip to the primary and spends them locally, so most calls cost no IPC
   * (a round trip shared by `block` decisions). The trade: up to `block` − 1 permits per
   * worker and key sit in its block, unavailable to other workers until spent, or given
   * back after `blockTtlMs` unused or on `close()`. Integer ≥ 2.
   */
  block?: number;
  /** How long an unspent block is kept before its permits go back (ms, default 1000). */
  blockTtlMs?: number;
}

/** The primary's limiter, seen from a worker process: the same methods, each a promise. */
export interface ClusterLimiter {
  readonly name: string;
  tryAcquire(key?: Key, permits?: number): Promise<boolean>;
  consume(key?: Key, permits?: number): Promise<Decision>;
  acquire(
    key?: Key,
    permits?: number,
    options?: { signal?: AbortSignal; timeoutMs?: number },
  ): Promise<Lease>;
  /** Concurrency: gives held permits back. */
  release(key?: Key, permits?: number): Promise<void>;
  refund(key?: Key, permits?: number): Promise<void>;
  stats(key?: Key): Promise<Stats>;
  reset(key?: Key): Promise<void>;
  /** Rejects this client's calls in flight and refuses new ones. */
  close(): void;
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  deadline: number;
  client: Client;
  key: Key | undefined;
  permits: number;
}

/** One per worker process: the IPC listener, the outgoing batch, the calls in flight. */
class Channel {
  private readonly pending = new Map<number, Pending>();
  /** Calls that timed out or were aborted, whose late answers may still grant permits. */
  private readonly abandoned = new Map<
    number,
    { name: string; key: Key | undefined; permits: number }
  >();
  private readonly queued = new Map<string, Call[]>(); // per name, until the primary is ready
  private readonly ready = new Set<string>();
  private out: Call[] = [];
  private flushing = false;
  private nextId = 1;
  private timer: ReturnType<typeof setInterval> | undefined;
  private helloSent = false;

  constructor() {
    process.on('message', (msg: unknown) => {
      if (!isOurs(msg)) return;
      if (msg.t === 'ready') this.onReady(msg.names);
      else if (msg.t === 'results') for (const r of msg.results) this.onResult(r);
    });
    process.once('disconnect', () => {
      for (const [id, p] of this.pending) {
        this.pending.delete(id);
        p.reject(new ClusterUnavailableError('the IPC channel to the cluster primary closed'));
      }
    });
  }

  hello(): void {
    if (this.helloSent) return;
    this.helloSent = true;
    process.send?.({ mark: MARK, t: 'hello' });
  }

  private onReady(names: string[]): void {
    for (const name of names) {
      this.ready.add(name);
      const waiting = this.queued.get(name);
      if (waiting) {
        this.queued.delete(name);
        for (const call of waiting) this.push(call);
      }
    }
  }

  private onResult([id, ok, value, held]: Result): void {
    const p = this.pending.get(id);
    if (!p) {
      // An answer after a timeout or an abort: permits it left held go back.
      const gone = this.abandoned.get(id);
      this.abandoned.delete(id);
      if (ok && held === 1 && gone) {
        const lease = value as { lease?: number } | null;
        if (typeof lease?.lease === 'number') this.drop(gone.name, lease.lease);
        else this.push([0, gone.name, 'release', gone.key ?? null, gone.permits, null]);
      }
      return;
    }
    this.pending.delete(id);
    if (ok) p.resolve(value);
    else p.reject(fromWire(value as WireError));
    if (this.pending.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Gives a lease back to the primary (fire and forget). */
  drop(name: string, leaseId: number): void {
    this.push([0, name, 'drop', null, 0, leaseId]);
  }

  /** Tells the primary to abort a pending acquire() (fire and forget). */
  abort(name: string, id: number): void {
    this.push([id, name, 'abort', null, 0, null]);
  }

  call(
    client: Client,
    op: Op,
    key: Key | undefined,
    permits: number,
    extra: number | null,
    timeoutMs: number,
  ): { id: number; promise: Promise<unknown> } {
    if (!process.send || !process.connected) {
      throw new ClusterUnavailableError(
        'connectCluster: this process is not a connected cluster worker',
      );
    }
    if (this.pending.size >= client.maxPending) {
      throw new ClusterUnavailableError(
        `${client.name}: ${client.maxPending} calls are already in flight (option "maxPending")`,
      );
    }
    const id = this.nextId++;
    const promise = new Promise<unknown>((resolve, reject) => {
      this.pending.set(id, {
        resolve,
        reject,
        deadline: performance.now() + timeoutMs,
        client,
        key,
        permits,
      });
    });
    if (!this.timer) {
      // One coarse sweep for every deadline; unref'd: pending IPC keeps the process up.
      this.timer = setInterval(() => this.expire(), 25);
      this.timer.unref();
    }
    const call: Call = [id, client.name, op, key ?? null, permits, extra];
    if (this.ready.has(client.name)) this.push(call);
    else {
      const q = this.queued.get(client.name);
      if (q) q.push(call);
      else this.queued.set(client.name, [call]);
      this.hello();
    }
    return { id, promise };
  }

  /** Settles a call locally (abort) before its answer comes. */
  settle(id: number, error: unknown): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    this.abandon(id, p);
    p.reject(error);
  }

  /** Remembers a call we stopped waiting for, to give back what its late answer grants. */
  private abandon(id: number, p: Pending): void {
    this.abandoned.set(id, { name: p.client.name, key: p.key, permits: p.permits });
    if (this.abandoned.size > 10_000) {
      const oldest = this.abandoned.keys().next().value as number;
      this.abandoned.delete(oldest);
    }
  }

  closeClient(client: Client): void {
    for (const [id, p] of this.pending) {
      if (p.client !== client) continue;
      this.pending.delete(id);
      p.reject(new ClusterUnavailableError(`${client.name}: the client was closed`));
    }
  }

  private expire(): void {
    const now = performance.now();
    for (const [id, p] of this.pending) {
      if (p.deadline > now) continue;
      this.pending.delete(id);
      this.abandon(id, p);
      p.reject(
        new ClusterTimeoutError(
          `${p.client.name}: no answer from the cluster primary within ${p.client.timeoutMs} ms`,
        ),
      );
    }
  }

  private push(call: Call): void {
    this.out.push(call);
    if (this.flushing) return;
    this.flushing = true;
    // Every call made in this tick leaves in one message.
    queueMicrotask(() => {
      this.flushing = false;
      const calls = this.out;
      this.out = [];
      if (process.connected) process.send?.({ mark: MARK, t: 'calls', calls });
    });
  }
}

let channel: Channel | undefined;

interface Block {
  left: number;
  expires: number;
}

const TRUE = Promise.resolve(true);

class Client implements ClusterLimiter {
  readonly timeoutMs: number;
  readonly maxPending: number;
  private readonly block: number;
  private readonly blockTtlMs: number;
  private readonly blocks = new Map<Key | undefined, Block>();
  /** A block request in flight per key: later calls wait for it instead of asking too. */
  private readonly fetching = new Map<Key | undefined, Promise<unknown>>();
  private sweeper: ReturnType<typeof setInterval> | undefined;
  private closed = false;

  constructor(
    readonly name: string,
    options: ConnectOptions,
  ) {
    const timeoutMs = options.timeoutMs ?? 5000;
    if (typeof timeoutMs !== 'number' || !(timeoutMs > 0) || !Number.isFinite(timeoutMs)) {
      throw new RangeError(
        `connectCluster: option "timeoutMs" must be a positive number, got ${show(timeoutMs)}`,
      );
    }
    const maxPending = options.maxPending ?? 10_000;
    if (!Number.isInteger(maxPending) || maxPending < 1) {
      throw new RangeError(
        `connectCluster: option "maxPending" must be a positive integer, got ${show(maxPending)}`,
      );
    }
    this.timeoutMs = timeoutMs;
    this.maxPending = maxPending;
    const block = options.block ?? 1;
    if (!Number.isInteger(block) || block < 1) {
      throw new RangeError(
        `connectCluster: option "block" must be an integer ≥ 2, got ${show(block)}`,
      );
    }
    const blockTtlMs = options.blockTtlMs ?? 1000;
    if (typeof blockTtlMs !== 'number' || !(blockTtlMs > 0)) {
      throw new RangeError(
        `connectCluster: option "blockTtlMs" must be a positive number, got ${show(blockTtlMs)}`,
      );
    }
    this.block = block;
    this.blockTtlMs = blockTtlMs;
  }

  /** tryAcquire from a permit block: local when the block has enough. */
  private fromBlock(key: Key | undefined, permits: number): Promise<boolean> {
    const b = this.blocks.get(key);
    if (b && b.left >= permits && b.expires > performance.now()) {
      b.left -= permits;
      return TRUE;
    }
    const inFlight = this.fetching.get(key);
    if (inFlight) return inFlight.then(() => this.fromBlock(key, permits));
    if (b) this.giveBack(key, b); // too few left, or expired
    const fetch = (
      this.call('take', key, permits, Math.max(this.block, permits)) as Promise<number>
    ).then(
      (got) => {
        this.fetching.delete(key);
        if (got < permits) return false;
        if (got > permits) {
          this.blocks.set(key, {
            left: got - permits,
            expires: performance.now() + this.blockTtlMs,
          });
          this.sweep();
        }
        return true;
      },
      (error) => {
        this.fetching.delete(key);
        throw error;
      },
    );
    this.fetching.set(key, fetch);
    return fetch;
  }

  private giveBack(key: Key | undefined, b: Block): void {
    this.blocks.delete(key);
    if (b.left > 0) this.refund(key, b.left).catch(() => {});
    b.left = 0;
  }

  /** Gives unspent blocks back once they expire (one unref'd timer per client). */
  private sweep(): void {
    if (this.sweeper) return;
    this.sweeper = setInterval(() => {
      const now = performance.now();
      for (const [key, b] of this.blocks) if (b.expires <= now) this.giveBack(key, b);
      if (this.blocks.size === 0 && this.sweeper) {
        clearInterval(this.sweeper);
        this.sweeper = undefined;
      }
    }, this.blockTtlMs);
    this.sweeper.unref();
  }

  private call(op: Op, key: Key | undefined, permits: number, extra: number | null = null) {
    if (this.closed)
      return Promise.reject(new ClusterUnavailableError(`${this.name}: the client was closed`));
    try {
      return (channel as Channel).call(this, op, key, permits, extra, this.timeoutMs).promise;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  tryAcquire(key?: Key, permits = 1): Promise<boolean> {
    if (this.block > 1 && !this.closed) return this.fromBlock(key, permits);
    return this.call('try', key, permits) as Promise<boolean>;
  }

  async consume(key?: Key, permits = 1): Promise<Decision> {
    return decisionFromWire((await this.call('consume', key, permits)) as Record<string, unknown>);
  }

  release(key?: Key, permits = 1): Promise<void> {
    return this.call('release', key, permits) as Promise<void>;
  }

  refund(key?: Key, permits = 1): Promise<void> {
    return this.call('refund', key, permits) as Promise<void>;
  }

  stats(key?: Key): Promise<Stats> {
    return this.call('stats', key, 1) as Promise<Stats>;
  }

  reset(key?: Key): Promise<void> {
    return this.call('reset', key, 1) as Promise<void>;
  }

  acquire(
    key?: Key,
    permits = 1,
    options: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<Lease> {
    if (this.closed)
      return Promise.reject(new ClusterUnavailableError(`${this.name}: the client was closed`));
    const { signal, timeoutMs } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const ch = channel as Channel;
    let made: { id: number; promise: Promise<unknown> };
    try {
      // Waiting is the point of acquire(): the IPC timeout covers only the answer's trip
      // after the primary's own timeoutMs (none: wait as long as it takes).
      const ipcTimeout = timeoutMs === undefined ? 2 ** 31 : timeoutMs + this.timeoutMs;
      made = ch.call(this, 'acquire', key, permits, timeoutMs ?? null, ipcTimeout);
    } catch (error) {
      return Promise.reject(error);
    }
    const onAbort = () => {
      ch.abort(this.name, made.id);
      ch.settle(made.id, signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    return made.promise.then(
      (value) => {
        signal?.removeEventListener('abort', onAbort);
        const { lease, releasable } = value as { lease: number; releasable: boolean };
        let held = releasable;
        const release = () => {
          if (!held) return;
          held = false;
          ch.drop(this.name, lease);
        };
        return { release, [Symbol.dispose]: release };
      },
      (error) => {
        signal?.removeEventListener('abort', onAbort);
        throw error;
      },
    );
  }

  /** Rejects this client's calls in flight, gives its unspent blocks back, refuses new calls. */
  close(): void {
    for (const [key, b] of this.blocks) this.giveBack(key, b);
    if (this.sweeper) clearInterval(this.sweeper);
    this.closed = true;
    channel?.closeClient(this);
  }
}

/**
 * In a cluster worker: the primary's limiter called `name` (see `serveCluster`). Calls
 * made before the primary serves it wait for it (no polling) within their timeout.
 */
export function connectCluster(name: string, options: ConnectOptions = {}): ClusterLimiter {
  if (typeof name !== 'string' || name === '') {
    throw new TypeError(`connectCluster: name must be a non-empty string, got ${show(name)}`);
  }
  if (!cluster.isWorker || !process.send) {
    throw new ClusterUnavailableError(
      'connectCluster: call it in a cluster worker (cluster.isWorker)',
    );
  }
  channel ??= new Channel();
  const client = new Client(name, options);
  channel.hello();
  return client;
}
