import { afterEach, describe, expect, it } from 'vitest';
import {
  type AnyLimiter,
  Concurrency,
  FixedWindow,
  LeakyBucket,
  LimiterClosedError,
  ManualClock,
  QueueFullError,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import { seededRandom } from '../helpers/random.mjs';
import { startWorkers, type WorkerGroup } from '../helpers/threads.js';

// The FIFO wait queue across real worker threads. Waiters live in workers (mostly the
// agents of scenario queue:agent, told what to do by message); the main thread
// holds and gives back permits, moves a ManualClock, closes, and reads stats(). Orders and
// counts are exact: a step waits for a shared-buffer signal or a message, never for time
// to pass. Only timeouts and dead threads involve real time, bounded widely.

// ---- helpers ---------------------------------------------------------------------------

// Word indexes and outcome codes of the shared `events` buffer (test/fixtures/scenarios/lib.mjs).
const EV_ENQUEUED = 0;
const EV_CLAIMED = 1;
const EV_WRITTEN = 2;
const EV_LOG = 3;
const OUTCOMES = ['none', 'granted', 'queue-full', 'closed', 'aborted', 'timed-out', 'other'];

/** Bound on any single wait for a signal from another thread (normally well under 50 ms). */
const SIGNAL_MS = 10_000;

/** Resolves once `words[index] >= target`; rejects, naming `what`, after `ms`. */
async function reach(
  words: Int32Array,
  index: number,
  target: number,
  what: string,
  ms = SIGNAL_MS,
) {
  const deadline = performance.now() + ms;
  for (;;) {
    const seen = Atomics.load(words, index);
    if (seen >= target) return;
    const left = deadline - performance.now();
    if (left <= 0) throw new Error(`waited ${ms} ms for ${what}: ${seen} of ${target}`);
    await Atomics.waitAsync(words, index, seen, left).value;
  }
}

/** Resolves once `ready()` is true, checking every millisecond; rejects after `ms`. */
async function until(ready: () => boolean, what: string, ms = SIGNAL_MS) {
  const deadline = performance.now() + ms;
  while (!ready()) {
    if (performance.now() > deadline) throw new Error(`waited ${ms} ms for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

/** Busy-waits `us` microseconds (jitter for races; not a way to wait for anything). */
function spin(us: number) {
  const end = performance.now() + us / 1000;
  while (performance.now() < end) {}
}

interface ErrorInfo {
  name: string;
  code?: string;
  message: string;
  isDomException: boolean;
  isClosedError: boolean;
  isQueueFullError: boolean;
}

interface Settled {
  id: number;
  outcome: string;
  waitedMs: number;
  error?: ErrorInfo;
}

interface Answer {
  value?: unknown;
  error?: ErrorInfo;
}

interface AcquireCommand {
  key?: string;
  permits?: number;
  timeoutMs?: number;
  /** Give the waiter an AbortSignal that `abort(id)` aborts. */
  abortable?: boolean;
  /** Keep a granted lease until `release(id)` (default: release it at once). */
  hold?: boolean;
}

type Deferred<T> = { promise: Promise<T>; resolve: (value: T) => void };

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const running: { terminate(): Promise<void> }[] = [];
const openLimiters: AnyLimiter[] = [];

afterEach(async () => {
  await Promise.all(running.splice(0).map((group) => group.terminate()));
  // Rejects any waiter a failed test left in the main thread (and stops its heartbeat).
  for (const limiter of openLimiters.splice(0)) limiter.close();
});

/** A limiter closed after the test (so no waiter of the main thread outlives it). */
function track<L extends AnyLimiter>(limiter: L): L {
  openLimiters.push(limiter);
  return limiter;
}

/** A main-thread acquire() whose rejection is asserted later (never unhandled meanwhile). */
function pending<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}

/** Worker threads that wait on limiters when told to (scenario queue:agent). */
class Agents {
  readonly events = new Int32Array(new SharedArrayBuffer(4 * 1024));
  private readonly group: WorkerGroup<unknown>;
  private readonly failure: Promise<never>;
  private readonly settledById = new Map<number, Deferred<Settled>>();
  private readonly answers = new Map<number, Deferred<Answer>>();
  private seq = 0;
  private nextId = 1;
  private enqueued = 0;

  private constructor(count: number) {
    this.group = startWorkers('queue:agent', count, {
      events: this.events.buffer,
    });
    running.push(this.group);
    // A worker that throws or exits fails whatever the test is waiting for.
    this.failure = this.group.results.then(() => {
      throw new Error('an agent exited');
    });
    this.failure.catch(() => {});
    for (const worker of this.group.workers) {
      worker.on('message', (m: { type: string; seq: number } & Settled & Answer) => {
        const { type, seq, ...rest } = m;
        if (type === 'settled') this.settledById.get(m.id)?.resolve(rest);
        else this.answers.get(seq)?.resolve(rest);
      });
    }
  }

  /** Starts `count` agents, each attached to `limiter`. */
  static async start(count: number, limiter: AnyLimiter): Promise<Agents> {
    const agents = new Agents(count);
    await Promise.all(
      agents.group.workers.map((_, w) =>
        agents.send(w, { op: 'attach', name: 'l', handle: limiter.handle }),
      ),
    );
    return agents;
  }

  get workers() {
    return this.group.workers;
  }

  private async wait<T>(promise: Promise<T>, what: string): Promise<T> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`waited ${SIGNAL_MS} ms for ${what}`)), SIGNAL_MS);
    });
    try {
      return await Promise.race([promise, this.failure, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  private send(worker: number, command: Record<string, unknown>): Promise<Answer> {
    const seq = ++this.seq;
    const answer = deferred<Answer>();
    this.answers.set(seq, answer);
    this.group.workers[worker]!.postMessage({ ...command, seq });
    return this.wait(answer.promise, `agent ${worker} to answer ${String(command.op)}`);
  }

  /**
   * Agent `worker` calls acquire(); resolves with the waiter's id once acquire() has
   * returned there (the waiter is queued by then, unless it was settled at once).
   */
  async acquire(worker: number, command: AcquireCommand = {}): Promise<number> {
    const id = this.nextId++;
    this.settledById.set(id, deferred<Settled>());
    this.group.workers[worker]!.postMessage({ op: 'acquire', id, limiter: 'l', ...command });
    this.enqueued++;
    await this.wait(
      reach(this.events, EV_ENQUEUED, this.enqueued, `acquire ${id} in agent ${worker}`),
      `acquire ${id}`,
    );
    return id;
  }

  /** How waiter `id` ended (its lease is released by then unless it was held). */
  settled(id: number): Promise<Settled> {
    return this.wait(this.settledById.get(id)!.promise, `waiter ${id} to settle`);
  }

  abort(worker: number, id: number): Promise<Answer> {
    return this.send(worker, { op: 'abort', id });
  }

  /** Releases the lease agent `worker` holds for waiter `id`. */
  release(worker: number, id: number): Promise<Answer> {
    return this.send(worker, { op: 'release', id });
  }

  /** Agent `worker` calls `method(...args)` on the limiter (or reads `closed`). */
  call(worker: number, method: string, ...args: unknown[]): Promise<Answer> {
    return this.send(worker, { op: 'call', limiter: 'l', method, args });
  }

  /** Agent `worker` calls acquire(key) and answers with how it settled. */
  acquireOutcome(worker: number, key?: string): Promise<Answer> {
    return this.send(worker, { op: 'acquire-settled', limiter: 'l', key });
  }

  /** The settled waiters so far, in the order they settled across all agents. */
  log(): { id: number; outcome: string }[] {
    const written = Atomics.load(this.events, EV_WRITTEN);
    const claimed = Atomics.load(this.events, EV_CLAIMED);
    if (written !== claimed) throw new Error(`log read mid-write: ${written} of ${claimed}`);
    return Array.from({ length: written }, (_, k) => {
      const entry = Atomics.load(this.events, EV_LOG + k);
      return { id: entry >> 3, outcome: OUTCOMES[entry & 7]! };
    });
  }

  /** Waits until `n` waiters have settled, then reads the log. */
  async waitLog(n: number): Promise<{ id: number; outcome: string }[]> {
    await this.wait(reach(this.events, EV_WRITTEN, n, 'settled waiters'), `${n} settled`);
    // The writer of the last entry bumps EV_WRITTEN after storing it; the others' entries
    // are at most a few instructions behind their position claim.
    await until(
      () => Atomics.load(this.events, EV_CLAIMED) === Atomics.load(this.events, EV_WRITTEN),
      'log entries to be written',
    );
    return this.log();
  }
}

const granted = (...ids: number[]) => ids.map((id) => ({ id, outcome: 'granted' }));

// ---- 1. FIFO order -----------------------------------------------------------------------

describe('FIFO order across threads', () => {
  it.each([
    ['the monotonic clock', () => undefined],
    // Head waiters then park on the clock's tick word, which release() ticks.
    ['a ManualClock', () => new ManualClock()],
  ])(
    'grants a Concurrency permit on %s to six waiters in three threads in exactly the order they queued',
    async (_, clock) => {
      const limiter = track(new Concurrency({ limit: 1, queueLimit: 8, clock: clock() }));
      const agents = await Agents.start(3, limiter);
      expect(limiter.tryAcquire('k')).toBe(true);
      // Which agent queues next: interleaved, not in thread order.
      const order = [2, 0, 1, 1, 2, 0];
      const ids: number[] = [];
      for (const [n, worker] of order.entries()) {
        ids.push(await agents.acquire(worker, { key: 'k' }));
        expect(limiter.stats('k')).toMatchObject({ available: 0, queued: n + 1 });
      }
      expect(agents.log()).toEqual([]);
      // Each waiter, once granted, logs itself and releases: that grants the next one.
      limiter.release('k');
      expect(await agents.waitLog(6)).toEqual(granted(...ids));
      await agents.settled(ids.at(-1)!);
      expect(limiter.stats('k')).toEqual({ available: 1, queued: 0, admitted: 7, rejected: 0 });
    },
  );

  it('grants TokenBucket waiters in three threads one per ManualClock refill, in the order they queued', async () => {
    const clock = new ManualClock();
    const limiter = track(
      new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 8, clock }),
    );
    const agents = await Agents.start(3, limiter);
    expect(limiter.tryAcquire('k')).toBe(true);
    const order = [1, 2, 0, 2, 0, 1];
    const ids: number[] = [];
    for (const worker of order) ids.push(await agents.acquire(worker, { key: 'k' }));
    for (let k = 1; k <= ids.length; k++) {
      // Nobody was granted without a refill.
      expect(agents.log()).toHaveLength(k - 1);
      expect(limiter.stats('k')).toMatchObject({ available: 0, queued: ids.length - k + 1 });
      clock.advance(1000); // exactly one token
      const log = await agents.waitLog(k);
      expect(log).toEqual(granted(...ids.slice(0, k)));
      expect(limiter.stats('k')).toMatchObject({ available: 0, admitted: 1 + k });
    }
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 0 });
    clock.advance(1000);
    expect(limiter.stats('k')).toMatchObject({ available: 1, queued: 0, admitted: 7 });
  });
});

// ---- 2. No jumping the queue -------------------------------------------------------------

describe('tryAcquire and consume with waiters in another thread (oldest-first)', () => {
  it('refuses Concurrency permits to the main thread and to another worker while a worker waits, even with a permit free', async () => {
    const limiter = track(new Concurrency({ limit: 2, queueLimit: 4 }));
    const agents = await Agents.start(2, limiter);
    expect(limiter.tryAcquire('k', 2)).toBe(true);
    const id = await agents.acquire(0, { key: 'k', permits: 2, hold: true });
    // One permit comes back; the waiter needs two, so it stays queued and the permit
    // stays free — for the waiter, not for whoever asks first.
    limiter.release('k');
    expect(limiter.stats('k')).toMatchObject({ available: 1, queued: 2 });
    expect(limiter.tryAcquire('k')).toBe(false);
    expect(limiter.consume('k')).toMatchObject({ allowed: false });
    expect(await agents.call(1, 'tryAcquire', 'k')).toEqual({ value: false });
    expect(limiter.stats('k')).toMatchObject({ available: 1, queued: 2 });
    // The second permit: the waiter takes both. Whether or not it has run yet, nobody
    // else gets one (the queue is still flagged until the waiter holds them).
    limiter.release('k');
    expect(limiter.tryAcquire('k')).toBe(false);
    expect(await agents.settled(id)).toMatchObject({ outcome: 'granted' });
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 0 });
    expect(limiter.tryAcquire('k')).toBe(false);
    await agents.release(0, id);
    expect(limiter.tryAcquire('k', 2)).toBe(true);
  });

  it('refuses TokenBucket tokens that refilled for a waiter in another thread until it is served', async () => {
    const clock = new ManualClock();
    const limiter = track(
      new TokenBucket({ capacity: 2, refillPerSecond: 1, queueLimit: 2, clock }),
    );
    const agents = await Agents.start(2, limiter);
    expect(limiter.tryAcquire('k', 2)).toBe(true);
    const id = await agents.acquire(0, { key: 'k', permits: 2 });
    clock.advance(1000); // one token: not enough for the waiter
    expect(limiter.stats('k')).toMatchObject({ available: 1, queued: 2 });
    expect(limiter.tryAcquire('k')).toBe(false);
    expect(limiter.consume('k')).toMatchObject({ allowed: false });
    expect(await agents.call(1, 'tryAcquire', 'k')).toEqual({ value: false });
    clock.advance(1000); // two tokens: the waiter's
    expect(limiter.tryAcquire('k')).toBe(false);
    expect(await agents.settled(id)).toMatchObject({ outcome: 'granted' });
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 0, admitted: 4 });
    clock.advance(1000);
    expect(limiter.tryAcquire('k')).toBe(true);
  });
});

// ---- 3. Queue full, newest-first ---------------------------------------------------------

describe('a full queue across threads', () => {
  it('counts queueLimit in permits for waiters of every thread and refuses what does not fit', async () => {
    const limiter = track(new Concurrency({ limit: 2, queueLimit: 3 }));
    const agents = await Agents.start(3, limiter);
    expect(limiter.tryAcquire('k', 2)).toBe(true);
    const a = await agents.acquire(0, { key: 'k', permits: 2 }); // 2 of 3 queued
    const b1 = await agents.acquire(1, { key: 'k', permits: 2 }); // 4 > 3: refused
    const bFull = await agents.settled(b1);
    expect(bFull).toMatchObject({ outcome: 'queue-full' });
    expect(bFull.error).toMatchObject({ code: 'ERR_QUEUE_FULL', isQueueFullError: true });
    const c = await agents.acquire(2, { key: 'k', permits: 1 }); // 3 of 3
    const b2 = await agents.acquire(1, { key: 'k', permits: 1 }); // 4 > 3: refused
    expect(await agents.settled(b2)).toMatchObject({ outcome: 'queue-full' });
    // The main thread is refused too.
    await expect(limiter.acquire('k')).rejects.toBeInstanceOf(QueueFullError);
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 3, rejected: 4 });
    limiter.release('k', 2);
    expect(await agents.waitLog(4)).toEqual([
      { id: b1, outcome: 'queue-full' },
      { id: b2, outcome: 'queue-full' },
      ...granted(a, c),
    ]);
    await agents.settled(c);
    expect(limiter.stats('k')).toMatchObject({ available: 2, queued: 0, admitted: 5 });
  });

  it("with 'newest-first' evicts the oldest waiters in other threads with ERR_QUEUE_FULL and serves the newest", async () => {
    const limiter = track(new Concurrency({ limit: 2, queueLimit: 2, queueOrder: 'newest-first' }));
    const agents = await Agents.start(3, limiter);
    expect(limiter.tryAcquire('k', 2)).toBe(true);
    const a1 = await agents.acquire(0, { key: 'k' });
    const b1 = await agents.acquire(1, { key: 'k' });
    expect(agents.log()).toEqual([]);
    const c1 = await agents.acquire(2, { key: 'k' }); // evicts a1, the oldest
    const evicted = await agents.settled(a1);
    expect(evicted).toMatchObject({ outcome: 'queue-full' });
    expect(evicted.error).toMatchObject({
      name: 'QueueFullError',
      code: 'ERR_QUEUE_FULL',
      isQueueFullError: true,
    });
    expect(limiter.stats('k')).toMatchObject({ queued: 2 });
    // Two permits: both waiters left (b1, then c1) make room.
    const a2 = await agents.acquire(0, { key: 'k', permits: 2 });
    expect(await agents.settled(b1)).toMatchObject({ outcome: 'queue-full' });
    expect(await agents.settled(c1)).toMatchObject({ outcome: 'queue-full' });
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 2 });
    limiter.release('k', 2);
    expect(await agents.settled(a2)).toMatchObject({ outcome: 'granted' });
    const log = await agents.waitLog(4);
    expect(log[0]).toEqual({ id: a1, outcome: 'queue-full' });
    expect(new Set(log.slice(1, 3).map((e) => `${e.id}:${e.outcome}`))).toEqual(
      new Set([`${b1}:queue-full`, `${c1}:queue-full`]),
    );
    expect(log[3]).toEqual({ id: a2, outcome: 'granted' });
    expect(limiter.stats('k')).toMatchObject({ available: 2, queued: 0, admitted: 4 });
  });
});

describe("'newest-first' and a request larger than queueLimit", () => {
  it('refuses the request at once without evicting the waiters of other threads (it could never fit)', async () => {
    const limiter = track(new Concurrency({ limit: 2, queueLimit: 1, queueOrder: 'newest-first' }));
    const agents = await Agents.start(2, limiter);
    expect(limiter.tryAcquire('k', 2)).toBe(true);
    const a = await agents.acquire(0, { key: 'k' });
    // Two permits may never wait where queueLimit is 1: evicting `a` would not make room.
    const b = await agents.acquire(1, { key: 'k', permits: 2 });
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 1 });
    expect(await agents.settled(b)).toMatchObject({ outcome: 'queue-full' });
    limiter.release('k', 2);
    expect(await agents.settled(a)).toMatchObject({ outcome: 'granted' });
    expect(agents.log()).toEqual([
      { id: b, outcome: 'queue-full' },
      { id: a, outcome: 'granted' },
    ]);
  });
});

// ---- 4. Abort and timeout ----------------------------------------------------------------

describe('leaving the queue from another thread', () => {
  it('rejects an aborted waiter with its AbortError and a timed-out one with a TimeoutError, and serves the waiter behind them', async () => {
    const limiter = track(new Concurrency({ limit: 1, queueLimit: 4 }));
    const agents = await Agents.start(3, limiter);
    expect(limiter.tryAcquire('k')).toBe(true);
    const a = await agents.acquire(0, { key: 'k', abortable: true }); // the head
    const b = await agents.acquire(1, { key: 'k', timeoutMs: 100 });
    const c = await agents.acquire(2, { key: 'k' });
    await agents.abort(0, a);
    const aborted = await agents.settled(a);
    expect(aborted).toMatchObject({ outcome: 'aborted' });
    expect(aborted.error).toMatchObject({ name: 'AbortError', isDomException: true });
    const timedOut = await agents.settled(b);
    expect(timedOut).toMatchObject({ outcome: 'timed-out' });
    expect(timedOut.error).toMatchObject({ name: 'TimeoutError', isDomException: true });
    // A timer of 100 ms; the upper bound only catches a timeout that never fired on time.
    expect(timedOut.waitedMs).toBeGreaterThanOrEqual(95);
    expect(timedOut.waitedMs).toBeLessThan(5000);
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 1 });
    limiter.release('k');
    expect(await agents.settled(c)).toMatchObject({ outcome: 'granted' });
    const log = agents.log().map((e) => e.id);
    expect(new Set(log.slice(0, 2))).toEqual(new Set([a, b]));
    expect(log[2]).toBe(c);
    expect(limiter.stats('k')).toMatchObject({ available: 1, queued: 0, admitted: 2 });
  });

  it('settles each of 200 waiters racing an abort or a timeout against a grant exactly once, and leaks no permit or place', async () => {
    const rounds = 200;
    const limiter = track(new Concurrency({ limit: 1, queueLimit: 2 }));
    const control = new Int32Array(new SharedArrayBuffer(2 * 4 * 4));
    const outcomes = new Int32Array(new SharedArrayBuffer(2 * rounds * 4));
    const group = startWorkers('queue:abort-race', 2, {
      limiter: limiter.handle,
      key: 'k',
      rounds,
      control: control.buffer,
      outcomes: outcomes.buffer,
    });
    running.push(group);
    // Per worker: START, ENQUEUED, GO, DONE (scenario queue:abort-race).
    const word = (worker: number, w: number) => worker * 4 + w;
    const set = (index: number, value: number) => {
      Atomics.store(control, index, value);
      Atomics.notify(control, index);
    };
    const problems: string[] = [];
    const leaver = new Map<string, number>();
    // How long each side waits before its move: seeded, so a failing run's delays repeat.
    const random = seededRandom(200);
    for (let round = 1; round <= rounds; round++) {
      if (!limiter.tryAcquire('k')) problems.push(`round ${round}: the permit was not free`);
      set(word(0, 0), round);
      await reach(control, word(0, 1), round, `worker 0 queued in round ${round}`);
      set(word(1, 0), round);
      await reach(control, word(1, 1), round, `worker 1 queued in round ${round}`);
      if (round % 2 === 1) {
        // Worker 0 aborts when told; the permit comes back about then, either side first.
        const queued = limiter.stats('k').queued;
        if (queued !== 2) problems.push(`round ${round}: ${queued} queued before the race`);
        if (round % 4 === 1) {
          limiter.release('k');
          spin(random() * 50);
          set(word(0, 2), round);
        } else {
          set(word(0, 2), round);
          spin(random() * 50);
          limiter.release('k');
        }
      } else {
        // Worker 0 times out 1 ms after it queued; the permit comes back about then.
        spin(random() * 1500);
        limiter.release('k');
      }
      await reach(control, word(0, 3), round, `worker 0 done in round ${round}`);
      await reach(control, word(1, 3), round, `worker 1 done in round ${round}`);
      const first = OUTCOMES[outcomes[round - 1]!]!;
      const second = OUTCOMES[outcomes[rounds + round - 1]!]!;
      const leaving = round % 2 === 1 ? 'aborted' : 'timed-out';
      if (first !== 'granted' && first !== leaving) {
        problems.push(`round ${round}: worker 0 ${first}`);
      }
      // Whatever worker 0 did, the waiter behind it is served.
      if (second !== 'granted') problems.push(`round ${round}: worker 1 ${second}`);
      leaver.set(`${leaving}/${first}`, (leaver.get(`${leaving}/${first}`) ?? 0) + 1);
      const stats = limiter.stats('k');
      if (stats.available !== 1 || stats.queued !== 0) {
        problems.push(`round ${round}: ${JSON.stringify(stats)} after both settled`);
      }
    }
    expect(problems).toEqual([]);
    await group.results;
    const stats = limiter.stats('k');
    expect(stats).toMatchObject({ available: 1, queued: 0 });
    // One permit per round to the main thread and to worker 1, and one to worker 0 in the
    // rounds it was granted rather than leaving.
    const firstGranted =
      (leaver.get('aborted/granted') ?? 0) + (leaver.get('timed-out/granted') ?? 0);
    expect(stats.admitted).toBe(2 * rounds + firstGranted);
    // Exactly one permit is free: one tryAcquire succeeds, the next is refused.
    expect([limiter.tryAcquire('k'), limiter.tryAcquire('k')]).toEqual([true, false]);
    // The race went both ways: worker 0 was sometimes served, sometimes gone first.
    const tally = JSON.stringify(Object.fromEntries(leaver));
    expect(firstGranted, tally).toBeGreaterThan(0);
    expect(firstGranted, tally).toBeLessThan(rounds);
  });
});

// ---- 5. Lost wake-ups --------------------------------------------------------------------

describe('Concurrency limit 2 under 4 threads acquiring and releasing', () => {
  it('completes every one of 4 × 500 acquire/release cycles, never holds more than 2, and never leaves a waiter asleep beside a free permit', async () => {
    const threads = 4;
    const cycles = 500;
    const limiter = track(new Concurrency({ limit: 2, queueLimit: 2 * threads }));
    const inUse = new Int32Array(new SharedArrayBuffer(8));
    const progress = new Int32Array(new SharedArrayBuffer(4));
    const group = startWorkers<{ grants: number; permitsGranted: number }>('queue:soak', threads, {
      limiter: limiter.handle,
      key: 'k',
      cycles,
      inUse: inUse.buffer,
      progress: progress.buffer,
    });
    running.push(group);
    // The watchdog: a waiter queued while a permit is free is normal for the moment it
    // takes the woken head to run; for 50 samples in a row (≥ 100 ms) it is a lost wake-up.
    let streak = 0;
    let streakStart = 0;
    let worst = { samples: 0, ms: 0, stats: '' };
    let samples = 0;
    const watchdog = setInterval(() => {
      samples++;
      const s = limiter.stats('k');
      if (s.queued > 0 && s.available > 0) {
        if (streak++ === 0) streakStart = performance.now();
        if (streak > worst.samples) {
          worst = {
            samples: streak,
            ms: performance.now() - streakStart,
            stats: JSON.stringify(s),
          };
        }
      } else {
        streak = 0;
      }
    }, 2);
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const results = await Promise.race([
        group.results,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new Error(
                  `hung: ${Atomics.load(progress, 0)} of ${threads * cycles} cycles done, stats ${JSON.stringify(limiter.stats('k'))}`,
                ),
              ),
            30_000,
          );
        }),
      ]);
      expect(results.map((r) => r.grants)).toEqual(new Array(threads).fill(cycles));
      expect(Atomics.load(progress, 0)).toBe(threads * cycles);
      const permits = results.reduce((sum, r) => sum + r.permitsGranted, 0);
      expect(limiter.stats('k')).toEqual({
        available: 2,
        queued: 0,
        admitted: permits,
        rejected: 0,
      });
    } finally {
      clearInterval(watchdog);
      clearTimeout(timer);
    }
    expect(Atomics.load(inUse, 1)).toBe(2);
    expect(Atomics.load(inUse, 0)).toBe(0);
    expect(samples).toBeGreaterThan(0);
    expect(worst.samples < 50 || worst.ms < 100, JSON.stringify(worst)).toBe(true);
  });
});

// ---- 6. Dead threads ---------------------------------------------------------------------

describe('a waiter whose thread was terminated', () => {
  it('is skipped within a bounded time: the waiter behind it, in another thread, is granted and the permit count stays right', async () => {
    // Two waiter records only: the dead thread's record must come back to the pool.
    const limiter = track(new Concurrency({ limit: 1, queueLimit: 4, maxWaiters: 2 }));
    // Two groups: terminating a worker of a group ends that whole group.
    const doomed = await Agents.start(1, limiter);
    const survivor = await Agents.start(1, limiter);
    expect(limiter.tryAcquire('k')).toBe(true);
    await doomed.acquire(0, { key: 'k' }); // the head
    const b = await survivor.acquire(0, { key: 'k' });
    await doomed.workers[0]!.terminate();
    const start = performance.now();
    limiter.release('k'); // wakes the head, which is gone
    const served = await survivor.settled(b);
    const elapsed = performance.now() - start;
    expect(served).toMatchObject({ outcome: 'granted' });
    // DEAD_AFTER_MS (2 s) + two heartbeats (250 ms each) + slack.
    expect(elapsed).toBeLessThan(5000);
    expect(limiter.stats('k')).toMatchObject({ available: 1, queued: 0, admitted: 2 });
    // Both records are free again: two waiters (a worker's and the main thread's) queue.
    expect(limiter.tryAcquire('k')).toBe(true);
    const b2 = await survivor.acquire(0, { key: 'k' });
    const mine = pending(limiter.acquire('k'));
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 2 });
    limiter.release('k');
    expect(await survivor.settled(b2)).toMatchObject({ outcome: 'granted' });
    const lease = await mine;
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 0 });
    lease.release();
    expect([limiter.tryAcquire('k'), limiter.tryAcquire('k')]).toEqual([true, false]);
  });
});

// ---- 7. close() --------------------------------------------------------------------------

describe.each([
  {
    name: 'Concurrency',
    make: () => new Concurrency({ limit: 1, queueLimit: 8 }),
  },
  {
    name: 'TokenBucket on a ManualClock',
    make: () =>
      new TokenBucket({
        capacity: 1,
        refillPerSecond: 1,
        queueLimit: 8,
        clock: new ManualClock(),
      }),
  },
])('close() on a $name with waiters in 3 threads', ({ make }) => {
  it('rejects every waiter of every key on every thread with ERR_LIMITER_CLOSED, and later calls in workers throw LimiterClosedError', async () => {
    const limiter = track(make());
    const agents = await Agents.start(3, limiter);
    expect(limiter.tryAcquire('k')).toBe(true);
    expect(limiter.tryAcquire()).toBe(true);
    const ids = [
      await agents.acquire(0, { key: 'k' }),
      await agents.acquire(1, { key: 'k' }),
      await agents.acquire(2, { key: 'k' }),
      await agents.acquire(0), // the default key
      await agents.acquire(2),
    ];
    const mine = pending(limiter.acquire('k'));
    expect(limiter.stats('k').queued).toBe(4);
    expect(limiter.stats().queued).toBe(2);
    limiter.close();
    await expect(mine).rejects.toBeInstanceOf(LimiterClosedError);
    for (const id of ids) {
      const settled = await agents.settled(id);
      expect(settled).toMatchObject({ outcome: 'closed' });
      expect(settled.error).toMatchObject({
        name: 'LimiterClosedError',
        code: 'ERR_LIMITER_CLOSED',
        isClosedError: true,
      });
    }
    const closedError = { code: 'ERR_LIMITER_CLOSED', isClosedError: true };
    for (let w = 0; w < 3; w++) {
      expect(await agents.call(w, 'closed')).toEqual({ value: true });
      expect((await agents.call(w, 'tryAcquire', 'k')).error).toMatchObject(closedError);
      expect((await agents.call(w, 'consume', 'fresh-key')).error).toMatchObject(closedError);
      expect((await agents.acquireOutcome(w, 'k')).error).toMatchObject(closedError);
    }
    await expect(limiter.acquire('k')).rejects.toBeInstanceOf(LimiterClosedError);
  });
});

describe('close() racing a grant in another thread', () => {
  it('settles the waiter exactly once, granted or closed, throws nothing in its thread and leaks no permit (thousands of rounds)', async () => {
    // The window is a fraction of a microsecond: rounds for 3 s (at most 6000), stopping
    // at the first problem.
    const maxRounds = 6000;
    const budgetMs = 3000;
    const started = performance.now();
    const group = startWorkers('queue:close-race', 1);
    running.push(group);
    const outcomes = new Map<number, string>();
    const unhandled: string[] = [];
    let wake = () => {};
    group.workers[0]!.on(
      'message',
      (m: { type: string; round: number; outcome: string; error: string }) => {
        if (m.type === 'unhandled') unhandled.push(m.error);
        else outcomes.set(m.round, m.outcome);
        wake();
      },
    );
    const outcomeOf = async (round: number) => {
      const deadline = performance.now() + 1000;
      while (!outcomes.has(round) && unhandled.length === 0 && performance.now() < deadline) {
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, 50);
        });
      }
      return outcomes.get(round) ?? 'never settled';
    };
    const problems: string[] = [];
    const tally = new Map<string, number>();
    const random = seededRandom(6000);
    let round = 0;
    for (; round < maxRounds && problems.length === 0; round++) {
      if (performance.now() - started > budgetMs) break;
      // A limiter per round: close() is for good.
      const limiter = new Concurrency({ limit: 1, queueLimit: 1, keys: 1, maxWaiters: 1 });
      expect(limiter.tryAcquire('k')).toBe(true);
      const queued = new Int32Array(new SharedArrayBuffer(4));
      group.workers[0]!.postMessage({ round, handle: limiter.handle, control: queued.buffer });
      await reach(queued, 0, 1, `the waiter of round ${round}`);
      // The worker wakes about 20 µs after the release: close() lands before, during or
      // after its grant.
      limiter.release('k');
      spin(random() * 40);
      limiter.close();
      const outcome = await outcomeOf(round);
      tally.set(outcome, (tally.get(outcome) ?? 0) + 1);
      const stats = limiter.stats('k');
      // Granted: the worker holds the permit. Closed: whatever it took was given back.
      const available = outcome === 'granted' ? 0 : 1;
      if (outcome !== 'granted' && outcome !== 'closed') {
        problems.push(`round ${round}: ${outcome}`);
      } else if (stats.available !== available || stats.queued !== 0) {
        problems.push(`round ${round}: ${outcome} with ${JSON.stringify(stats)}`);
      }
    }
    expect(unhandled).toEqual([]);
    expect(problems).toEqual([]);
    expect(round).toBeGreaterThan(100);
    expect([...tally.keys()].sort()).toEqual(['closed', 'granted']);
  });
});

// ---- 8. ManualClock wakes waiters in workers ---------------------------------------------

interface ClockCase {
  name: string;
  make: (clock: ManualClock) => AnyLimiter;
  /** Permits a fresh key grants at once. */
  burst: number;
  /** [ms to advance, waiters granted by that advance]. */
  steps: [number, number][];
}

const clockCases: ClockCase[] = [
  {
    name: 'TokenBucket',
    // One token every 500 ms.
    make: (clock) => new TokenBucket({ capacity: 2, refillPerSecond: 2, queueLimit: 6, clock }),
    burst: 2,
    steps: [
      [500, 1],
      [500, 1],
      [1000, 2],
    ],
  },
  {
    name: 'FixedWindow',
    make: (clock) => new FixedWindow({ limit: 2, windowMs: 1000, queueLimit: 6, clock }),
    burst: 2,
    steps: [
      [999, 0],
      [1, 2], // the next window
      [1000, 2],
    ],
  },
  {
    name: 'SlidingWindow',
    // At 1000 the whole previous window (2) still weighs 2; at 1500 it weighs 1, leaving
    // room for one; at 2000 the window before counts 1 and the current one is empty again.
    make: (clock) => new SlidingWindow({ limit: 2, windowMs: 1000, queueLimit: 6, clock }),
    burst: 2,
    steps: [
      [1000, 0],
      [500, 1],
      [500, 1],
      [500, 0],
      [500, 1],
    ],
  },
  {
    name: 'SlidingLog',
    // The burst at 0 leaves the trailing window at 1000; the grants at 1000 leave at 2000.
    make: (clock) => new SlidingLog({ limit: 2, windowMs: 1000, queueLimit: 6, clock }),
    burst: 2,
    steps: [
      [999, 0],
      [1, 2],
      [500, 0],
      [500, 2],
    ],
  },
  {
    name: 'LeakyBucket',
    // One leaves every 500 ms, never two at once; the bucket holds the 6 waiters.
    make: (clock) => new LeakyBucket({ capacity: 6, ratePerSecond: 2, clock }),
    burst: 1,
    steps: [
      [250, 0],
      [250, 1],
      [500, 1],
      [500, 1],
      [500, 1],
    ],
  },
];

describe.each(clockCases)('$name on a ManualClock shared with 3 threads', (c) => {
  it('grants waiters in the workers exactly as many permits as each advance() in the main thread frees, in queue order', async () => {
    const clock = new ManualClock();
    const limiter = track(c.make(clock));
    const agents = await Agents.start(3, limiter);
    let burst = 0;
    while (burst <= c.burst && limiter.tryAcquire('k')) burst++;
    expect(burst).toBe(c.burst);
    const order = [0, 2, 1, 1, 0, 2];
    const ids: number[] = [];
    for (const worker of order) ids.push(await agents.acquire(worker, { key: 'k' }));
    expect(limiter.stats('k')).toMatchObject({ available: 0, queued: 6 });
    let total = 0;
    for (const [ms, grants] of c.steps) {
      expect(agents.log()).toHaveLength(total);
      clock.advance(ms);
      total += grants;
      if (grants > 0) {
        // The first `total` waiters, none later. Two granted by one advance() may log in
        // either order: the second is granted while the first's thread is still logging.
        const log = await agents.waitLog(total);
        expect(log.map((e) => e.outcome)).toEqual(new Array(total).fill('granted'));
        expect(log.map((e) => e.id).sort((x, y) => x - y)).toEqual(ids.slice(0, total));
        if (grants === 1) expect(log.at(-1)!.id).toBe(ids[total - 1]);
      }
      expect(limiter.stats('k')).toMatchObject({
        available: 0,
        queued: ids.length - total,
        admitted: c.burst + total,
      });
    }
    expect(agents.log()).toHaveLength(total);
    // The waiters still queued are rejected by close(), none granted.
    limiter.close();
    const rest = (await agents.waitLog(ids.length)).slice(total);
    // Woken together: they may settle in any order.
    expect(rest.sort((x, y) => x.id - y.id)).toEqual(
      ids.slice(total).map((id) => ({ id, outcome: 'closed' })),
    );
  });
});
