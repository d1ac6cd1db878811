import { describe, expect, it } from 'vitest';
import { OffsetBounds } from '../../src/redis/fleet/offset.js';

// Fleet mode's bounds on the offset of Redis's clock (src/redis/fleet/offset.ts), by which a
// refusal read late is brought back to when Redis decided it. Times in ms; Redis's clock
// here runs 5 000 ms ahead of the local one.
const AHEAD = 5000;

/** A reply sent at local `s`, decided by Redis `d` ms later, read at local `a`. */
function reply(b: OffsetBounds, s: number, d: number, a: number): void {
  b.note(s + d + AHEAD, s, a);
}

describe('OffsetBounds', () => {
  it('says nothing before a reply', () => {
    expect(new OffsetBounds().localOf(AHEAD + 100, 99, 300)).toBeUndefined();
  });

  it("brings a reply read late back to Redis's time, within the quickest reply's way back", () => {
    const b = new OffsetBounds();
    reply(b, 0, 0.05, 0.1); // quick: the offset is within 0.05 ms
    // Sent at 1000, decided at 1000.2, read 300 ms late.
    const at = b.localOf(1000.2 + AHEAD, 1000, 1300)!;
    expect(at).toBeGreaterThanOrEqual(1000.2);
    expect(at).toBeLessThanOrEqual(1000.2 + 0.05 + 1e-9);
  });

  it('is not loosened by slow replies, however many', () => {
    const b = new OffsetBounds();
    reply(b, 0, 0.05, 0.1);
    for (let i = 1; i <= 5000; i++) reply(b, i, 0.05, i + 20); // each read 20 ms late
    const at = b.localOf(6000.2 + AHEAD, 6000, 6300)!;
    expect(at - 6000.2).toBeLessThanOrEqual(0.05 + 1e-9);
    expect(at).toBeGreaterThanOrEqual(6000.2);
  });

  it('keeps a reply for 10 to 20 s, then lapses', () => {
    const b = new OffsetBounds();
    reply(b, 0, 0.05, 0.1);
    reply(b, 9999, 0.05, 10_300); // slow, in the next period
    expect(b.localOf(19_000.2 + AHEAD, 19_000, 19_300)! - 19_000.2).toBeLessThanOrEqual(
      0.05 + 1e-9,
    );
    // 20 s after the period began, nothing is known.
    expect(b.localOf(30_400 + AHEAD, 30_400, 30_401)).toBeUndefined();
  });

  it("counts a reply's bounds no longer than 20 s, however the periods turn", () => {
    const b = new OffsetBounds();
    reply(b, 0, 0.05, 0.1);
    reply(b, 10_000, 0.05, 10_050); // slow, in the next period
    // At 29 s only the slow reply counts: a refusal read 40 ms late is read back by its
    // bounds (to reading, at most), not by the quick one's of 29 s ago.
    expect(b.localOf(29_000.2 + AHEAD, 29_000, 29_040)).toBe(29_040);
    const c = new OffsetBounds();
    reply(c, 0, 0.05, 0.1);
    reply(c, 19_900, 0.05, 19_950);
    // 39.9 s after the quick one, 20 s after the slow one's period began: nothing counts.
    expect(c.localOf(39_900.2 + AHEAD, 39_900, 39_940)).toBeUndefined();
  });

  it('starts afresh from a reply that does not meet the bounds (a clock stepped)', () => {
    for (const step of [-1000, 1000]) {
      const b = new OffsetBounds();
      reply(b, 0, 0.05, 0.1);
      // Redis's clock `step` ms off from before: this reply says nothing by the old bounds,
      const s = 100;
      expect(b.localOf(s + 0.05 + AHEAD + step, s, s + 300)).toBeUndefined();
      b.note(s + 0.05 + AHEAD + step, s, s + 0.1);
      // and the next ones are read by its bounds.
      const at = b.localOf(200.05 + AHEAD + step, 200, 500)!;
      expect([step, at >= 200.05 && at <= 200.15]).toEqual([step, true]);
    }
  });
});
