import { describe, expect, it } from 'vitest';
import {
  type AnyLimiter,
  attach,
  Concurrency,
  FixedWindow,
  LeakyBucket,
  ManualClock,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import { startWorkers } from '../helpers/threads.js';

// A key's slot can go to another key while a thread still holds its index (it was idle and
// reclaimed): no lookup, waiter or decision may then act on the key that took it over.

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
    override effectiveQueueLimit(): number {
      const f = this.between;
      this.between = undefined;
      f?.();
      return this.queueLimit;
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
