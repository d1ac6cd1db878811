import { describe, expect, it } from 'vitest';
import { seededRandom, shuffled } from './random.mjs';

describe('seededRandom (test helper)', () => {
  it('repeats its sequence for a seed, and draws another for another seed', () => {
    const a = seededRandom(42);
    const b = seededRandom(42);
    const c = seededRandom(43);
    const first = Array.from({ length: 1000 }, () => a());
    expect(Array.from({ length: 1000 }, () => b())).toEqual(first);
    const other = Array.from({ length: 1000 }, () => c());
    expect(other.filter((x, i) => x === first[i]).length).toBeLessThan(3);
  });

  it('draws from [0, 1), spread evenly: each tenth holds 10 % ± 0.5 % of 100 000 draws', () => {
    const random = seededRandom(7);
    const tenths = new Array(10).fill(0);
    for (let i = 0; i < 100_000; i++) {
      const x = random();
      expect(x >= 0 && x < 1).toBe(true);
      tenths[Math.floor(x * 10)]++;
    }
    for (const n of tenths) expect(Math.abs(n - 10_000)).toBeLessThan(500);
  });

  it('shuffled(n, seed) is a permutation of 0 … n − 1, the same for the same seed', () => {
    const order = shuffled(1000, 5);
    expect([...order].sort((x, y) => x - y)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    expect(shuffled(1000, 5)).toEqual(order);
    expect(shuffled(1000, 6)).not.toEqual(order);
  });
});
