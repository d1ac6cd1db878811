import { STAMP_US } from '../engine/layout.js';
import { integerOption, rangeError, show } from '../validate.js';
import { largestLimit, readWindowOptions } from './window-bits.js';

export const MIN_SEGMENTS = 2;
export const MAX_SEGMENTS = 1000;

/**
 * Bit budget of a segmented SlidingWindow. The state word's 28-bit payload holds the
 * current segment's number (modulo 2^segBits) and its count (countBits, one bit wider than
 * `limit + 2` needs, so the reserved payloads never occur); a ring entry (one Int32 per
 * segment) holds a tag (the segment's number modulo 2^tagBits) and the same count field.
 *
 * The segment number is decoded relative to the slot's stamp (2^20 µs, lagging by up to two
 * stamps), so the field must cover that many segments either way. A tag must tell a
 * segment from the ones N and 2N before it (what an entry holds until a roll rewrites it),
 * so 2^tagBits ≥ 4 × segments.
 */
export function segmentBits(
  limit: number,
  segmentUs: number,
  segments: number,
): { countBits: number; segBits: number; tagBits: number } | null {
  const countBits = 32 - Math.clz32(limit + 2);
  const segBits = 28 - countBits;
  const tagBits = 32 - countBits;
  if (segBits < 2 || 2 ** (segBits - 1) < 3 + (2 * STAMP_US) / segmentUs) return null;
  if (2 ** tagBits < 4 * segments) return null;
  return { countBits, segBits, tagBits };
}

/** The largest limit `segmentBits` accepts (for error messages and the docs' range table). */
export function maxSegmentedLimit(segmentUs: number, segments: number): number {
  return largestLimit((limit) => segmentBits(limit, segmentUs, segments) !== null);
}

/**
 * What a segmented limit needs: a limit up to `maxLimit` (2^c − 3, its count in c bits)
 * needs segments of at least `minSegmentUs` (so that the 28 − c bits left number enough of
 * them) and at most `maxSegments` of them (so that a ring tag, 32 − c bits, tells them
 * apart). Null past the largest limit any segments allow.
 */
export function segmentedTier(
  limit: number,
): { maxLimit: number; minSegmentUs: number; maxSegments: number } | null {
  const countBits = 32 - Math.clz32(limit + 2);
  const room = 2 ** (27 - countBits) - 3; // segBits − 1 = 27 − countBits
  if (room <= 0) return null;
  const maxSegments = Math.min(MAX_SEGMENTS, 2 ** (30 - countBits));
  if (maxSegments < MIN_SEGMENTS) return null;
  // The least whole µs with 2^(segBits − 1) ≥ 3 + 2 × STAMP_US / segmentUs, as segmentBits() tests it.
  let minSegmentUs = Math.ceil((2 * STAMP_US) / room);
  while (2 ** (27 - countBits) < 3 + (2 * STAMP_US) / minSegmentUs) minSegmentUs++;
  while (minSegmentUs > 1 && 2 ** (27 - countBits) >= 3 + (2 * STAMP_US) / (minSegmentUs - 1)) {
    minSegmentUs--;
  }
  return { maxLimit: 2 ** countBits - 3, minSegmentUs, maxSegments };
}

/** The largest limit any segments allow (33 554 429: segments of at least 2 097.152 ms). */
export const MAX_SEGMENTED_LIMIT = 2 ** 25 - 3;

function tierHint(limit: number): string {
  const tier = segmentedTier(limit);
  if (tier === null) {
    const top = segmentedTier(MAX_SEGMENTED_LIMIT)!;
    return `no segments allow more than ${MAX_SEGMENTED_LIMIT} (segments of at least ${top.minSegmentUs / 1000} ms, at most ${top.maxSegments} of them)`;
  }
  return `a limit up to ${tier.maxLimit} needs segments of at least ${tier.minSegmentUs / 1000} ms, at most ${tier.maxSegments} of them`;
}

/**
 * A SlidingWindow's own options, checked: `windowMs`, `segments` (absent: the two-window
 * estimate) and `limit` up to what fits. Every backend's SlidingWindow reads them here.
 */
export function readSlidingWindowOptions(
  owner: string,
  opts: Record<string, unknown>,
  wideAllowed = false,
): { limit: number; windowMs: number; segments: number | undefined; wide: boolean } {
  if (opts.segments === undefined) {
    return { ...readWindowOptions(owner, opts, 2, wideAllowed), segments: undefined };
  }
  // windowMs first (its own checks), with a limit that always fits: the real one is below.
  const { windowMs } = readWindowOptions(owner, { ...opts, limit: 1 }, 2);
  const segments = integerOption(owner, 'segments', opts.segments, MIN_SEGMENTS, MAX_SEGMENTS);
  const windowUs = Math.round(windowMs * 1000);
  if (Math.abs(windowMs * 1000 - windowUs) > 1e-6 || windowUs % segments !== 0) {
    throw rangeError(
      `${owner}: option "segments" (${show(segments)}) must split "windowMs" (${show(windowMs)}) into segments of a whole number of microseconds`,
    );
  }
  const segmentUs = windowUs / segments;
  const max = maxSegmentedLimit(segmentUs, segments);
  if (typeof opts.limit === 'number' && Number.isInteger(opts.limit) && opts.limit > max) {
    throw rangeError(
      `${owner}: option "limit" must be an integer from 1 to ${max} with ${segments} segments of ${segmentUs / 1000} ms (a segment's number and count share a 28-bit word), got ${show(opts.limit)}; ${tierHint(opts.limit)}`,
    );
  }
  const limit = integerOption(owner, 'limit', opts.limit, 1, max);
  return { limit, windowMs, segments, wide: false };
}
