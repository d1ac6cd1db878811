import { existsSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { publishTime } from '../../src/coarse-clock.js';
import { CoarseClock, FixedWindow, MonotonicClock, TokenBucket } from '../../src/index.js';
import { DIST, runChild } from '../helpers/child.js';
import { runWorkers, scenarioWorker, startWorkers } from '../helpers/threads.js';

// Real ticker threads, real worker threads, real child processes. Nothing here asserts a
// duration: only orders (never ahead, never back), that time moved, and exact counts.

const precise = new MonotonicClock();
const open: CoarseClock[] = [];
afterEach(() => {
  for (const clock of open.splice(0)) clock.close();
});
function coarse(resolutionMs?: number): CoarseClock {
  const clock = new CoarseClock(resolutionMs === undefined ? {} : { resolutionMs });
  open.push(clock);
  return clock;
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

/** Resolves once the ticker has published (it starts in a thread of its own). */
async function untilTicking(clock: CoarseClock): Promise<void> {
  const start = precise.nowUs();
  while (!clock.ticking) {
    if (precise.nowUs() - start > 20e6) throw new Error('the ticker never started');
    await tick();
  }
}

/** Busy-reads `clock` (the event loop blocked) until `done` or 20 s; returns the reads. */
function spin(clock: CoarseClock, done: (reads: number[]) => boolean): number[] {
  const reads: number[] = [];
  const start = precise.nowUs();
  while (!done(reads) && precise.nowUs() - start < 20e6) {
    const t = clock.nowUs();
    if (reads.length === 0 || t !== reads[reads.length - 1]) reads.push(t);
  }
  return reads;
}

describe('CoarseClock', () => {
  it('never reads ahead of the monotonic clock, and never goes back', async () => {
    for (const resolutionMs of [0.1, 1]) {
      const clock = coarse(resolutionMs);
      let ahead = 0;
      let back = 0;
      let distinct = 0;
      let last = Number.NEGATIVE_INFINITY;
      // From the very first read: before the ticker starts, through its first publication.
      for (let i = 0; i < 2_000_000; i++) {
        const t = clock.nowUs();
        if (t > precise.nowUs()) ahead++;
        if (t < last) back++;
        if (t !== last) distinct++;
        last = t;
      }
      expect({ resolutionMs, ahead, back }).toEqual({ resolutionMs, ahead: 0, back: 0 });
      expect(distinct).toBeGreaterThan(2);
      await untilTicking(clock);
    }
  });

  it('never reads ahead in other threads either (each against its own precise clock)', async () => {
    const clock = coarse(0.1);
    await untilTicking(clock);
    const results = await runWorkers<{ ahead: number; back: number; distinct: number }>(
      'clock:coarse-reader',
      3,
      { clock: clock.handle, reads: 1_000_000 },
    );
    for (const r of results) {
      expect({ ahead: r.ahead, back: r.back }).toEqual({ ahead: 0, back: 0 });
      expect(r.distinct).toBeGreaterThan(2);
    }
  });

  it('keeps moving while the creating thread’s event loop is blocked', async () => {
    // Right after construction, without giving the event loop a turn: the ticker thread
    // starts and publishes on its own.
    const fresh = coarse(1);
    const first = spin(fresh, () => fresh.ticking);
    expect(fresh.ticking).toBe(true);
    expect(first.length).toBeGreaterThan(0);
    // Once it runs: one blocked stretch sees several publications.
    const clock = coarse(1);
    await untilTicking(clock);
    const reads = spin(clock, (r) => r.length >= 5);
    expect(reads.length).toBeGreaterThanOrEqual(5);
    for (let i = 1; i < reads.length; i++) expect(reads[i]!).toBeGreaterThan(reads[i - 1]!);
  });

  it('one limiter in two worker threads: one limit, the same time', async () => {
    const clock = coarse(1);
    await untilTicking(clock);
    // Refilling 1e-6 per second: no permit comes back during the test, whatever the time.
    const limiter = new TokenBucket({ capacity: 1000, refillPerSecond: 1e-6, clock });
    const hammers = await runWorkers<{ admitted: number; coarse: boolean }>(
      'clock:coarse-limiter',
      2,
      { limiter: limiter.handle, role: 'hammer', attempts: 5000 },
    );
    expect(hammers.map((h) => h.coarse)).toEqual([true, true]);
    expect(hammers[0]!.admitted + hammers[1]!.admitted).toBe(1000);
    expect(limiter.tryAcquire('k')).toBe(false);

    // The same time: a worker's reading, taken between two of ours, lies between them, and
    // equals them whenever ours are equal (no publication in between). Precise per-thread
    // clocks would almost never read equal.
    const rounds = 300;
    const sync = new Int32Array(new SharedArrayBuffer(4));
    const times = new Float64Array(new SharedArrayBuffer(rounds * 8));
    const group = startWorkers<{ ticking: boolean; resolutionMs: number }>(
      'clock:coarse-limiter',
      1,
      { limiter: limiter.handle, role: 'pingpong', rounds, sync: sync.buffer, times: times.buffer },
    );
    try {
      let equalRounds = 0;
      for (let i = 0; i < rounds; i++) {
        const before = clock.nowUs();
        Atomics.store(sync, 0, 2 * i + 1);
        Atomics.notify(sync, 0);
        while (Atomics.load(sync, 0) !== 2 * i + 2) Atomics.wait(sync, 0, 2 * i + 1, 1000);
        const after = clock.nowUs();
        const theirs = times[i]!;
        expect(theirs).toBeGreaterThanOrEqual(before);
        expect(theirs).toBeLessThanOrEqual(after);
        if (before === after) {
          equalRounds++;
          expect(theirs).toBe(before);
        }
      }
      expect(equalRounds).toBeGreaterThan(rounds / 4);
      const [pong] = await group.results;
      expect(pong).toEqual({ ticking: true, resolutionMs: 1 });
    } finally {
      await group.terminate();
    }
  });

  it('acquire() waiters on it are granted in FIFO order as its time moves', async () => {
    const clock = coarse(1);
    await untilTicking(clock);
    const limiter = new TokenBucket({ capacity: 1, refillPerSecond: 100, queueLimit: 5, clock });
    expect(limiter.tryAcquire()).toBe(true);
    const order: number[] = [];
    await Promise.all([0, 1, 2, 3].map((i) => limiter.acquire().then(() => order.push(i))));
    expect(order).toEqual([0, 1, 2, 3]);
  });

  it('close() and Symbol.dispose stop the ticker thread; readers then read the precise clock', async () => {
    for (const stop of ['close', 'dispose'] as const) {
      const clock = coarse(1);
      await untilTicking(clock);
      const reader = new CoarseClock(clock.handle); // what attach() builds in another thread
      if (stop === 'close') clock.close();
      else clock[Symbol.dispose]();
      expect(clock.ticking).toBe(false);
      expect(reader.ticking).toBe(false);
      for (const c of [clock, reader]) {
        const before = precise.nowUs();
        const t = c.nowUs();
        const after = precise.nowUs();
        expect(t).toBeGreaterThanOrEqual(before);
        expect(t).toBeLessThanOrEqual(after);
      }
      clock.close(); // idempotent
      expect(clock.ticking).toBe(false);
    }
  });

  it.runIf(existsSync('/proc/self/status'))('close() ends the ticker’s OS thread', async () => {
    const result = await runChild(
      `import { readFileSync } from 'node:fs';
       import { CoarseClock } from ${JSON.stringify(DIST)};
       const threads = () => Number(/Threads:\\s+(\\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]);
       const pause = () => new Promise((r) => setTimeout(r, 5));
       const before = threads();
       const clock = new CoarseClock();
       while (!clock.ticking) await pause();
       const running = threads();
       clock.close();
       let after = threads();
       for (let i = 0; i < 2000 && after !== before; i++) { await pause(); after = threads(); }
       console.log(JSON.stringify({ before, running, after }));`,
      30_000,
    );
    expect(result.killed).toBe(false);
    const { before, running, after } = JSON.parse(result.stdout);
    expect(running).toBe(before + 1);
    expect(after).toBe(before);
  });

  it('a process using it exits by itself, with or without close()', async () => {
    for (const close of [false, true]) {
      const result = await runChild(
        `import { CoarseClock, TokenBucket } from ${JSON.stringify(DIST)};
         const clock = new CoarseClock({ resolutionMs: 1 });
         const limiter = new TokenBucket({ capacity: 3, refillPerSecond: 1e-6, clock });
         let admitted = 0;
         for (let i = 0; i < 10; i++) if (limiter.tryAcquire()) admitted++;
         while (!clock.ticking) await new Promise((r) => setTimeout(r, 5));
         console.log(JSON.stringify({ admitted, ticking: clock.ticking }));
         ${close ? 'clock.close();' : ''}`,
        30_000,
      );
      expect({ close, killed: result.killed, code: result.code, stderr: result.stderr }).toEqual({
        close,
        killed: false,
        code: 0,
        stderr: '',
      });
      expect(JSON.parse(result.stdout)).toEqual({ admitted: 3, ticking: true });
    }
  });

  it('keeps ticking for other readers after its creating object becomes garbage', async () => {
    const result = await runChild(
      `import v8 from 'node:v8';
       import vm from 'node:vm';
       import { CoarseClock, TokenBucket, attach } from ${JSON.stringify(DIST)};
       v8.setFlagsFromString('--expose-gc');
       const gc = vm.runInNewContext('gc');
       const pause = () => new Promise((r) => setTimeout(r, 5));
       function make() {
         const clock = new CoarseClock({ resolutionMs: 1 });
         return new TokenBucket({ capacity: 1, refillPerSecond: 1e-6, clock }).handle;
       }
       const limiter = attach(make());
       for (let i = 0; i < 5; i++) { gc(); await pause(); }
       while (!limiter.clock.ticking) await pause();
       const seen = new Set();
       for (let i = 0; i < 4000 && seen.size < 5; i++) { seen.add(limiter.clock.nowUs()); await pause(); }
       console.log(JSON.stringify({ ticking: limiter.clock.ticking, distinct: seen.size }));`,
      30_000,
    );
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({ ticking: true, distinct: 5 });
  });

  it('when the creating worker thread ends, other threads switch to the precise clock', async () => {
    const worker = scenarioWorker('clock:coarse-creator', { workerData: { end: 'exit' } });
    const handle = await new Promise((resolve) => worker.once('message', resolve));
    await new Promise((resolve) => worker.once('exit', resolve));
    const reader = new CoarseClock(handle as CoarseClock['handle']);
    expect(reader.ticking).toBe(false);
    const before = precise.nowUs();
    const t = reader.nowUs();
    expect(t).toBeGreaterThanOrEqual(before);
    expect(t).toBeLessThanOrEqual(precise.nowUs());
  });

  it('when the creating worker thread is terminated, readers never freeze for good', async () => {
    const worker = scenarioWorker('clock:coarse-creator', { workerData: { end: 'stay' } });
    try {
      const handle = await new Promise((resolve) => worker.once('message', resolve));
      const reader = new CoarseClock(handle as CoarseClock['handle']);
      const limiter = new FixedWindow({ limit: 1, windowMs: 1, clock: reader });
      await untilTicking(reader);
      await worker.terminate(); // takes its ticker thread with it: nobody publishes any more
      const frozen = reader.nowUs();
      let last = frozen;
      let ahead = 0;
      let back = 0;
      const start = precise.nowUs();
      // Reads (and decisions) go on; the reader notices the stale time and, once the ticker
      // has had every chance to catch up, stops the clock for every reader.
      while (reader.ticking && precise.nowUs() - start < 20e6) {
        for (let i = 0; i < 2000; i++) {
          const t = reader.nowUs();
          if (t > precise.nowUs()) ahead++;
          if (t < last) back++;
          last = t;
        }
        await tick();
      }
      expect({ ticking: reader.ticking, ahead, back }).toEqual({
        ticking: false,
        ahead: 0,
        back: 0,
      });
      expect(reader.nowUs()).toBeGreaterThan(frozen);
      // Windows of 1 ms turn again: one permit now, and another once time has moved on.
      const granted = limiter.tryAcquire();
      const t = reader.nowUs();
      while (reader.nowUs() < t + 2000);
      expect([granted, limiter.tryAcquire()]).toEqual([true, true]);
    } finally {
      await worker.terminate();
    }
  });

  /**
   * A reader of a copy of a 0.1 ms clock's buffer that no ticker touches, as new (nothing
   * published yet): the test publishes times itself.
   */
  function unticked() {
    const clock = coarse(0.1);
    const buffer = new SharedArrayBuffer(clock.handle.buffer.byteLength);
    new Uint8Array(buffer).set(new Uint8Array(clock.handle.buffer));
    const words = new Int32Array(buffer);
    const f64 = new Float64Array(buffer);
    Atomics.store(words, 0, -2);
    return { words, f64, reader: new CoarseClock({ kind: 'coarse', buffer }) };
  }

  it('decodes the right time across eras, whatever the uptime (up to 2^40 units on)', () => {
    const { words, f64, reader } = unticked();
    const unitUs = (0.1 * 1000) / 16;
    const origin = precise.nowUs();
    let last = Number.NEGATIVE_INFINITY;
    const check = (atUs: number) => {
      publishTime(words, f64, atUs);
      const t = reader.nowUs();
      expect(t).toBeLessThanOrEqual(atUs);
      expect(atUs - t).toBeLessThan(unitUs + 10 + 1e-6); // one unit, plus the 10 µs margin
      expect(t).toBeGreaterThanOrEqual(last);
      last = t;
    };
    // Steps of 2^27 units: 64 of them go round the four eras (2^29 units each) twice.
    for (let k = 1; k <= 64; k++) check(origin + k * 2 ** 27 * unitUs + 3.3);
    // Then jumps of 2^31 and 2^32 units and more at once (the loop above ended at 2^33).
    for (const units of [2 ** 33 + 2 ** 31, 2 ** 34 + 1, 2 ** 35 + 7, 2 ** 40]) {
      check(origin + units * unitUs + 1.7);
    }
    // An earlier time is never published: the clock does not go back.
    const word = Atomics.load(words, 0);
    expect(publishTime(words, f64, origin)).toBe(word);
    expect(reader.nowUs()).toBe(last);
    // Stopped: nothing is published any more.
    Atomics.store(words, 0, -1);
    expect(publishTime(words, f64, origin + 2 ** 41 * unitUs)).toBe(-1);
  });

  it('reads the right time when its era number comes round again between two reads', () => {
    const { words, f64, reader } = unticked();
    const unitUs = (0.1 * 1000) / 16;
    const origin = precise.nowUs();
    let atUs = origin + 5 * unitUs;
    publishTime(words, f64, atUs);
    expect(atUs - reader.nowUs()).toBeLessThan(unitUs + 10 + 1e-6);
    const era = Atomics.load(words, 0) >>> 29;
    // Four publications of an era each (2^29 units): the word is in the same era number
    // again, with another base. The reader, which last read in that era number, must not
    // decode it with the base it saw then.
    for (let k = 0; k < 4; k++) {
      atUs += 2 ** 29 * unitUs + 3.7;
      publishTime(words, f64, atUs);
    }
    expect(Atomics.load(words, 0) >>> 29).toBe(era);
    for (let i = 0; i < 3; i++) {
      const t = reader.nowUs();
      expect(t).toBeLessThanOrEqual(atUs);
      expect(atUs - t).toBeLessThan(unitUs + 10 + 1e-6);
    }
  });

  it('rejects bad options, naming the option and the value', () => {
    for (const resolutionMs of [0.1, 1000]) coarse(resolutionMs);
    expect(coarse().resolutionMs).toBe(1);
    for (const resolutionMs of [0.09, 0, -1, 1000.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new CoarseClock({ resolutionMs })).toThrow(RangeError);
      expect(() => new CoarseClock({ resolutionMs })).toThrow(
        new RegExp(`"resolutionMs" must be a finite number from 0.1 to 1000, got ${resolutionMs}`),
      );
    }
    for (const resolutionMs of ['1', null, 1n, {}]) {
      expect(() => new CoarseClock({ resolutionMs } as never)).toThrow(TypeError);
      expect(() => new CoarseClock({ resolutionMs } as never)).toThrow(
        /"resolutionMs" must be a number/,
      );
    }
    expect(() => new CoarseClock(null as never)).toThrow(TypeError);
    expect(() => new CoarseClock({ resolution: 1 } as never)).toThrow(
      /unknown option "resolution"/,
    );
    expect(() => new CoarseClock({ kind: 'coarse', buffer: new SharedArrayBuffer(64) })).toThrow(
      /does not hold a CoarseClock buffer/,
    );
    expect(
      () =>
        new CoarseClock({
          kind: 'coarse',
          buffer: new ArrayBuffer(64) as unknown as SharedArrayBuffer,
        }),
    ).toThrow(TypeError);
    expect(() => new TokenBucket({ capacity: 1, refillPerSecond: 1, clock: {} as never })).toThrow(
      /option "clock" must be a ManualClock, a CoarseClock or a MonotonicClock/,
    );
    // The default clock, given by name, is the default.
    const given = new TokenBucket({ capacity: 1, refillPerSecond: 1, clock: new MonotonicClock() });
    expect(given.tryAcquire()).toBe(true);
    expect(given.handle.clock).toEqual(
      new TokenBucket({ capacity: 1, refillPerSecond: 1 }).handle.clock,
    );
  });
});
