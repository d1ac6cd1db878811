import { describe, expect, it, vi } from 'vitest';
import { enter, run, TRY } from '../../src/decision.js';
import {
  type AnyLimiter,
  attach,
  Concurrency,
  chain,
  FixedWindow,
  LeakyBucket,
  type LimiterHandle,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import { S_STATE } from '../../src/layout.js';
import { scenarioWorker, startWorkers } from '../helpers/threads.js';

// Regression tests for engine faults at the edges; each failed on the code before its fix.

describe('SlidingLog refunds', () => {
  it('a permit taken after a refund carries its own time, not the refunded one', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 2, windowMs: 1000, clock });
    expect(log.tryAcquire('k')).toBe(true); // at 0
    log.refund('k');
    clock.set(900);
    expect(log.tryAcquire('k')).toBe(true);
    expect(log.tryAcquire('k')).toBe(true);
    clock.set(1000);
    // Both permits of the window [900, 1900) are in use: a third is over the limit.
    expect(log.tryAcquire('k')).toBe(false);
    expect(log.consume('k').retryAfterMs).toBe(900);
  });

  it('chain() rollbacks never let the log admit more than its limit in a window', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 100, windowMs: 1000, clock });
    const held = new Concurrency({ limit: 1 });
    held.tryAcquire('k');
    const both = chain(log, held);
    for (let i = 0; i < 100; i++) expect(both.tryAcquire('k')).toBe(false);
    clock.set(900);
    let admitted = 0;
    for (let i = 0; i < 200; i++) if (log.tryAcquire('k')) admitted++;
    expect(admitted).toBe(100);
    clock.set(1000);
    for (let i = 0; i < 200; i++) if (log.tryAcquire('k')) admitted++;
    expect(admitted).toBe(100);
    clock.set(1900);
    for (let i = 0; i < 200; i++) if (log.tryAcquire('k')) admitted++;
    expect(admitted).toBe(200);
  });
});

describe('SlidingLog entries a dead thread left unwritten', () => {
  // What a thread terminated at the worst instruction leaves behind, made by hand: the
  // engine's own steps, run up to the point where the thread stopped.
  // biome-ignore lint/suspicious/noExplicitAny: the test reaches the engine's internals
  const internals = (log: SlidingLog): any => log;
  const taken = (log: SlidingLog, key: string, attempts: number) => {
    let n = 0;
    for (let i = 0; i < attempts; i++) if (log.tryAcquire(key)) n++;
    return n;
  };
  /** A grant's CAS, without the entry write that follows it (admitted()). */
  const grantWithoutWrite = (log: SlidingLog, key: string, nowUs: number) => {
    const core = internals(log).core;
    const ref = enter(core, log, key, 1, nowUs);
    expect(run(core, log, internals(log).step, ref, 1, key, TRY)).toBe(true);
    return { before: core.priorState, after: core.lastState };
  };
  /** A give-back's first attempt (it marks its entries), without the CAS that follows. */
  const giveBackWithoutCas = (log: SlidingLog, key: string, permits: number, nowUs: number) => {
    const w = internals(log).table.find(key) >>> 4;
    const i32: Int32Array = internals(log).i32;
    internals(log).core.lastWord = w;
    const state = Atomics.load(i32, w + S_STATE);
    const stamp = internals(log).stampOf(w, nowUs);
    expect(internals(log).giveBack(state, stamp, nowUs, permits, nowUs)).not.toBe(state);
    return { w, state: () => Atomics.load(i32, w + S_STATE), before: state };
  };

  it('an admission that died between its CAS and its entry write counts for one window at most', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(taken(log, 'k', 2)).toBe(2);
    // The head moves; admitted(), which writes the entry's time, never runs.
    grantWithoutWrite(log, 'k', clock.nowUs());
    // Until the entry could have expired it counts: exactly 2 more fit now.
    expect(taken(log, 'k', 5)).toBe(2);
    // The key then idles. Its entries, the unwritten one too, have all expired.
    clock.advance(10_000);
    expect(taken(log, 'k', 10)).toBe(5);
  });

  it('a refund that died between marking its entries and its CAS takes nothing away once idle', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(taken(log, 'k', 3)).toBe(3);
    // giveBack() marks the two newest entries unwritten, then the thread stops: no CAS.
    const refund = giveBackWithoutCas(log, 'k', 2, clock.nowUs());
    expect(refund.state()).toBe(refund.before);
    expect(taken(log, 'k', 5)).toBe(2);
    clock.advance(10_000);
    expect(taken(log, 'k', 10)).toBe(5);
  });

  it('a refund whose CAS lost to a grant leaves the permits it did not give back their own times', () => {
    const clock = new ManualClock();
    const log = new SlidingLog({ limit: 5, windowMs: 1000, clock });
    expect(taken(log, 'k', 3)).toBe(3); // at 0
    clock.set(500);
    const now = clock.nowUs();
    // A refund's first attempt marks the newest entry (taken at 0)...
    const refund = giveBackWithoutCas(log, 'k', 1, now);
    // ...and its CAS loses to a grant on another thread, at 500.
    const { before, after } = grantWithoutWrite(log, 'k', now);
    // The refund tries again and gives back the newest permit, the one taken at 500.
    log.refund('k');
    internals(log).admitted(refund.w, before, now, 1); // the grant's writer, lagging
    expect(refund.state()).toBe(before);
    expect(after).not.toBe(before);
    // The three permits taken at 0 expire at 1000: all 5 are free then, not 4.
    clock.set(1000);
    expect(taken(log, 'k', 10)).toBe(5);
  });
});

describe('window refunds land in the window the permits came from', () => {
  it('FixedWindow drops a rollback that reaches the next window', () => {
    const clock = new ManualClock(999);
    const perSecond = new FixedWindow({ limit: 20, windowMs: 1000, clock });
    // A second limiter that refuses only after the clock crossed the boundary.
    const closing = new FixedWindow({ limit: 20, windowMs: 1_000_000, clock });
    closing.tryAcquire('k', 20);
    const both = chain(perSecond, {
      limit: 20,
      consume: (key, permits) => {
        clock.set(1000); // the boundary passes between the take and the rollback
        return closing.consume(key, permits);
      },
      refund: (key, permits) => closing.refund(key, permits),
    });
    expect(both.tryAcquire('k', 5)).toBe(false);
    // Window [1000, 2000) was never charged; it must not start with a credit either.
    let admitted = 0;
    for (let i = 0; i < 40; i++) if (perSecond.tryAcquire('k')) admitted++;
    expect(admitted).toBe(20);
  });

  it('SlidingWindow credits the previous window when the permits were taken there', () => {
    const clock = new ManualClock(999);
    const sw = new SlidingWindow({ limit: 10, windowMs: 1000, clock });
    expect(sw.tryAcquire('k', 6)).toBe(true); // window 0 holds 6
    const both = chain(sw, {
      limit: 10,
      consume: () => {
        clock.set(1500); // half of window 1 passes before this member answers…
        expect(sw.tryAcquire('k', 3)).toBe(true); // …and someone takes 3 in it
        return { allowed: false, remaining: 0, limit: 10, retryAfterMs: 1, resetAfterMs: 1 };
      },
      refund: () => {},
    });
    expect(both.tryAcquire('k', 4)).toBe(false); // took 4 in window 0, then rolled back
    // Window 0 is back to 6 (weighing 6 × 0.5 = 3 at 1500) and window 1 keeps its 3:
    // 10 − 3 − 3 = 4 more. Crediting window 1 instead would let 5 through.
    let admitted = 0;
    for (let i = 0; i < 20; i++) if (sw.tryAcquire('k')) admitted++;
    expect(admitted).toBe(4);
  });

  it('a nested chain rolled back after the boundary gives nothing to the next window', async () => {
    for (const depth of [1, 2]) {
      const clock = new ManualClock(999);
      const perSecond = new FixedWindow({ limit: 20, windowMs: 1000, clock });
      const closing = new FixedWindow({ limit: 20, windowMs: 1_000_000, clock });
      closing.tryAcquire('k', 20);
      // An asynchronous member (a Redis limiter, say) that refuses after the boundary.
      const late = {
        limit: 20,
        consume: async (key?: string | number, permits?: number) => {
          clock.set(1000);
          // The new window fills up before this member refuses.
          expect(perSecond.tryAcquire('k', 20)).toBe(true);
          return closing.consume(key, permits);
        },
        refund: (key?: string | number, permits?: number) => closing.refund(key, permits),
      };
      const inner = depth === 1 ? chain(perSecond) : chain(chain(perSecond));
      expect(await chain(inner, late).tryAcquire('k', 5)).toBe(false);
      // Window [1000, 2000) is full; the rollback of window 0's 5 must not open it.
      let admitted = 0;
      for (let i = 0; i < 40; i++) if (perSecond.tryAcquire('k')) admitted++;
      expect([depth, admitted]).toEqual([depth, 0]);
    }
  });

  it('chain().acquire() gives its members one deadline: each waits only for what is left', async () => {
    let now = 1000;
    const spy = vi.spyOn(performance, 'now').mockImplementation(() => now);
    try {
      const asked: (number | undefined)[] = [];
      const member = (tookMs: number) => ({
        limit: 5,
        consume: () => ({
          allowed: true,
          remaining: 4,
          limit: 5,
          retryAfterMs: 0,
          resetAfterMs: 0,
        }),
        refund: () => {},
        acquire: async (_key?: string | number, _permits?: number, o?: { timeoutMs?: number }) => {
          asked.push(o?.timeoutMs);
          now += tookMs; // this member's wait
          return { release() {}, [Symbol.dispose]() {} };
        },
      });
      await chain(member(120), member(100), member(0)).acquire('k', 1, { timeoutMs: 300 });
      expect(asked).toEqual([300, 180, 80]);
      asked.length = 0;
      await chain(member(10)).acquire('k');
      expect(asked).toEqual([undefined]);
      await expect(chain(member(0)).acquire('k', 1, { timeoutMs: -1 })).rejects.toThrow(
        /chain\.acquire: option "timeoutMs" must be from 0/,
      );
    } finally {
      spy.mockRestore();
    }
  });

  it('a refund in the window the permits were taken in still gives them back', () => {
    const clock = new ManualClock();
    const fw = new FixedWindow({ limit: 3, windowMs: 1000, clock });
    expect(fw.tryAcquire('k', 3)).toBe(true);
    fw.refund('k', 2);
    expect(fw.stats('k').available).toBe(2);
  });
});

describe('chain().acquire() that fails gives each member its permits back once', () => {
  it('a Concurrency member, directly or in a nested chain, frees only what the chain took', async () => {
    for (const nested of [false, true]) {
      const clock = new ManualClock();
      const conc = new Concurrency({ limit: 5, clock });
      const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
      // queueLimit 0: an acquire() the window cannot serve at once fails with QueueFullError.
      const window = new FixedWindow({ limit: 2, windowMs: 1000, clock });
      expect(conc.tryAcquire('k', 3)).toBe(true); // another caller holds 3
      expect(window.tryAcquire('k', 2)).toBe(true); // the window is spent
      const both = nested ? chain(chain(conc, bucket), window) : chain(conc, bucket, window);
      await expect(both.acquire('k', 2)).rejects.toThrow(/queue/i);
      expect(conc.stats('k').available).toBe(2); // the other caller still holds its 3
      expect(conc.tryAcquire('k', 3)).toBe(false);
      expect(bucket.stats('k').available).toBe(10); // the bucket's 2 came back
    }
  });
});

describe('a refused chain reports its earlier members as after their give-back', () => {
  it('remaining counts the permits given back, in nested chains too', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 10, refillPerSecond: 1, clock });
    const log = new SlidingLog({ limit: 20, windowMs: 1000, clock });
    const window = new FixedWindow({ limit: 3, windowMs: 1000, clock });
    expect(window.tryAcquire('k', 3)).toBe(true);
    const d = chain(chain(bucket, log), window).consume('k', 2);
    expect(d.allowed).toBe(false);
    const [inner] = d.decisions as unknown as [
      { remaining: number; decisions: { remaining: number }[] },
    ];
    expect(inner.remaining).toBe(10);
    expect(inner.decisions.map((x) => x.remaining)).toEqual([10, 20]);
    expect([bucket.stats('k').available, log.stats('k').available]).toEqual([10, 20]);
  });
});

describe('acquire() granted with no slot (whenFull: allow) holds nothing', () => {
  it('its lease gives nothing back, alone or in a chain', async () => {
    for (const inChain of [false, true]) {
      const limiter = new Concurrency({ limit: 1, keys: 16, maxKeys: 16, whenFull: 'allow' });
      const others: string[] = [];
      for (let i = 0; limiter.consume('x').reason !== 'table-full'; i++) {
        limiter.release('x');
        if (i > 10_000) throw new Error('the table never filled');
        const d = limiter.consume(`other${i}`);
        if (d.allowed && d.reason === undefined) others.push(`other${i}`);
      }
      const acquirer = inChain ? chain(limiter) : limiter;
      const slotless = await acquirer.acquire('x'); // let through: no slot, nothing taken
      for (const other of others) limiter.release(other);
      expect(limiter.tryAcquire('x')).toBe(true); // the key's only permit
      slotless.release();
      expect(limiter.tryAcquire('x')).toBe(false); // still held
      expect(limiter.stats('x').available).toBe(0);
    }
  });
});

describe('cached lookups never reach another key', () => {
  it('stats, reset and refund of a key whose slot was reused 16+ times act on nobody else', () => {
    const clock = new ManualClock();
    const mine = new FixedWindow({ limit: 5, windowMs: 1000, keys: 1, maxKeys: 1, clock });
    const other = attach<FixedWindow>(mine.handle); // another cache, as another thread has
    expect(mine.tryAcquire('K', 3)).toBe(true); // cached here: K → its slot and generation
    for (let n = 0; n < 1500; n++) {
      clock.advance(1000); // every key idle: slots get reclaimed for new keys
      const x = `x${n}`;
      expect(other.tryAcquire(x)).toBe(true);
      // K's own counters while its slot lasts, fresh once it was reclaimed: never x's.
      expect([3, 0]).toContain(mine.stats('K').admitted);
      mine.reset('K');
      mine.refund('K');
      expect(other.stats(x)).toMatchObject({ admitted: 1, available: 4 });
    }
  });
});

describe('a waiter never queues on a slot that went to another key', () => {
  // The race is narrow: between acquire()'s refused attempt and its enqueue. A subclass
  // runs another "thread"'s work exactly there (the hook acquire() calls in between).
  class Interleaved extends Concurrency {
    between: (() => void) | undefined;
    protected override effectiveQueueLimit(): number {
      const f = this.between;
      this.between = undefined;
      f?.();
      return super.effectiveQueueLimit();
    }
  }

  it('the slot is reclaimed between the refusal and the enqueue: the waiter follows its key', async () => {
    // keys: 1 → 32 slots, and every key may use any of them.
    const c = new Interleaved({ limit: 1, keys: 1, maxKeys: 1, queueLimit: 4 });
    const other = attach<Concurrency>(c.handle);
    expect(c.tryAcquire('hot')).toBe(true);
    c.between = () => {
      c.release('hot'); // 'hot' is idle now…
      // …so the 32nd of these held keys takes its slot (the only one not empty or held);
      for (let i = 0; i < 32; i++) expect(other.tryAcquire(`y${i}`)).toBe(true);
      // and 'hot' comes back in the slot y0 frees, held again.
      other.release('y0');
      expect(other.tryAcquire('hot')).toBe(true);
    };
    const waiting = c.acquire('hot', 1, { timeoutMs: 2000 });
    expect(c.stats('hot')).toMatchObject({ available: 0, queued: 1 });
    // The release wakes the queue of 'hot''s slot: the waiter must be in it (a waiter on
    // the old slot, y31's now, would never be woken, and would time out).
    other.release('hot');
    const lease = await waiting;
    expect(c.stats('hot')).toMatchObject({ available: 0, queued: 0 });
    lease.release();
    expect(c.stats('hot').available).toBe(1);
    // y31, in the old slot, is not blocked by a stray waiter.
    other.release('y31');
    expect(other.tryAcquire('y31')).toBe(true);
  });

  it('stress: two waiter threads and two key-churning threads, every acquire served', async () => {
    const limiter = new Concurrency({ limit: 1, keys: 2, maxKeys: 2, queueLimit: 8 });
    const stop = new SharedArrayBuffer(4);
    const group = startWorkers<{ granted?: number; timeouts?: number; inserted?: number }>(
      'holders:slot-move-waiter',
      4,
      { limiter: limiter.handle, rounds: 1500, waiters: 2, stop },
    );
    // workerData.index 0, 1 wait; 2, 3 churn. The role comes from the index.
    const results = await group.results;
    const waiters = results.slice(0, 2);
    for (const r of waiters) {
      expect(r.timeouts).toBe(0);
      expect(r.granted).toBe(1500);
    }
    expect(limiter.stats('hot')).toMatchObject({ available: 1, queued: 0 });
  });
});

describe('a decision never lands on a slot that went to another key meanwhile', () => {
  // A thread descheduled between its slot check and its CAS (CI caught it: a churning
  // thread's grant landed on another key, and its release then found nothing held). The
  // hook runs another "thread"'s work exactly there, once: inside the step (or give-back)
  // that the decision calls between the two.
  function stallOnce(limiter: AnyLimiter, method: string, work: () => void): void {
    const target = limiter as unknown as Record<string, (...args: unknown[]) => number>;
    const original = target[method]!;
    let armed = true;
    target[method] = function (this: unknown, ...args: unknown[]) {
      if (armed) {
        armed = false;
        work();
      }
      return original.apply(this, args);
    };
  }

  // keys: 1 → 32 slots, any key may use any of them. Each call takes the whole limit.
  const clock = new ManualClock();
  const small = { keys: 1, maxKeys: 1, clock };
  const kinds: [string, () => AnyLimiter][] = [
    ['Concurrency', () => new Concurrency({ limit: 1, ...small })],
    ['Concurrency (wide)', () => new Concurrency({ limit: 2 ** 30, ...small })],
    ['TokenBucket', () => new TokenBucket({ capacity: 1, refillPerSecond: 1, ...small })],
    [
      'TokenBucket (wide)',
      () => new TokenBucket({ capacity: 2 ** 25, refillPerSecond: 1, ...small }),
    ],
    ['LeakyBucket', () => new LeakyBucket({ capacity: 1, ratePerSecond: 1, ...small })],
    ['FixedWindow', () => new FixedWindow({ limit: 1, windowMs: 1000, ...small })],
    ['SlidingWindow', () => new SlidingWindow({ limit: 1, windowMs: 1000, ...small })],
    [
      'SlidingWindow (segments)',
      () => new SlidingWindow({ limit: 1, windowMs: 1000, segments: 4, ...small }),
    ],
    ['SlidingLog', () => new SlidingLog({ limit: 1, windowMs: 1000, ...small })],
  ];

  it.each(kinds)(
    '%s: the slot is reassigned 16 times round to its generation before the CAS',
    (name, make) => {
      const mine = make();
      const other = attach(mine.handle);
      const limit = mine.limit;
      // 31 slots held (not idle, never reassigned); 'K' takes the last one, fresh.
      for (let i = 0; i < 31; i++) expect(other.tryAcquire(`held${i}`, limit)).toBe(true);
      const wide = (mine as unknown as { core: { wide: boolean } }).core.wide;
      expect(wide).toBe(name.endsWith('(wide)'));
      stallOnce(mine, wide ? 'stepWide' : 'step', () => {
        // Meanwhile 'K''s fresh slot goes to x0, x1, … x15, each reset to fresh: the slot is
        // x15's now, in the generation 'K' read, and its state word is the one 'K' read.
        for (let i = 0; i < 16; i++) {
          expect(other.tryAcquire(`x${i}`)).toBe(true);
          other.reset(`x${i}`);
        }
      });
      expect(mine.tryAcquire('K', limit)).toBe(true);
      // The permits are 'K''s (it took x15's idle slot), and x15 was charged nothing.
      expect(other.stats('K').available).toBe(0);
      expect(other.stats('x15').available).toBe(limit);
      expect(mine.tableStats().reclaims).toBe(17);
    },
  );

  it('x15 decides between the stray grant and its undoing: the permit is given back all the same', () => {
    const mine = new Concurrency({ limit: 2, ...small });
    const other = attach<Concurrency>(mine.handle);
    for (let i = 0; i < 31; i++) expect(other.tryAcquire(`held${i}`, 2)).toBe(true);
    stallOnce(mine, 'step', () => {
      for (let i = 0; i < 16; i++) {
        expect(other.tryAcquire(`x${i}`)).toBe(true);
        other.reset(`x${i}`);
      }
    });
    // Right after the stray CAS (it took 1 of x15's 2), before it is undone: x15 takes 1.
    const table = (mine as unknown as { table: AnyLimiter }).table;
    stallOnce(table, 'holds', () => expect(other.tryAcquire('x15')).toBe(true));
    // 'K' is looked up again and finds every slot held now (x15's too): the table is full.
    expect(mine.tryAcquire('K')).toBe(false);
    expect(mine.tableStats().tableFull).toBe(1);
    // The stray permit went back by a give-back (the slot had changed): x15 holds its own.
    expect(other.stats('x15').available).toBe(1);
    other.release('x15');
    expect(other.stats('x15').available).toBe(2);
  });

  it('reset() of a key whose slot went round 16 generations after the lookup resets nobody', () => {
    const mine = new Concurrency({ limit: 1, ...small });
    const other = attach<Concurrency>(mine.handle);
    for (let i = 0; i < 31; i++) expect(other.tryAcquire(`held${i}`)).toBe(true);
    expect(mine.tryAcquire('K')).toBe(true);
    mine.release('K');
    const table = (mine as unknown as { table: AnyLimiter }).table;
    const find = (table as unknown as { find: (key: unknown) => number }).find;
    let armed = true;
    (table as unknown as { find: (key: unknown) => number }).find = function (key) {
      const ref = find.call(this, key);
      if (armed && key === 'K') {
        armed = false;
        // After reset() found 'K': its idle slot goes to x0 … x15, x15 holding a permit.
        for (let i = 0; i < 16; i++) {
          expect(other.tryAcquire(`x${i}`)).toBe(true);
          if (i < 15) other.release(`x${i}`);
        }
      }
      return ref;
    };
    mine.reset('K');
    expect(other.stats('x15')).toMatchObject({ available: 0, admitted: 1 });
    other.release('x15');
    expect(other.stats('x15').available).toBe(1);
  });

  it('a wide grant taken back restores the ext word it read, not the one it wrote', () => {
    // A limit of 2^30: taking all of it moves the slot's ext word from 0 to 2^30 / 2^27 = 8.
    const mine = new Concurrency({ limit: 2 ** 30, ...small });
    const other = attach<Concurrency>(mine.handle);
    for (let i = 0; i < 31; i++) expect(other.tryAcquire(`held${i}`)).toBe(true);
    expect(mine.tryAcquire('K')).toBe(true);
    mine.release('K'); // 'K' holds 0 (not fresh, idle) and stays in this thread's cache
    stallOnce(mine, 'stepWide', () => {
      // Its slot goes to x0 … x15, each holding 0 after: x15's words are the ones 'K' read.
      for (let i = 0; i < 16; i++) {
        expect(other.tryAcquire(`x${i}`)).toBe(true);
        other.release(`x${i}`);
      }
    });
    // The stray grant is undone and 'K' looked up again: x15 holds 0, so its slot is idle
    // and goes to 'K'. Restored with the ext word of the grant, x15 would hold 2^30 and
    // the table would be full.
    expect(mine.tryAcquire('K', 2 ** 30)).toBe(true);
    expect(mine.tableStats()).toMatchObject({ tableFull: 0, reclaims: 17 });
    expect(other.stats('K').available).toBe(0);
  });

  it('a Concurrency refund meets its slot reassigned round to the same state: x15 keeps its permit', () => {
    const mine = new Concurrency({ limit: 1, ...small });
    const other = attach<Concurrency>(mine.handle);
    for (let i = 0; i < 31; i++) expect(other.tryAcquire(`held${i}`)).toBe(true);
    expect(mine.tryAcquire('K')).toBe(true);
    stallOnce(mine, 'giveBack', () => {
      other.release('K'); // 'K' is idle now: its slot goes to x0 … x15
      for (let i = 0; i < 16; i++) {
        expect(other.tryAcquire(`x${i}`)).toBe(true);
        if (i < 15) other.release(`x${i}`);
      }
    });
    mine.refund('K'); // read 'K' holding 1; x15 holds 1 in that generation now
    expect(other.stats('x15').available).toBe(0);
    other.release('x15');
    expect(other.stats('x15').available).toBe(1);
  });
});

describe('misuse is refused clearly', () => {
  it('chain() names an argument that is not a limiter', () => {
    const a = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    // @ts-expect-error: 5 is not a limiter
    expect(() => chain(a, 5)).toThrow(/argument 1 must be a limiter.*got 5/);
    // @ts-expect-error: nor is an array
    expect(() => chain([a])).toThrow(TypeError);
  });

  it('option and argument errors carry Node-style codes', () => {
    const errorOf = (f: () => unknown) => {
      try {
        f();
      } catch (error) {
        return error as { code?: string; name?: string };
      }
      throw new Error('no error');
    };
    // @ts-expect-error: capacity must be a number
    const t = errorOf(() => new TokenBucket({ capacity: '5', refillPerSecond: 1 }));
    expect(t).toMatchObject({ name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
    const r = errorOf(() => new TokenBucket({ capacity: 0, refillPerSecond: 1 }));
    expect(r).toMatchObject({ name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    expect(errorOf(() => limiter.tryAcquire('k', 6))).toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
    // @ts-expect-error: a key is a string or a number
    expect(errorOf(() => limiter.tryAcquire({}))).toMatchObject({ code: 'ERR_INVALID_ARG_TYPE' });
  });

  it('keys longer than 4096 bytes of UTF-8 are a RangeError; 4096 bytes are fine', () => {
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    expect(limiter.tryAcquire('a'.repeat(4096))).toBe(true);
    expect(limiter.tryAcquire('é'.repeat(2048))).toBe(true); // 4096 bytes
    expect(() => limiter.tryAcquire('a'.repeat(4097))).toThrow(/at most 4096 bytes/);
    expect(() => limiter.tryAcquire('é'.repeat(2049))).toThrow(RangeError);
    expect(() => limiter.consume('x'.repeat(100_000_000))).toThrow(RangeError);
  });

  it('stats() still reads after close(); the calls that take or give permits throw', () => {
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    limiter.tryAcquire('k', 2);
    limiter.close();
    expect(limiter.stats('k')).toMatchObject({ available: 3, admitted: 2 });
    expect(() => limiter.tryAcquire('k')).toThrow(/closed/);
    expect(() => limiter.refund('k')).toThrow(/closed/);
    expect(() => limiter.reset('k')).toThrow(/closed/);
  });
});

describe('acquire() when wake-ups are late', () => {
  /** Lets waitAsync callbacks and promise reactions run (no timers involved). */
  async function settle(): Promise<void> {
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
  }

  // A deterministic stand-in for late wake-ups: time moves in uneven steps of 2…25 ms, so
  // the head waiter always looks late, by up to a dozen intervals. A late waiter is granted
  // when it wakes, never as of its due time: one permit per step at most (the bucket's
  // burst of one), never the overdue dozen at once, and never more than the rate allows.
  it.each([
    [
      'LeakyBucket',
      (clock: ManualClock) => new LeakyBucket({ capacity: 2000, ratePerSecond: 500, clock }),
    ],
    [
      'TokenBucket of capacity 1',
      (clock: ManualClock) =>
        new TokenBucket({ capacity: 1, refillPerSecond: 500, queueLimit: 2000, clock }),
    ],
  ] as const)(
    '%s: grants one permit per late wake-up, never a burst of the overdue ones',
    async (_, make) => {
      const clock = new ManualClock();
      const limiter = make(clock);
      let granted = 0;
      const all = Array.from({ length: 1500 }, () =>
        limiter.acquire('k').then(() => {
          granted++;
        }),
      );
      let seed = 7;
      const random = () => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed / 2 ** 31;
      };
      await settle();
      expect(granted).toBe(1); // the bucket was drained: the first at once
      let steps = 0;
      while (clock.nowMs() < 2000) {
        clock.advance(2 + Math.floor(random() * 23));
        steps++;
        await settle();
        // One permit every 2 ms at most, and one per step: each step is at least 2 ms.
        expect(granted).toBe(1 + steps);
        expect(granted).toBeLessThanOrEqual(Math.floor(clock.nowMs() / 2) + 1);
      }
      // Then on time (the clock moved one interval at a time): one every 2 ms, exactly.
      const before = granted;
      for (let k = 0; k < 100; k++) {
        clock.advance(2);
        await settle();
      }
      expect(granted - before).toBe(100);
      for (let left = 1500 - granted; left > 0; left--) {
        clock.advance(2);
        await settle();
      }
      await Promise.all(all);
      expect(granted).toBe(1500);
    },
    60_000,
  );
});

// Concurrent: each test waits HOLDER_DEAD_MS of real time (heartbeats are real time).
describe.concurrent('a terminated worker thread gives back its Concurrency permits', () => {
  it('the dead thread’s permits come back within HOLDER_DEAD_MS; a live holder keeps its own', async ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 3, queueLimit: 3 });
    const start = (permits: number) => {
      const worker = scenarioWorker('holders:holder', {
        workerData: { limiter: limiter.handle, key: 'k', permits },
      });
      const held = new Promise((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      return { worker, held };
    };
    const dying = start(2);
    const living = start(1);
    await Promise.all([dying.held, living.held]);
    expect(limiter.stats('k').available).toBe(0);
    await dying.worker.terminate();
    // Nobody releases the dead thread's 2 permits: they come back once its heartbeat has
    // been silent for 10 s, to this waiter (the timeout only bounds a failure).
    const lease = await limiter.acquire('k', 2, { timeoutMs: 30_000 });
    expect(limiter.stats('k').available).toBe(0); // the living thread still holds its one
    const released = new Promise((resolve) => living.worker.once('message', resolve));
    living.worker.postMessage('release');
    expect(await released).toBe('released');
    expect(limiter.stats('k').available).toBe(1);
    lease.release();
    expect(limiter.stats('k').available).toBe(3);
    await living.worker.terminate();
  }, 60_000);

  it.for<[string, number]>([
    ['32-bit', 3],
    ['wide', 2 ** 31 - 1],
  ])(
    'so do permits it took while the limiter was its own, before its handle was read (%s)',
    { timeout: 60_000 },
    async ([, limit], { expect }) => {
      // Until then the thread keeps no holder records (no other thread could reap them);
      // reading the handle writes one per slot holding permits, read from the slots: the
      // default key's, a key partly released, and 40 keys in segments the table grew into.
      const many = Array.from({ length: 40 }, (_, i) => [`g${i}`, 1, 0] as const);
      const takes = [[null, 2, 0], ['k', 3, 1], ['none', 2, 2], ...many];
      const worker = scenarioWorker('holders:maker', {
        workerData: { options: { limit, keys: 8, maxKeys: 1024, queueLimit: limit }, takes },
      });
      const handle = await new Promise<LimiterHandle>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      const limiter = attach(handle) as Concurrency;
      const held = (key?: string) => limit - limiter.stats(key).available;
      expect([held(), held('k'), held('none'), held('g0'), held('g39')]).toEqual([2, 2, 0, 1, 1]);
      await worker.terminate();
      // Everything the dead thread held comes back: a lease of a whole limit, then every key
      // free (the 40 in grown segments too).
      const lease = await limiter.acquire('k', limit, { timeoutMs: 30_000 });
      expect(limiter.stats('k').available).toBe(0);
      lease.release();
      for (const key of [undefined, 'k', 'none', 'g0', 'g17', 'g39']) expect(held(key)).toBe(0);
      expect(many.every(([key]) => held(key) === 0)).toBe(true);
    },
  );
});

describe.concurrent('holder records never give a permit back twice (review 2)', () => {
  /** A worker holding `permits` of `key` (test/workers/holder.mjs). */
  const holder = async (limiter: Concurrency, key: string | undefined, permits = 1) => {
    const worker = scenarioWorker('holders:holder', {
      workerData: { limiter: limiter.handle, key, permits },
    });
    await new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    return worker;
  };

  it('reset() voids what a dead holder held: the dead-holder sweep gives none of it back', async ({
    expect,
  }) => {
    const limiter = new Concurrency({ limit: 1, queueLimit: 1 });
    const dying = [await holder(limiter, 'k'), await holder(limiter, undefined)];
    limiter.reset('k');
    limiter.reset();
    expect(limiter.tryAcquire('k')).toBe(true);
    expect(limiter.tryAcquire()).toBe(true);
    for (const worker of dying) await worker.terminate();
    // A holder started after those died and dead after them: once its permit is back, every
    // record of theirs has been swept too.
    await (await holder(limiter, 'last')).terminate();
    const lease = await limiter.acquire('last', 1, { timeoutMs: 30_000 });
    expect(limiter.stats('k').available).toBe(0);
    expect(limiter.stats().available).toBe(0);
    expect(limiter.tryAcquire('k') || limiter.tryAcquire()).toBe(false);
    lease.release();
  }, 60_000);

  it('a worker terminated at any point of its take/release loop: its permit never comes back twice', async ({
    expect,
  }) => {
    // Limit 2, the main thread holds one permit of each key, a worker takes and releases
    // the other until it is terminated. Its records are swept 10 s later. A permit it
    // released must not be given back again then (the key would show 2 available while the
    // main thread holds one); one it held is (1 available), or, when it died between a
    // grant's CAS and its record, lost (0: the documented edge).
    const limiter = new Concurrency({ limit: 2, keys: 256, queueLimit: 2 });
    const trials = 64;
    const keys = Array.from({ length: trials }, (_, t) => `k${t}`);
    for (const key of keys) expect(limiter.tryAcquire(key)).toBe(true);
    const run = async (t: number) => {
      const worker = scenarioWorker('holders:take-release-loop', {
        workerData: { limiter: limiter.handle, key: keys[t], mode: t % 2 ? 'lease' : 'try' },
      });
      await new Promise((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      await new Promise((resolve) => setTimeout(resolve, 2 + ((t * 7) % 23)));
      await worker.terminate();
    };
    for (let t = 0; t < trials; t += 4) await Promise.all([t, t + 1, t + 2, t + 3].map(run));
    await (await holder(limiter, 'last')).terminate();
    const lease = await limiter.acquire('last', 2, { timeoutMs: 30_000 });
    const available = keys.map((key) => limiter.stats(key).available);
    expect(available.filter((a) => a > 1)).toEqual([]);
    lease.release();
  }, 60_000);
});
