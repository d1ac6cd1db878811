import type { Key } from '../limiter.js';
import { checkKey, keyError } from '../validate.js';

/** A high surrogate with no low one after it, or a low one with no high one before it. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/**
 * A user key as a Redis hash tag. Every Redis key of one user key is
 * `<prefix>:<algorithm>:{<tag>}…`, so one script touches one hash slot (never CROSSSLOT).
 * The tag may not contain `{` or `}` (the tag would end early), so `%`, `{`, `}` and `#`
 * are escaped as %25, %7B, %7D, %23; a numeric key is `#` and the number (1 and '1' are
 * different keys, as in memory); the default key is `#` alone. Other characters,
 * non-ASCII included, go as UTF-8 — but a lone surrogate, which UTF-8 cannot carry (every
 * one would become U+FFFD, and two keys one), goes as %u and its four hex digits.
 */
export function tagOf(owner: string, key: Key | undefined): string {
  if (key === undefined) return '#';
  checkKey(owner, key); // exactly what the in-memory limiter refuses (type, length)
  if (typeof key === 'string') {
    // An empty tag would make Redis hash the whole key name: '%' alone never occurs
    // otherwise (an escape is always followed by two hex digits).
    if (key === '') return '%';
    const tag = /[%{}#]/.test(key)
      ? key.replace(/[%{}#]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
      : key;
    return LONE_SURROGATE.test(tag)
      ? tag.replace(LONE_SURROGATES, (c) => `%u${c.charCodeAt(0).toString(16).toUpperCase()}`)
      : tag;
  }
  if (typeof key === 'number' && Number.isFinite(key)) return `#${Object.is(key, -0) ? 0 : key}`;
  throw keyError(owner, key);
}

const CRC = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let c = i << 8;
  for (let j = 0; j < 8; j++) c = c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1;
  CRC[i] = c & 0xffff;
}

/** The Redis Cluster hash slot of a tag (CRC16/XMODEM of its UTF-8, modulo 16384). */
export function slotOf(tag: string): number {
  const bytes = Buffer.from(tag, 'utf8');
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) ^ CRC[((crc >> 8) ^ b) & 0xff]!) & 0xffff;
  return crc & 16383;
}
