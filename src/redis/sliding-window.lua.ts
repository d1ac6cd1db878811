import { DRIVER, PRELUDE } from './driver.lua.js';
import { decodeState, encodeState, windowGeometry } from './state.lua.js';

const GEO = windowGeometry('W', 'Q');

/**
 * Lua: whether a previous window weighing `wp` (its count times the part of the window
 * still ahead, in µs) and `used` permits of the current window fit in `limit` permits per
 * `w` µs — the in-memory class's test, narrow and wide (src/algorithms/sliding-window.ts
 * step() and stepWide()), operation for operation so that doubles round alike. While
 * limit × w < 2^53 (`exact`) the products are exact; past it the weighted count is
 * compared in doubles, held a hair stricter than its rounding error (relative 2^-52).
 * `exact` is known (a single-call script) or a Lua boolean read at run time.
 */
export function fitsLua(
  wp: string,
  used: string,
  limit: string,
  w: string,
  exact: boolean | string,
): string {
  const exactTest = `${wp} + (${used}) * ${w} <= ${limit} * ${w}`;
  const wideTest = `(${used}) <= ${limit} and ${wp} / ${w} <= (${limit} - (${used})) * (1 - 2^-40)`;
  if (exact === true) return exactTest;
  if (exact === false) return wideTest;
  return `(${exact} and ${exactTest}) or (not ${exact} and ${wideTest})`;
}

/**
 * Lua: a wide window's stored previous count `x` as it is read, rounded up to a multiple of
 * the quantum `q`, never past `limit` (wideSlidingBits()).
 */
export function storedPrevLua(x: string, limit: string, q: string): string {
  return `math.min(${limit}, math.ceil(${x} / ${q}) * ${q})`;
}

/**
 * SlidingWindow (src/algorithms/sliding-window.ts): the two-window counter,
 * prev × (1 − elapsed / windowUs) + curr + permits ≤ limit, computed multiplied by windowUs
 * as in memory so that every figure is exact in doubles — while limit × windowUs is below
 * 2^53. Past that (a wide window: millions per day) the weighted count is compared in
 * doubles, held a hair stricter than its rounding error, exactly as the in-memory wide
 * table does (fitsLua()). Stored as window, prev, curr, admitted, rejected (state.lua.ts)
 * with a TTL until both windows are empty.
 *
 * A wide window's previous count is rounded up to a multiple of its quantum when read, as
 * the in-memory wide table keeps it (wideSlidingBits()): 1 — exact — below 2^24 permits per
 * window of a second or more.
 *
 * ARGV[6…]: limit, windowUs, the previous count's quantum.
 */
export const SLIDING_WINDOW_SCRIPT = `${PRELUDE}
local LIMIT = tonumber(ARGV[6])
local W = tonumber(ARGV[7])
local EXACT = LIMIT * W < 2^53
local Q = tonumber(ARGV[8])

-- Whether a previous window weighing wp (times W) and \`used\` permits in this one fit.
local function fits(wp, used)
  return ${fitsLua('wp', 'used', 'LIMIT', 'W', 'EXACT')}
end

local function decode(v)
  local win, prev, curr, adm, rej
  ${decodeState('v', ['win', 'prev', 'curr', 'adm', 'rej'], 'SlidingWindow', GEO)}
  return {win = win, prev = prev, curr = curr, adm = adm, rej = rej}
end

local function load() return getState(KEYS[1], decode) or {adm = 0, rej = 0} end

-- The counters rolled forward to t's window.
local function read(st, t)
  local now = math.floor(t / W)
  if not st.win then return now, 0, 0 end
  if st.win >= now then
    if Q > 1 then return st.win, ${storedPrevLua('st.prev', 'LIMIT', 'Q')}, st.curr end
    return st.win, st.prev, st.curr
  end
  if st.win == now - 1 then return now, st.curr, 0 end
  return now, 0, 0
end

local function weighted(win, prev, t)
  local elapsed = math.max(0, t - win * W)
  return prev * math.max(0, W - elapsed)
end

local function fresh(st, t)
  local win, prev, curr = read(st, t)
  if curr > 0 then return (win + 2) * W - t end
  if prev > 0 then return math.max(0, (win + 1) * W - t) end
  return 0
end

local function encode(st)
  return ${encodeState(['st.win', 'st.prev', 'st.curr', 'st.adm', 'st.rej'], GEO)}
end

local function save(st)
  local f = fresh(st, NOW)
  if f <= 0 then
    delKey(KEYS[1])
  else
    putState(KEYS[1], st, encode, ttlMs(f))
  end
end

local function drop() delKey(KEYS[1]) end

local function step(st, t, p)
  local win, prev, curr = read(st, t)
  if not fits(weighted(win, prev, t), curr + p) then return nil end
  return {win = win, prev = prev, curr = curr + p}
end

-- Credit the window the permits were taken in (the current or the previous one).
local function give(st, t, p, taken)
  local win, prev, curr = read(st, t)
  local tw = math.floor(taken / W)
  if tw == win and curr > 0 then
    return {win = win, prev = prev, curr = math.max(0, curr - p)}
  elseif tw == win - 1 and prev > 0 then
    return {win = win, prev = math.max(0, prev - p), curr = curr}
  end
  return nil
end

local function avail(st, t)
  local win, prev, curr = read(st, t)
  local used = weighted(win, prev, t) / W + curr
  return math.max(0, math.floor(LIMIT - used))
end

local function est(st, t, p)
  local win, prev, curr = read(st, t)
  local start = win * W
  if curr + p <= LIMIT then
    if prev == 0 then return 0 end
    return start + W - ((LIMIT - curr - p) * W) / prev - t
  end
  local e = W - ((LIMIT - p) * W) / curr
  return start + W + math.max(0, e) - t
end

-- Leased permits count in st.win's current count: spent after that window ends they would
-- weigh as the previous window's, less and less.
local function counted(st, t) return (st.win + 1) * W - t end

local function hint(st) return 0 end
local function release(st) return {0} end
local function reserve(st) return {0} end
${DRIVER}`;
