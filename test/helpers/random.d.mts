/** A generator of numbers in [0, 1), the same sequence for the same 32-bit `seed`. */
export function seededRandom(seed: number): () => number;
/** 0 … n − 1 in an order shuffled by `seed` (Fisher–Yates). */
export function shuffled(n: number, seed: number): number[];
