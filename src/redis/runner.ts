import { createHash } from 'node:crypto';
import { DeadlineTimer, due } from '../deadlines.js';
import type { Adapter, Command } from './client.js';
import { TRANSIENT } from './health.js';
import { batchReplies, FOREIGN, untoken } from './replies.js';

/** A Lua script and its SHA1 (what EVALSHA names it by). */
export class Script {
  readonly sha: string;
  /** The form that decides several calls in one run (compose.lua.ts), if any. */
  readonly batch: Script | undefined;
  readonly source: string;
  /**
   * @param batch the batch form's body, if the script has one.
   * @param single a single-call form (compose.lua.ts): its ARGV is the call's permits and
   *   time alone.
   */
  constructor(
    readonly name: string,
    body: string,
    batch?: string,
    readonly single = false,
  ) {
    this.source = body;
    this.sha = createHash('sha1').update(this.source).digest('hex');
    // Named as the script itself: an error names the algorithm's script either way.
    this.batch = batch === undefined ? undefined : new Script(name, batch);
  }
}

/**
 * The token a command carries (its last argument), unique among this process's commands
 * in flight on any connection: every limiter on one client shares the connection, so one
 * counter serves them all.
 */
let lastToken = 0;
function nextToken(): string {
  // Whole, and below 2^50: a single-call tryAcquire() replies token × 2 + verdict, exact.
  lastToken = lastToken >= 2 ** 50 ? 1 : lastToken + 1;
  return String(lastToken);
}

/** Why a call got no usable answer: Redis could not be reached in time. */
export class Unavailable extends Error {
  override readonly name = 'Unavailable';
}

/**
 * What a call that fails fast rejects with (one object: nothing is allocated per call while
 * Redis is down; nobody sees it but its limiter's fallback, which reads its message).
 */
const FAST = new Unavailable(
  'Redis did not answer a call a moment ago; calls fail at once until a probe finds it answering',
);

/** Whether a call failed without being sent: it failed fast (health.ts). */
export function failedFast(error: unknown): boolean {
  return error === FAST;
}

// Error replies that mean "this node cannot serve now" (loading, failover, cluster down),
// not "the script is wrong" (TRANSIENT, health.ts): they count as Redis being unavailable.
// An error reply starts with an upper-case code; client-side errors (closed connection,
// refused, offline queue disabled) do not.
const REPLY = /^[A-Z][A-Z0-9_-]* /;

/**
 * What a limiter does with its call's script error (one function per limiter, passed with
 * every call: nothing is allocated per call for the rare error): the reply of the call made
 * again, or undefined when the call fails with `error`. A key holding a state of newer
 * options (base.ts) is read again under them.
 */
export type Again = (error: Error, call: Call) => Promise<unknown> | undefined;

/** What Again reads of the call that failed. */
export interface Call {
  readonly keys: readonly string[];
  readonly head: readonly string[];
  readonly slot: number;
  readonly late: ((reply: unknown) => void) | undefined;
  /** How many times the call was made again before this one. */
  readonly tries: number;
}

/** One call: its script, keys and arguments, and how its promise settles. */
interface Pending extends Call {
  /** The algorithm's script (its batch form decides this call beside others). */
  readonly script: Script;
  /** The script to run when the call goes alone (a faster one of its own, or `script`). */
  readonly alone: Script;
  readonly keys: readonly string[];
  /** op, time, permits, extra, TTL slack: ARGV[1…5] (the slack is the limiter's own). */
  readonly head: readonly string[];
  /** The limiter's parameters, ARGV[6…]: one array per limiter, so calls batch by it. */
  readonly params: readonly string[];
  readonly slot: number;
  resolve: (reply: unknown) => void;
  reject: (error: unknown) => void;
  /** Called with a reply that came after the call had failed (timed out): see run(). */
  readonly late: ((reply: unknown) => void) | undefined;
  readonly again: Again | undefined;
  /** performance.now() past which it fails as unavailable; set when the call goes out. */
  deadline: number;
  done: boolean;
}

/** What goes out as one command: one call, or a batch of calls of one script and slot. */
interface Unit {
  readonly calls: readonly Pending[];
  /** The script sent (the batch form for a batch). */
  readonly script: Script;
  readonly verb: 'EVALSHA' | 'EVAL';
  /** The token its reply must carry (set when it goes out). */
  token?: string;
}

/** A Pending's resolve and reject until its promise is made. */
function settled(): void {}

/** Calls per batch at most: a longer batch would hold Redis (a single thread) longer. */
export const MAX_BATCH = 128;

/**
 * Calls per batch on a client that writes each command at once (Adapter.writesAtOnce): a
 * tick's calls go out in batches of this many, each as soon as it is full, so that Redis
 * decides one while this process makes the next calls and reads the replies before them.
 * One batch per tick makes the two take turns: Redis idle while the client works, the
 * client idle while Redis does. Smaller batches cost both sides more per call (each command
 * has its fixed work), larger ones overlap less.
 */
export const EARLY_BATCH = 32;

/**
 * Runs scripts for one limiter: the calls made in the same tick go to the adapter in one
 * batch (one write) — on a client that writes at once, in batches of EARLY_BATCH calls, each
 * sent as soon as it is full — every call settles within `timeoutMs` whatever the client does
 * (reconnecting, queueing offline), and only NOSCRIPT is retried — by EVAL, which runs the
 * script and caches it on that node. After a timeout or a dropped connection the script may
 * have run; running it again could charge twice, so those are reported, never replayed.
 *
 * Calls of one batch that share a script, its parameters and a hash slot go out as ONE
 * `EVALSHA` of the script's batch form (compose.lua.ts), which decides them in order, each as
 * its own call would be decided: one command, one script run and one `TIME` for all of
 * them. A call alone goes as its own `EVALSHA`. A batch whose reply is lost or late fails
 * each of its calls, as if each had been sent alone.
 *
 * One timer covers all calls in flight (armed for the oldest deadline), not one per call;
 * the calls of one batch share one deadline, read from the clock once when they go out.
 * A call alone takes the shortest path: no batch bookkeeping, one adapter call.
 */
export class Runner {
  private queue: Pending[] = [];
  private scheduled = false;
  /** Calls held back while the client is not ready (Adapter.ready()), oldest first. */
  private parked: Pending[] = [];
  private readonly inFlight = new Set<Pending>();
  /** The one timer for every call's deadline (deadlines.ts). */
  private readonly deadlines = new DeadlineTimer((now) => this.expire(now));

  /** Calls queued that go out at once, before the tick ends (EARLY_BATCH). */
  private readonly early: number;
  /** Whether calls of this tick went out early already (see send()). */
  private split = false;

  constructor(
    private readonly adapter: Adapter,
    private readonly timeoutMs: number,
  ) {
    // A client that writes its commands at the end of the tick itself (node-redis) would
    // only split the batch: no overlap to gain. On a Cluster a tick's calls spread over
    // slots already; split further, they would go as calls alone.
    this.early = adapter.writesAtOnce && !adapter.cluster ? EARLY_BATCH : Number.POSITIVE_INFINITY;
  }

  run(
    script: Script,
    alone: Script,
    keys: readonly string[],
    head: readonly string[],
    params: readonly string[],
    slot: number,
    late?: (reply: unknown) => void,
    again?: Again,
    tries = 0,
  ): Promise<unknown> {
    // Redis was found unavailable a moment ago (health.ts): the call fails at once, and its
    // limiter applies whenUnavailable, until a probe finds Redis answering.
    if (this.adapter.health.failsFast(slot, this.timeoutMs)) return Promise.reject(FAST);
    const p: Pending = {
      script,
      alone,
      keys,
      head,
      params,
      slot,
      resolve: settled,
      reject: settled,
      late,
      again,
      tries,
      deadline: 0,
      done: false,
    };
    // The executor holds the call alone (not every argument of run()).
    const promise = new Promise<unknown>((resolve, reject) => {
      p.resolve = resolve;
      p.reject = reject;
    });
    this.queue.push(p);
    if (!this.scheduled) {
      this.scheduled = true;
      process.nextTick(this.flush);
    } else if (this.queue.length >= this.early) {
      // The tick's flush is still due, for the calls made after these.
      this.split = true;
      this.send(true);
    }
    return promise;
  }

  /**
   * Sends the calls queued this tick now rather than at the tick's end. For a lease taken
   * ahead: a thread that keeps spending without yielding (microtasks only) would otherwise
   * hold it unsent until it runs dry, when the lease was meant to be back already.
   */
  flushNow(): void {
    if (this.scheduled) this.flush();
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const split = this.split;
    this.split = false;
    this.send(split);
  };

  /**
   * Sends the calls queued. `whole`: calls of this tick went before them, in the batch form
   * (one script): a call left alone goes in it too. Alone, it would run the single-call
   * script, which a node may hold while it lacks the batch form: the batches before it,
   * refused NOSCRIPT and run again by EVAL, would then run after it, out of order.
   */
  private send(whole: boolean): void {
    const queue = this.queue;
    if (queue.length === 0) return; // sent already (flushNow(), a full early batch)
    if (!this.adapter.ready()) {
      this.park(queue);
      return;
    }
    if (queue.length === 1 && !whole) {
      // The array stays this runner's queue: nothing of this call holds it. The bookkeeping
      // comes after the write, while Redis works (a reply settles in a later microtask).
      const p = queue.pop()!;
      this.sendAlone(p, p.alone, 'EVALSHA');
      this.track(p, performance.now() + this.timeoutMs);
      return;
    }
    const deadline = performance.now() + this.timeoutMs;
    for (const p of queue) this.track(p, deadline);
    this.queue = [];
    this.sendBatches(queue, whole);
  }

  /**
   * Holds the calls of a tick while the client connects or reconnects, and sends those
   * still waiting once it is ready: given to the client now, they would wait in its
   * offline queue and run on Redis whenever it comes back, after their callers were
   * answered by the deadline (a bucket drained by calls reported unavailable). Their
   * deadlines run from now, as if sent.
   */
  private park(queue: Pending[]): void {
    this.queue = [];
    // Calls that timed out meanwhile go (an outage of many timeouts must not pile them up).
    if (this.parked.length >= 64) this.parked = this.parked.filter((p) => !p.done);
    const deadline = performance.now() + this.timeoutMs;
    for (const p of queue) {
      this.track(p, deadline);
      this.parked.push(p);
    }
    if (!this.waitingReady) {
      this.waitingReady = true;
      this.adapter.onceReady(this.unpark);
    }
  }

  private waitingReady = false;

  private readonly unpark = (): void => {
    this.waitingReady = false;
    const calls = this.parked.filter((p) => !p.done);
    this.parked = [];
    if (calls.length === 1) this.sendAlone(calls[0]!, calls[0]!.alone, 'EVALSHA');
    else if (calls.length > 1) this.sendBatches(calls);
  };

  /**
   * Sends calls already tracked: in batches by script, parameters and hash slot. `whole`: a
   * call alone in its slot goes in the batch form too (send()).
   */
  private sendBatches(queue: Pending[], whole = false): void {
    // One runner serves one limiter: its calls share the script and parameters, and group
    // by hash slot (all in one standalone), each group in its calls' order. A call of
    // another script (the options record's, or one made before a reconfigure() took effect
    // in the same tick) starts a new group of its slot, after the one before it: a slot's
    // units go in the order of their calls.
    const groups = new Map<number, Pending[]>();
    const order: Pending[][] = [];
    const units: Unit[] = [];
    for (const p of queue) {
      const g = groups.get(p.slot);
      if (g !== undefined && g[0]!.script === p.script && g[0]!.params === p.params) {
        g.push(p);
        continue;
      }
      const next = [p];
      groups.set(p.slot, next);
      order.push(next);
    }
    for (const g of order) {
      const batch = g[0]!.script.batch;
      if ((g.length === 1 && !whole) || !batch) {
        for (const p of g) units.push({ calls: [p], script: p.alone, verb: 'EVALSHA' });
        continue;
      }
      // A group past MAX_BATCH goes in several batches; the last one in the batch form
      // even if it is one call (send()'s `whole`).
      for (let i = 0; i < g.length; i += MAX_BATCH) {
        const calls = g.length <= MAX_BATCH ? g : g.slice(i, i + MAX_BATCH);
        units.push({ calls: byKey(calls), script: batch, verb: 'EVALSHA' });
      }
    }
    this.dispatch(units);
  }

  private command(u: Unit): Command {
    const first = u.calls[0]!;
    const script = u.verb === 'EVALSHA' ? u.script.sha : u.script.source;
    const token = nextToken();
    u.token = token;
    if (u.calls.length === 1 && u.script !== first.script.batch) {
      const args = u.script.single
        ? singleArgs(token, first.head)
        : [...first.head, ...first.params, token];
      return { verb: u.verb, script, keys: first.keys, args, slot: first.slot };
    }
    // The calls come grouped by key (byKey()): each key's names go once, a run of equal
    // calls (a hot key's) goes as one number, and the mode (op, time, extra) only where it
    // changes — a batch of one kind of call on distinct keys is one argument a call.
    const keys: string[] = [];
    const args: string[] = [String(first.keys.length)];
    let op = '';
    let time = '';
    let extra = '';
    let prev: Pending | undefined;
    let runAt = -1;
    let run = 0;
    let sign = 1;
    for (const p of u.calls) {
      const h = p.head;
      const sameKeys = prev !== undefined && prev.keys[0] === p.keys[0];
      if (h[0] !== op || h[1] !== time || h[3] !== extra || runAt < 0) {
        op = h[0]!;
        time = h[1]!;
        extra = h[3]!;
        args.push(op, time, extra);
      } else if (sameKeys && prev!.head[2] === h[2] && run < 255) {
        run++;
        prev = p;
        continue;
      }
      if (runAt >= 0) args[runAt] = runItem(sign, prev!.head[2]!, run);
      if (!sameKeys) for (const k of p.keys) keys.push(k);
      sign = sameKeys ? -1 : 1;
      runAt = args.length;
      args.push('');
      run = 1;
      prev = p;
    }
    args[runAt] = runItem(sign, prev!.head[2]!, run);
    args.push(token);
    return { verb: u.verb, script, keys, args, slot: first.slot };
  }

  /** Watches a call gone out (or going) until its deadline. */
  private track(p: Pending, deadline: number): void {
    if (p.done) return; // failed already (the adapter threw)
    p.deadline = deadline;
    this.inFlight.add(p);
    this.deadlines.armFor(deadline);
  }

  /** One call alone: its single-call script (or the shared one), one command. */
  private sendAlone(p: Pending, script: Script, verb: 'EVALSHA' | 'EVAL'): void {
    let reply: Promise<unknown>;
    const token = nextToken();
    const args = script.single ? singleArgs(token, p.head) : [...p.head, ...p.params, token];
    try {
      reply = this.adapter.sendOne({
        verb,
        script: verb === 'EVALSHA' ? script.sha : script.source,
        keys: p.keys,
        args,
        slot: p.slot,
      });
    } catch (error) {
      this.failAlone(p, script, verb, token, error);
      return;
    }
    reply.then(
      (r) => {
        const reply = untoken(r, token);
        if (reply === FOREIGN) this.foreign(p);
        else this.settle(p, reply);
      },
      (error) => this.failAlone(p, script, verb, token, error),
    );
  }

  private failAlone(
    p: Pending,
    script: Script,
    verb: 'EVALSHA' | 'EVAL',
    token: string,
    error: unknown,
  ): void {
    const message = error instanceof Error ? error.message : String(error);
    if (verb === 'EVALSHA' && !p.done && message.startsWith('NOSCRIPT')) {
      // As failUnit(): the script did not run; EVAL runs it and caches it on that node.
      this.sendAlone(p, script, 'EVAL');
      return;
    }
    this.fail(p, token, error);
  }

  /**
   * A reply that is not the call's own: Redis's answer to this call went elsewhere (or
   * nowhere), so the call is unanswered, as after a dropped connection.
   */
  private foreign(p: Pending): void {
    if (p.done) return;
    this.reject(p, new Unavailable(FOREIGN));
  }

  private dispatch(units: Unit[]): void {
    let replies: Promise<unknown>[];
    try {
      replies = this.adapter.send(units.map((u) => this.command(u)));
    } catch (error) {
      for (const u of units) this.failUnit(u, error);
      return;
    }
    // A reply is taken only with its unit's token (FOREIGN).

    units.forEach((u, i) => {
      replies[i]!.then(
        (reply) => this.settleUnit(u, reply),
        (error) => this.failUnit(u, error),
      );
    });
  }

  private settleUnit(u: Unit, tokened: unknown): void {
    if (u.script !== u.calls[0]!.script.batch) {
      const reply = untoken(tokened, u.token!);
      if (reply === FOREIGN) this.foreign(u.calls[0]!);
      else this.settle(u.calls[0]!, reply);
      return;
    }
    if (!Array.isArray(tokened) || tokened[0] !== u.token) {
      for (const p of u.calls) this.foreign(p);
      return;
    }
    const replies = batchReplies(tokened, u.calls);
    if (replies === undefined) {
      const error = new Error(
        `atomic-limiter/redis: script ${u.script.name} returned an unexpected batch reply`,
      );
      for (const p of u.calls) this.reject(p, error);
      return;
    }
    u.calls.forEach((p, i) => {
      const r = replies[i];
      if (typeof r === 'string') this.failed(p, new Error(r.slice(1)));
      else this.settle(p, r);
    });
  }

  private failUnit(u: Unit, error: unknown): void {
    const message = error instanceof Error ? error.message : String(error);
    if (u.verb === 'EVALSHA' && message.startsWith('NOSCRIPT')) {
      // The node restarted, failed over or its scripts were flushed: run the source. The
      // script did not run, so nothing is charged twice.
      const calls = u.calls.filter((p) => !p.done);
      if (calls.length > 0) this.dispatch([{ calls, script: u.script, verb: 'EVAL' }]);
      return;
    }
    for (const p of u.calls) this.fail(p, u.token, error);
  }

  private settle(p: Pending, reply: unknown): void {
    this.adapter.health.answered(p.slot);
    if (p.done) {
      // The call ran after all, its caller answered already (a timeout): what it took is
      // its limiter's to undo (a Concurrency grant nobody holds).
      p.late?.(reply);
      return;
    }
    p.done = true;
    this.inFlight.delete(p);
    p.resolve(reply);
  }

  private reject(p: Pending, error: unknown): void {
    if (p.done) return;
    p.done = true;
    this.inFlight.delete(p);
    if (error instanceof Unavailable) this.markDown(p);
    p.reject(error);
  }

  /** A call found Redis unavailable: later calls of its part fail fast (health.ts). */
  private markDown(p: Pending): void {
    // Its deadline was set when it went out (or was held back): timeoutMs after.
    this.adapter.health.markDown(p.slot, p.keys[0]!, p.deadline - this.timeoutMs);
  }

  /**
   * A call's command failed with `error`. An error reply is the script's own failure only
   * when it carries the command's token (FOREIGN); any other error reply reached this
   * call by mistake (the client's own handshake, another command's) and says nothing of it.
   */
  private fail(p: Pending, token: string | undefined, error: unknown): void {
    if (p.done) return;
    const message = error instanceof Error ? error.message : String(error);
    const mark = ` [${token}]`;
    if (REPLY.test(message) && !TRANSIENT.test(message)) {
      // The mark ends the script's own text; an error the script raised has Redis's
      // " script: <sha>, on @user_script:<line>." after it.
      const at = token === undefined ? -1 : message.lastIndexOf(mark);
      const end = at + mark.length;
      if (at < 0 || (end !== message.length && !message.startsWith(' script: ', end))) {
        this.reject(p, new Unavailable(`${FOREIGN}: ${message}`, { cause: error }));
        return;
      }
      this.failed(p, new Error(message.slice(0, at), { cause: error }));
    } else {
      this.reject(p, new Unavailable(message, { cause: error }));
    }
  }

  /** A call whose script failed with `error` (its own, token checked): an error naming it. */
  private failed(p: Pending, error: Error): void {
    if (p.done) return;
    const message = error.message;
    if (TRANSIENT.test(message)) {
      this.reject(p, new Unavailable(message, { cause: error }));
      return;
    }
    const failure = new Error(`atomic-limiter/redis: script ${p.script.name} failed: ${message}`, {
      cause: error.cause ?? error,
    });
    const again = p.again?.(failure, p);
    if (again === undefined) {
      this.reject(p, failure);
      return;
    }
    p.done = true;
    this.inFlight.delete(p);
    again.then(p.resolve, p.reject);
  }

  /** Fails every call past its deadline; returns the earliest deadline left. */
  private expire(now: number): number {
    let next = Number.POSITIVE_INFINITY;
    for (const p of this.inFlight) {
      if (due(p.deadline, now)) {
        p.done = true;
        this.inFlight.delete(p);
        this.markDown(p);
        p.reject(new Unavailable(`no answer from Redis within ${this.timeoutMs} ms`));
      } else if (p.deadline < next) {
        next = p.deadline;
      }
    }
    return next;
  }
}

/**
 * The calls of a batch grouped by key, each key's in their order, keys in order of first
 * call: calls on different keys decide the same in any order, and a key's calls side by
 * side go as runs (a hot key's batch is a few arguments, whatever its length).
 */
function byKey(calls: readonly Pending[]): readonly Pending[] {
  let moved = false;
  const firsts = new Set<string>();
  for (let i = 0; i < calls.length; i++) {
    const k = calls[i]!.keys[0]!;
    if (i > 0 && calls[i - 1]!.keys[0] === k) continue;
    if (firsts.has(k)) {
      moved = true;
      break;
    }
    firsts.add(k);
  }
  if (!moved) return calls;
  const seen = new Map<string, Pending[]>();
  for (const p of calls) {
    const g = seen.get(p.keys[0]!);
    if (g) g.push(p);
    else seen.set(p.keys[0]!, [p]);
  }
  return [...seen.values()].flat();
}

/** A run's item in a batch's ARGV: ± (permits × 256 + how many); negative on the same keys. */
function runItem(sign: number, permits: string, run: number): string {
  return String(sign * ((permits === '1' ? 1 : Number(permits)) * 256 + run));
}

/**
 * The ARGV of a single-call script for a call's head (op, time, permits, extra): its token,
 * then a lease's ('b') least, most and time, the others' permits and time, trailing
 * defaults omitted.
 */
export function singleArgs(token: string, head: readonly string[]): string[] {
  const time = head[1]!;
  const permits = head[2]!;
  if (head[0] === 'b') {
    return time === '' ? [token, head[3]!, permits] : [token, head[3]!, permits, time];
  }
  if (time !== '') return [token, permits, time];
  return permits === '1' ? [token] : [token, permits];
}
