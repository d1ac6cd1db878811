import { STAMP_US } from '../engine/layout.js';
import { integerOption, positiveNumberOption, rangeError, show } from '../validate.js';

/** Largest window: keeps `count × window` products exact in doubles. */
export const MAX_WINDOW_MS = 2 ** 30;
export const MIN_WINDOW_MS = 0.001;
/** The wide table's ranges (a 64-bit state): options past the narrow ones choose it. */
export const MAX_WIDE_WINDOW_MS = 2 ** 31;
export const MAX_WIDE_LIMIT = 2 ** 31 - 1;
/** Shortest window of a wide table (its window number needs ≤ 13 bits). */
export const MIN_WIDE_WINDOW_MS = 1;

/**
 * Bit budget of a wide window payload (an integer below 2^53, see WIDE_LOW_BITS): the
 * window number modulo 2^windowBits, as few bits as the stamp's lag needs (as in
 * windowBits), above the count fields. `countBits` holds `limit`.
 */
export function wideWindowBits(
  limit: number,
  windowUs: number,
): { countBits: number; windowBits: number } {
  const needed = 3 + (2 * STAMP_US) / windowUs;
  let bits = 2;
  while (2 ** (bits - 1) < needed) bits++;
  return { countBits: 32 - Math.clz32(limit), windowBits: bits };
}

/**
 * A wide SlidingWindow's payload (below 2^53): the window number and the current count as
 * wideWindowBits() gives them, and the previous window's count in what is left — exact
 * when it fits, else in units of `prevQuantum` (a power of two), rounded up (only ever
 * counting more than was granted: stricter). Rounded up, a count of `limit` must still
 * fit: hence the extra bit of quantum. The Redis class rounds the same way, so that both
 * decide alike.
 */
export function wideSlidingBits(
  limit: number,
  windowUs: number,
): { countBits: number; windowBits: number; prevBits: number; prevQuantum: number } {
  const bits = wideWindowBits(limit, windowUs);
  const room = 53 - bits.countBits - bits.windowBits;
  return {
    ...bits,
    prevBits: Math.min(bits.countBits, room),
    prevQuantum: room >= bits.countBits ? 1 : 2 ** (bits.countBits - room + 1),
  };
}

/**
 * Bit budget of a window payload: `counters` count fields of `countBits` bits each, and
 * the rest of the 28-bit payload for the window number modulo 2^windowBits. Count fields
 * are one bit wider than `limit + 2` needs, so the two reserved payload values (all ones
 * and all ones minus one) never occur.
 *
 * The window number is decoded relative to the slot's stamp, which may lag the write by
 * about two stamp periods (2 × 131 ms); the field must cover that many windows either way.
 */
export function windowBits(
  limit: number,
  windowUs: number,
  counters: number,
): { countBits: number; windowBits: number } | null {
  const countBits = 32 - Math.clz32(limit + 2);
  const wBits = 28 - counters * countBits;
  const needed = 3 + (2 * STAMP_US) / windowUs;
  if (wBits < 2 || 2 ** (wBits - 1) < needed) return null;
  return { countBits, windowBits: wBits };
}

/**
 * A window's own options, checked: `windowMs`, then `limit` up to what `counters` count
 * fields and the window number leave room for. Every backend's window classes read them here.
 */
export function readWindowOptions(
  owner: string,
  opts: Record<string, unknown>,
  counters: number,
  wideAllowed = false,
): { limit: number; windowMs: number; wide: boolean } {
  const windowMs = positiveNumberOption(
    owner,
    'windowMs',
    opts.windowMs,
    MIN_WINDOW_MS,
    wideAllowed ? MAX_WIDE_WINDOW_MS : MAX_WINDOW_MS,
  );
  const narrowMax = maxLimitFor(windowMs * 1000, counters);
  const canWiden = wideAllowed && windowMs >= MIN_WIDE_WINDOW_MS;
  const limit = integerOption(owner, 'limit', opts.limit, 1, canWiden ? MAX_WIDE_LIMIT : narrowMax);
  return { limit, windowMs, wide: windowMs > MAX_WINDOW_MS || limit > narrowMax };
}

/** The largest limit `windowBits` accepts for this window (for error messages). */
export function maxLimitFor(windowUs: number, counters: number): number {
  return largestLimit((limit) => windowBits(limit, windowUs, counters) !== null);
}

/**
 * The largest limit up to 2^26 that `fits` (0 if none): a bit budget fits every limit up to
 * some bound and none past it, as the count fields only widen with the limit.
 */
export function largestLimit(fits: (limit: number) => boolean): number {
  let lo = 0;
  let hi = 2 ** 26;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * reconfigure()'s options for a window: `opts` over the current limit and window, checked
 * as the constructor checks them, within the table the limiter has: a narrow one cannot
 * take a wide table's limit or window, a wide one counts windows of 1 ms or more.
 */
export function reconfiguredWindow(
  name: string,
  opts: Record<string, unknown>,
  current: { limit: number; windowMs: number },
  counters: number,
  wideTable: boolean,
  ceiling: number,
): [number, number, number] {
  const merged = { ...current, ...opts };
  if (wideTable && typeof merged.windowMs === 'number' && merged.windowMs < MIN_WIDE_WINDOW_MS) {
    throw rangeError(
      `${name}: option "windowMs" must be at least ${MIN_WIDE_WINDOW_MS} ms for this limiter (created with a wide table, for a large limit or window), got ${show(merged.windowMs)}`,
    );
  }
  const { limit, windowMs, wide } = readWindowOptions(name, merged, counters, true);
  if (wide && !wideTable) {
    const option = windowMs > MAX_WINDOW_MS ? 'windowMs' : 'limit';
    const value = option === 'limit' ? limit : windowMs;
    throw rangeError(
      `${name}: option "${option}" (${show(value)}) needs a wide table (a limit past ${maxLimitFor(windowMs * 1000, counters)} for this window, or a window past ${MAX_WINDOW_MS} ms), and this limiter was created with a narrow one; create it with such a limit or window to reconfigure within them`,
    );
  }
  // The count fields must hold what a key was granted: up to the largest limit the limiter
  // had, as far as the new window leaves room for (counts past it are cut to it).
  const most = wideTable ? MAX_WIDE_LIMIT : maxLimitFor(windowMs * 1000, counters);
  return [limit, windowMs, Math.min(most, Math.max(ceiling, current.limit, limit))];
}
