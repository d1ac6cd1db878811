// The tests' one source of randomness: mulberry32, a small seeded generator. Every test
// that draws random numbers draws them from here with a fixed seed written in the test, so
// a run repeats the same sequence and a failure it finds comes back on the next run.
// Plain ESM (with random.d.mts for TypeScript): worker scenarios, which vitest does not
// transform, import it too.

/** A generator of numbers in [0, 1), the same sequence for the same 32-bit `seed`. */
export function seededRandom(seed) {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** 0 … n − 1 in an order shuffled by `seed` (Fisher–Yates). */
export function shuffled(n, seed) {
  const order = Array.from({ length: n }, (_, i) => i);
  const random = seededRandom(seed);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}
