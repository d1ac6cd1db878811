/**
 * Keyed hashing of limiter keys: HalfSipHash-2-4 with a 64-bit key (the table's random
 * seed, stored in its header) and a 64-bit output, over UTF-16 code units. Without the
 * seed an attacker cannot choose keys that collide or that crowd one stripe. Only the
 * slow path hashes; the hot path finds a key's slot in a per-thread cache.
 *
 * The result is written to `out[0]`, `out[1]` (two int32), to avoid allocating.
 */

function rotl(x: number, b: number): number {
  return (x << b) | (x >>> (32 - b));
}

let v0 = 0;
let v1 = 0;
let v2 = 0;
let v3 = 0;

function round(): void {
  v0 = (v0 + v1) | 0;
  v1 = rotl(v1, 5) ^ v0;
  v0 = rotl(v0, 16);
  v2 = (v2 + v3) | 0;
  v3 = rotl(v3, 8) ^ v2;
  v0 = (v0 + v3) | 0;
  v3 = rotl(v3, 7) ^ v0;
  v2 = (v2 + v1) | 0;
  v1 = rotl(v1, 13) ^ v2;
  v2 = rotl(v2, 16);
}

function init(k0: number, k1: number): void {
  v0 = k0;
  v1 = k1;
  v2 = 0x6c796765 ^ k0;
  v3 = 0x74656462 ^ k1;
  v1 ^= 0xee;
}

function absorb(m: number): void {
  v3 ^= m;
  round();
  round();
  v0 ^= m;
}

/** The finalisation's rounds: the "4" of 2-4, before each output word. */
function finalRounds(): void {
  round();
  round();
  round();
  round();
}

function finish(b: number, out: Int32Array): void {
  absorb(b);
  v2 ^= 0xee;
  finalRounds();
  out[0] = v1 ^ v3;
  v1 ^= 0xdd;
  finalRounds();
  out[1] = v1 ^ v3;
}

const f64 = new Float64Array(1);
const f64Words = new Int32Array(f64.buffer);

/** Hashes a string or finite number key; strings and numbers never collide by type. */
export function hashKey(key: string | number, k0: number, k1: number, out: Int32Array): void {
  init(k0, k1);
  if (typeof key === 'number') {
    f64[0] = key === 0 ? 0 : key; // -0 and 0 are one key, as in a Map
    absorb(f64Words[0]!);
    absorb(f64Words[1]!);
    finish(0x4e000008, out); // domain tag 'N' and length 8 bytes
    return;
  }
  const n = key.length;
  let i = 0;
  for (; i + 1 < n; i += 2) absorb(key.charCodeAt(i) | (key.charCodeAt(i + 1) << 16));
  const tail = i < n ? key.charCodeAt(i) : 0;
  absorb(tail);
  // Domain tag 'S' with the length, so "a" and "a\0" differ.
  finish((0x53 << 24) ^ (n & 0xffffff), out);
}
