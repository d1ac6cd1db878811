import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { attach, LimiterClosedError, ManualClock } from '../../src/index.js';
import { admitted, cases, LIMIT } from '../helpers/limiters.js';

// The behaviours every limiter must show. Each algorithm's own file tests its formula.
describe.each(cases)('$name (contract)', ({ make, burst }) => {
  it('grants exactly its burst to a fresh key while time stands still', () => {
    const limiter = make(new ManualClock());
    expect(admitted(limiter, 'a', 20)).toBe(burst);
    expect(admitted(limiter, 'b', 20)).toBe(burst);
    expect(admitted(limiter, undefined, 20)).toBe(burst);
  });

  it('counts admitted and refused permits per key', () => {
    const limiter = make(new ManualClock());
    admitted(limiter, 'k', 8);
    expect(limiter.stats('k')).toEqual({
      available: 0,
      queued: 0,
      admitted: burst,
      rejected: 8 - burst,
    });
    expect(limiter.stats('never-seen')).toEqual({
      available: LIMIT,
      queued: 0,
      admitted: 0,
      rejected: 0,
    });
  });

  it('explains a refusal with a Decision', () => {
    const limiter = make(new ManualClock());
    const first = limiter.consume('k');
    expect(first).toMatchObject({ allowed: true, limit: LIMIT, retryAfterMs: 0 });
    expect(first.remaining).toBe(burst - 1);
    admitted(limiter, 'k', 10);
    const refused = limiter.consume('k');
    expect(refused.allowed).toBe(false);
    expect(refused.reason).toBe('limited');
    expect(refused.remaining).toBe(0);
    expect(refused.retryAfterMs).toBeGreaterThan(0);
  });

  it('refunds permits, never above the limit', () => {
    const limiter = make(new ManualClock());
    admitted(limiter, 'k', 10);
    limiter.refund('k', 1);
    expect(admitted(limiter, 'k', 10)).toBe(1);
    limiter.refund('k', LIMIT);
    limiter.refund('k', LIMIT);
    expect(admitted(limiter, 'k', 20)).toBe(burst);
    limiter.refund('unknown', 1); // a key never seen: nothing to give back
    expect(admitted(limiter, 'unknown', 20)).toBe(burst);
  });

  it('resets a key to its initial state and zeroes its counters', () => {
    const limiter = make(new ManualClock());
    admitted(limiter, 'k', 10);
    limiter.reset('k');
    expect(limiter.stats('k')).toMatchObject({ admitted: 0, rejected: 0 });
    expect(admitted(limiter, 'k', 10)).toBe(burst);
    limiter.reset(); // the default key
    expect(admitted(limiter, undefined, 10)).toBe(burst);
  });

  it('never mints permits when time goes backwards', () => {
    const clock = new ManualClock(1_000_000);
    const limiter = make(clock);
    admitted(limiter, 'k', 10);
    clock.set(0);
    expect(admitted(limiter, 'k', 10)).toBe(0);
    clock.set(500_000);
    expect(admitted(limiter, 'k', 10)).toBe(0);
  });

  it('shares one state with an instance attached from its handle', () => {
    const limiter = make(new ManualClock());
    const twin = attach(limiter.handle);
    expect(twin.constructor).toBe(limiter.constructor);
    expect(admitted(limiter, 'k', 3)).toBe(Math.min(3, burst));
    expect(admitted(twin, 'k', 10)).toBe(burst - Math.min(3, burst));
    expect(twin.stats('k').admitted).toBe(burst);
  });

  it('throws LimiterClosedError from every method after close(), on every instance', () => {
    const limiter = make(new ManualClock());
    const twin = attach(limiter.handle);
    limiter.close();
    expect(twin.closed).toBe(true);
    for (const l of [limiter, twin]) {
      expect(() => l.tryAcquire('k')).toThrow(LimiterClosedError);
      expect(() => l.consume('k')).toThrow(LimiterClosedError);
      expect(() => l.refund('k')).toThrow(LimiterClosedError);
      expect(() => l.reset('k')).toThrow(LimiterClosedError);
    }
  });

  it('rejects bad permits and keys with TypeError / RangeError', () => {
    const limiter = make(new ManualClock());
    expect(() => limiter.tryAcquire('k', LIMIT + 1)).toThrow(RangeError);
    expect(() => limiter.tryAcquire('k', LIMIT + 1)).toThrow(/exceed the limit/);
    expect(() => limiter.tryAcquire('k', 0)).toThrow(RangeError);
    expect(() => limiter.tryAcquire('k', 1.5)).toThrow(RangeError);
    // biome-ignore lint/suspicious/noExplicitAny: deliberately wrong types
    const loose = limiter as any;
    expect(() => loose.tryAcquire('k', '1')).toThrow(TypeError);
    expect(() => loose.tryAcquire({})).toThrow(TypeError);
    expect(() => loose.tryAcquire(null)).toThrow(TypeError);
    expect(() => limiter.tryAcquire(Number.NaN)).toThrow(RangeError);
    // Past int32 on either side, and what wraps into 1..limit there, are refused too.
    for (const bad of [2 ** 32 + 1, -(2 ** 32) + 1, 2 ** 31, -(2 ** 31), -0, Infinity]) {
      expect(() => limiter.tryAcquire('k', bad), String(bad)).toThrow(RangeError);
    }
    expect(() => limiter.consume('k', -1)).toThrow(RangeError);
    expect(() => limiter.refund('k', 0)).toThrow(RangeError);
  });

  it('keeps numeric and string keys apart', () => {
    const limiter = make(new ManualClock());
    admitted(limiter, 7, 10);
    expect(admitted(limiter, '7', 10)).toBe(burst);
    expect(admitted(limiter, -0, 10)).toBe(burst);
    expect(admitted(limiter, 0, 10)).toBe(0); // -0 and 0 are one key, as in a Map
  });

  it('is attached in a worker thread with the same class and state', async () => {
    const clock = new ManualClock();
    const limiter = make(clock);
    admitted(limiter, 'k', 2);
    const worker = new Worker(
      `const { workerData, parentPort } = require('node:worker_threads');
       import(workerData.dist).then(({ attach }) => {
         const l = attach(workerData.handle);
         let n = 0;
         for (let i = 0; i < 10; i++) if (l.tryAcquire('k')) n++;
         parentPort.postMessage({ name: l.constructor.name, n });
       });`,
      {
        eval: true,
        workerData: {
          handle: limiter.handle,
          dist: new URL('../../dist/index.js', import.meta.url).href,
        },
      },
    );
    const result = await new Promise<{ name: string; n: number }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    await worker.terminate();
    expect(result.name).toBe(limiter.constructor.name);
    expect(result.n).toBe(burst - Math.min(2, burst));
  });
});

describe.each(cases.filter((c) => c.timed))('$name (contract, time-based)', ({ make, burst }) => {
  it('gives an exact retryAfterMs: sooner fails, at it succeeds', () => {
    const clock = new ManualClock(12_345);
    const limiter = make(clock);
    for (let round = 0; round < 3; round++) {
      admitted(limiter, 'k', 10);
      const { retryAfterMs, allowed } = limiter.consume('k');
      expect(allowed).toBe(false);
      clock.advance(retryAfterMs - 0.001);
      expect(limiter.tryAcquire('k')).toBe(false);
      clock.advance(0.001);
      expect(limiter.tryAcquire('k')).toBe(true);
    }
  });

  it('decodes a key idle for 2^31 ms, 2^32 ms, 2^40 ms exactly, past 2^53 ns and 71 years of uptime', () => {
    const clock = new ManualClock(2 ** 31 + 17);
    const limiter = make(clock);
    // The gaps also carry uptime past 2^53 ns (104 days) and past the stamp's own 31-bit
    // range (2^31 stamps of 2^20 µs, 71 years): stamps compare modulo 2^31, so any gap
    // under 2^30 stamps (35 years) decodes exactly.
    for (const gap of [2 ** 31, 2 ** 32 - 999, 2 ** 32, 2 ** 33 + 5, 2 ** 40, 2 ** 40, 2 ** 40]) {
      expect(admitted(limiter, 'k', 10)).toBe(burst);
      clock.advance(gap);
    }
    expect(clock.nowMs()).toBeGreaterThan(2 ** 31 * 2 ** 20 * 1e-3);
    expect(admitted(limiter, 'k', 10)).toBe(burst);
  });
});

describe.each(cases.filter((c) => !c.timed))('$name (contract, release-based)', ({ make }) => {
  it('reports retryAfterMs as Infinity: only a release helps', () => {
    const limiter = make(new ManualClock());
    admitted(limiter, 'k', 10);
    expect(limiter.consume('k').retryAfterMs).toBe(Number.POSITIVE_INFINITY);
  });
});
