import { describe, expect, it } from 'vitest';
import { mod } from '../../src/algorithms/segmented-window.js';
import { attach, ManualClock, SlidingWindow } from '../../src/index.js';
import { admitted } from '../helpers/limiters.js';
import { seededRandom } from '../helpers/random.mjs';
import { runWorkers } from '../helpers/threads.js';

// SlidingWindow with `segments` (.NET's SegmentsPerWindow): the window split into equal
// segments; a request passes when the permits of the last `segments` segments (the current
// one included) plus its own are at most the limit. Time is a ManualClock: counts are exact.

describe('SlidingWindow with segments, at segment boundaries', () => {
  // limit 10, window 1000 ms, 4 segments of 250 ms.
  const make = (clock: ManualClock) =>
    new SlidingWindow({ limit: 10, windowMs: 1000, segments: 4, clock });

  it('frees permits exactly when the segment they were taken in leaves the window', () => {
    const clock = new ManualClock(0);
    const sw = make(clock);
    expect(admitted(sw, 'k', 3)).toBe(3); // segment 0
    clock.set(250);
    expect(admitted(sw, 'k', 4)).toBe(4); // segment 1
    clock.set(500);
    expect(admitted(sw, 'k', 2)).toBe(2); // segment 2
    clock.set(750);
    expect(admitted(sw, 'k', 5)).toBe(1); // segment 3: 3 + 4 + 2 + 1 = 10
    expect(sw.stats('k').available).toBe(0);
    // Segment 0's 3 permits count until 1000, to the microsecond.
    clock.set(999.999);
    expect(admitted(sw, 'k', 1)).toBe(0);
    clock.set(1000);
    expect(sw.stats('k').available).toBe(3);
    expect(admitted(sw, 'k', 5)).toBe(3); // segment 4
    // At 1250 segment 1's 4 leave; segment 4's 3 stay until 2000.
    clock.set(1249.999);
    expect(admitted(sw, 'k', 1)).toBe(0);
    clock.set(1250);
    expect(admitted(sw, 'k', 10)).toBe(4);
    // Long idle: everything has left; a full window again.
    clock.set(10_000);
    expect(sw.stats('k').available).toBe(10);
    expect(admitted(sw, 'k', 20)).toBe(10);
  });

  it('gives an exact retryAfterMs: when enough of the oldest segments holding permits have left', () => {
    const clock = new ManualClock(0);
    const sw = make(clock);
    admitted(sw, 'k', 2); // segment 0: 2
    clock.set(300);
    admitted(sw, 'k', 5); // segment 1: 5
    clock.set(600);
    admitted(sw, 'k', 3); // segment 2: 3 — full
    const one = sw.consume('k');
    expect(one).toMatchObject({ allowed: false, reason: 'limited', remaining: 0 });
    expect(one.retryAfterMs).toBe(400); // segment 0 leaves at 1000
    // Four permits need segment 1 gone too: at 1250.
    expect(sw.consume('k', 4).retryAfterMs).toBe(650);
    // resetAfterMs: until the newest segment holding permits (2: 500–750) leaves, at 1500.
    expect(one.resetAfterMs).toBe(900);
    // Retrying 1 µs early fails, at the time it succeeds.
    clock.set(999.999);
    expect(sw.tryAcquire('k')).toBe(false);
    clock.set(1000);
    expect(sw.consume('k', 2)).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('credits a refund to the segment its permits were taken in, and drops it once that segment has left', () => {
    const clock = new ManualClock(0);
    const sw = make(clock);
    expect(admitted(sw, 'k', 6)).toBe(6); // segment 0: 6
    const takenUs = sw.lastDecisionUs;
    clock.set(250);
    expect(admitted(sw, 'k', 4)).toBe(4); // segment 1: 4 — full
    // Two of segment 0's permits come back: they no longer count, now or after segment 1.
    sw.refundTaken('k', 2, takenUs);
    expect(sw.stats('k').available).toBe(2);
    expect(admitted(sw, 'k', 3)).toBe(2); // segment 1: 6
    // Segment 0 (now 4) leaves at 1000: exactly 4 come back, not 6.
    clock.set(1000);
    expect(sw.stats('k').available).toBe(4);
    // A refund now of permits taken in segment 0 is dropped: it has left the window.
    sw.refundTaken('k', 3, takenUs);
    expect(sw.stats('k').available).toBe(4);
    // refund() credits the current segment (4), and only what it holds.
    expect(admitted(sw, 'k', 1)).toBe(1);
    sw.refund('k', 5);
    expect(sw.stats('k').available).toBe(4);
    // Segment 1 holds 6 until 1250.
    clock.set(1250);
    expect(sw.stats('k').available).toBe(10);
  });

  it('keeps keys apart and counts stats', () => {
    const clock = new ManualClock(0);
    const sw = make(clock);
    expect(admitted(sw, 'a', 12)).toBe(10);
    expect(admitted(sw, 'b', 4)).toBe(4);
    expect(admitted(sw, undefined, 11)).toBe(10);
    expect(sw.stats('a')).toEqual({ available: 0, queued: 0, admitted: 10, rejected: 2 });
    expect(sw.stats('b')).toEqual({ available: 6, queued: 0, admitted: 4, rejected: 0 });
    expect(sw.stats()).toEqual({ available: 0, queued: 0, admitted: 10, rejected: 1 });
    expect(sw.segments).toBe(4);
    expect(new SlidingWindow({ limit: 10, windowMs: 1000 }).segments).toBe(undefined);
  });

  it('reset() empties every segment of the key', () => {
    const clock = new ManualClock(0);
    const sw = make(clock);
    admitted(sw, 'k', 5);
    clock.set(500);
    admitted(sw, 'k', 5);
    clock.set(750);
    expect(sw.tryAcquire('k')).toBe(false);
    sw.reset('k');
    expect(sw.stats('k')).toEqual({ available: 10, queued: 0, admitted: 0, rejected: 0 });
    expect(admitted(sw, 'k', 11)).toBe(10);
    // The permits before the reset do not come back to count when the window moves on.
    clock.set(1000);
    expect(sw.stats('k').available).toBe(0);
    sw.reset();
    expect(admitted(sw, undefined, 11)).toBe(10);
  });

  it('is exact with one segment per millisecond over a long random run', () => {
    // A reference model: every grant's segment, kept in an array.
    const clock = new ManualClock(0);
    const limit = 37;
    const segments = 50;
    const windowMs = 50;
    const sw = new SlidingWindow({ limit, windowMs, segments, clock });
    const grants: number[] = [];
    const random = seededRandom(12345);
    let mismatches = 0;
    for (let i = 0; i < 20_000; i++) {
      if (random() < 0.3) clock.advance(Math.floor(random() * 8));
      const nowMs = clock.nowUs() / 1000;
      const seg = Math.floor(nowMs);
      const inWindow = grants.filter((g) => g > seg - segments).length;
      const permits = 1 + Math.floor(random() * 3);
      const expected = inWindow + permits <= limit;
      if (sw.tryAcquire('k', permits) !== expected) mismatches++;
      if (expected) for (let p = 0; p < permits; p++) grants.push(seg);
    }
    expect(mismatches).toBe(0);
    expect(grants.length).toBeGreaterThan(5000);
  });
});

describe('SlidingWindow with segments, acquire() and attach()', () => {
  it('grants FIFO waiters as the segments holding permits leave the window', async () => {
    const clock = new ManualClock(0);
    const sw = new SlidingWindow({
      limit: 4,
      windowMs: 1000,
      segments: 4,
      clock,
      queueLimit: 10,
    });
    expect(admitted(sw, 'k', 1)).toBe(1); // segment 0: 1
    clock.set(250);
    expect(admitted(sw, 'k', 3)).toBe(3); // segment 1: 3
    const order: string[] = [];
    const waits = [
      sw.acquire('k', 1).then(() => order.push('a')),
      sw.acquire('k', 2).then(() => order.push('b')),
      sw.acquire('k', 1).then(() => order.push('c')),
    ];
    // A plain try never jumps the queue.
    expect(sw.tryAcquire('k')).toBe(false);
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([]);
    clock.set(999.999);
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([]);
    clock.set(1000); // segment 0's 1 permit leaves: 'a' takes it; 'b' needs 2
    for (let i = 0; i < 5 && order.length < 1; i++) await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['a']);
    clock.set(1250); // segment 1's 3 leave: 'b' (2) then 'c' (1)
    await Promise.all(waits);
    expect(order).toEqual(['a', 'b', 'c']);
    expect(sw.stats('k')).toMatchObject({ available: 0, queued: 0 });
  });

  it('travels in its handle: attach() opens it with the same segments and the same state', () => {
    const clock = new ManualClock(0);
    const sw = new SlidingWindow({ limit: 10, windowMs: 1000, segments: 4, clock });
    admitted(sw, 'k', 7);
    const other = attach<SlidingWindow>(sw.handle);
    expect(other).toBeInstanceOf(SlidingWindow);
    expect([other.segments, other.limit, other.windowMs]).toEqual([4, 10, 1000]);
    clock.set(500);
    expect(admitted(other, 'k', 5)).toBe(3);
    clock.set(1000);
    expect(sw.stats('k').available).toBe(7);
    expect(other.stats('k').available).toBe(7);
  });
});

describe('segment numbers modulo the ring, tag and segment sizes', () => {
  // Segment numbers are µs on the clock ÷ the segment length: past 2^31 on any real clock,
  // up to 2^53 in principle, and below 0 for a clock behind its epoch.
  it('is the true remainder, in 0..m−1, from −2^53 to 2^53 (checked against BigInt)', () => {
    const xs = [0, 1, -1, 2 ** 31 - 1, 2 ** 31, -(2 ** 31) - 1, 2 ** 53 - 1, -(2 ** 53) + 1];
    for (let k = 0; k < 2000; k++) xs.push(Math.floor((Math.sin(k) * 2 ** 53) / (1 + (k % 7))));
    for (let k = 1; k < 500; k++) xs.push(2 ** 53 - k, -(2 ** 53) + k, k * 1_000_003 - 1);
    for (const m of [1, 2, 3, 7, 10, 60, 1000, 4096, 2 ** 20 - 1, 2 ** 31 - 1]) {
      for (const x of xs) {
        const r = ((BigInt(x) % BigInt(m)) + BigInt(m)) % BigInt(m);
        expect(mod(x, m)).toBe(Number(r));
      }
    }
  });
});

describe('SlidingWindow with segments, bad input', () => {
  const base = { limit: 10, windowMs: 1000 };
  it.each([
    [1, /"segments" must be an integer from 2 to 1000, got 1/],
    [1001, /"segments" must be an integer from 2 to 1000, got 1001/],
    [2.5, /"segments" must be an integer from 2 to 1000, got 2.5/],
    [0, /"segments"/],
    [Number.NaN, /"segments"/],
  ])('refuses segments %s with a RangeError naming it', (segments, message) => {
    expect(() => new SlidingWindow({ ...base, segments })).toThrow(RangeError);
    expect(() => new SlidingWindow({ ...base, segments })).toThrow(message);
  });

  it('refuses a non-number with a TypeError', () => {
    expect(() => new SlidingWindow({ ...base, segments: '4' as never })).toThrow(TypeError);
  });

  it('refuses a window that does not split into whole microseconds', () => {
    // 1000 ms / 3 = 333 333.33 µs; 0.01 ms / 4 = 2.5 µs.
    for (const [windowMs, segments] of [
      [1000, 3],
      [0.01, 4],
      [7.0005, 2],
    ] as const) {
      expect(() => new SlidingWindow({ limit: 1, windowMs, segments })).toThrow(RangeError);
      expect(() => new SlidingWindow({ limit: 1, windowMs, segments })).toThrow(
        /"segments" \(\d+\) must split "windowMs" .* into segments of a whole number of microseconds/,
      );
    }
    // 0.004 ms in 4 segments of 1 µs is fine.
    expect(new SlidingWindow({ limit: 1, windowMs: 0.004, segments: 4 }).segments).toBe(4);
  });

  it('refuses a limit too large for the segment layout, saying what fits', () => {
    // 1 s in 1000 segments of 1 ms: the segment number needs 13 bits, leaving 15 for counts.
    expect(() => new SlidingWindow({ limit: 40_000, windowMs: 1000, segments: 1000 })).toThrow(
      /"limit" must be an integer from 1 to 32765 with 1000 segments of 1 ms/,
    );
    expect(new SlidingWindow({ limit: 32_765, windowMs: 1000, segments: 1000 }).limit).toBe(32_765);
    // The largest limit, 33 554 429, needs segments of at least 2 097.152 ms, at most 32.
    expect(() => new SlidingWindow({ limit: 20_000_000, windowMs: 4100, segments: 2 })).toThrow(
      /from 1 to 16777213 with 2 segments of 2050 ms .*got 20000000; a limit up to 33554429 needs segments of at least 2097.152 ms, at most 32 of them/,
    );
    expect(new SlidingWindow({ limit: 33_554_429, windowMs: 4194.304, segments: 2 }).limit).toBe(
      33_554_429,
    );
    expect(
      new SlidingWindow({ limit: 33_554_429, windowMs: 2097.152 * 32, segments: 32 }).limit,
    ).toBe(33_554_429);
    expect(() => new SlidingWindow({ limit: 33_554_429, windowMs: 4194.302, segments: 2 })).toThrow(
      /needs segments of at least 2097.152 ms/,
    );
    expect(() => new SlidingWindow({ limit: 33_554_430, windowMs: 60_000, segments: 2 })).toThrow(
      /no segments allow more than 33554429/,
    );
    // A limit up to 16 777 213 needs segments of at least 419.431 ms.
    expect(new SlidingWindow({ limit: 16_777_213, windowMs: 838.862, segments: 2 }).limit).toBe(
      16_777_213,
    );
    expect(() => new SlidingWindow({ limit: 16_777_213, windowMs: 838.86, segments: 2 })).toThrow(
      /a limit up to 16777213 needs segments of at least 419.431 ms, at most 64 of them/,
    );
    // A 60 s window in 60 segments holds far more than the two-window estimate's 4 093.
    expect(new SlidingWindow({ limit: 16_000_000, windowMs: 60_000, segments: 60 }).limit).toBe(
      16_000_000,
    );
  });
});

describe('SlidingWindow with segments shared by 4 threads', () => {
  const THREADS = 4;
  const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);
  const make = (clock: ManualClock, keys = 1024) =>
    new SlidingWindow({ limit: 10, windowMs: 1000, segments: 4, clock, keys });

  it('admits exactly the limit on one key out of 8000 attempts while time stands still', async () => {
    const sw = make(new ManualClock(0));
    const results = await runWorkers<{ admitted: number; rejected: number }>(
      'threads:hot-key',
      THREADS,
      { limiter: sw.handle, key: 'hot', attempts: 2000 },
    );
    const admittedTotal = sum(results.map((r) => r.admitted));
    expect(admittedTotal).toBe(10);
    expect(sw.stats('hot')).toEqual({
      available: 0,
      queued: 0,
      admitted: 10,
      rejected: THREADS * 2000 - 10,
    });
  });

  it('admits every one of 3000 keys exactly its limit while 4 threads visit them in their own orders', async () => {
    const keys = 3000;
    const sw = new SlidingWindow({
      limit: 3,
      windowMs: 1000,
      segments: 10,
      keys,
      clock: new ManualClock(0),
    });
    const results = await runWorkers<{ admitted: Int32Array; tableFull: number }>(
      'threads:many-keys',
      THREADS,
      { limiter: sw.handle, keys, rounds: 5 },
    );
    expect(results.map((r) => r.tableFull)).toEqual([0, 0, 0, 0]);
    const wrong: string[] = [];
    for (let k = 0; k < keys; k++) {
      const n = sum(results.map((r) => r.admitted[k]!));
      const s = sw.stats(`key:${k}`);
      if (n !== 3 || s.admitted !== 3 || s.rejected !== THREADS * 5 - 3 || s.available !== 0) {
        wrong.push(`key:${k} admitted ${n} ${JSON.stringify(s)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it.each([
    ['one key', 1],
    ['64 keys', 64],
  ])(
    'admits exactly what the window has room for on %s while the clock moves under 4 threads',
    async (_, keys) => {
      const clock = new ManualClock(0);
      const sw = make(clock);
      // Lockstep steps of 90 ms across segments of 250 ms; 4 threads × 1 try per key per
      // step, fewer than the limit of 10: permits spread over several segments of a window,
      // and every segment change is a roll that the 4 threads race to make.
      const steps = 120;
      const stepMs = 90;
      const perStep = 1;
      const results = await runWorkers<{ admitted: Int32Array; attempts: number }>(
        'threads:segments-rolling',
        THREADS,
        { limiter: sw.handle, keys, steps, perStep, stepMs, phases: new SharedArrayBuffer(4) },
      );
      // The model: per segment, what the last 4 segments leave room for, step by step.
      const perSegment = new Map<number, number>();
      let expected = 0;
      for (let s = 0; s < steps; s++) {
        const seg = Math.floor((s * stepMs) / 250);
        let used = 0;
        for (let g = seg - 3; g <= seg; g++) used += perSegment.get(g) ?? 0;
        const granted = Math.min(THREADS * perStep, 10 - used);
        perSegment.set(seg, (perSegment.get(seg) ?? 0) + granted);
        expected += granted;
      }
      const wrong: string[] = [];
      for (let k = 0; k < keys; k++) {
        const n = sum(results.map((r) => r.admitted[k]!));
        const s = sw.stats(`k:${k}`);
        if (n !== expected || s.admitted !== n || s.admitted + s.rejected !== THREADS * steps) {
          wrong.push(`k:${k} admitted ${n} of ${expected} ${JSON.stringify(s)}`);
        }
      }
      expect(wrong).toEqual([]);
      expect(sum(results.map((r) => r.attempts))).toBe(THREADS * steps * perStep * keys);
    },
  );

  it('counts every permit while 4 threads take and refund on one key, and ends with all permits back', async () => {
    const sw = make(new ManualClock(0));
    const results = await runWorkers<{ admitted: number; rejected: number }>(
      'threads:counters',
      THREADS,
      { limiter: sw.handle, key: 'k', attempts: 50_000 },
    );
    const admittedTotal = sum(results.map((r) => r.admitted));
    const stats = sw.stats('k');
    expect({ admitted: stats.admitted, rejected: stats.rejected }).toEqual({
      admitted: admittedTotal,
      rejected: THREADS * 50_000 - admittedTotal,
    });
    expect(stats.available).toBe(10);
  });

  it('an attached worker sees the segments and counts in the same segments', async () => {
    const clock = new ManualClock(0);
    const sw = make(clock);
    admitted(sw, 'k', 4); // segment 0
    clock.set(500);
    const results = await runWorkers<{ admitted: number }>('threads:hot-key', 1, {
      limiter: sw.handle,
      key: 'k',
      attempts: 20,
    });
    expect(results[0]!.admitted).toBe(6); // segment 2
    clock.set(1000); // segment 0's 4 leave; segment 2's 6 stay
    expect(sw.stats('k').available).toBe(4);
  });
});
