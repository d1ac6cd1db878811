import { DRIVER, PRELUDE } from './driver.lua.js';
import { decodeState, encodeState } from './state.lua.js';

/**
 * SlidingWindow (src/algorithms/sliding-window.ts): the two-window counter,
 * prev × (1 − elapsed / windowUs) + curr + permits ≤ limit, computed multiplied by windowUs
 * as in memory so that every figure is exact in doubles. Stored as window, prev, curr,
 * admitted, rejected (state.lua.ts) with a TTL until both windows are empty.
 *
 * ARGV[6…]: limit, windowUs.
 */
export const SLIDING_WINDOW_SCRIPT = `${PRELUDE}
local LIMIT = tonumber(ARGV[6])
local W = tonumber(ARGV[7])

local function decode(v)
  local win, prev, curr, adm, rej
  ${decodeState('v', ['win', 'prev', 'curr', 'adm', 'rej'], 'SlidingWindow')}
  return {win = win, prev = prev, curr = curr, adm = adm, rej = rej}
end

local function load() return getState(KEYS[1], decode) or {adm = 0, rej = 0} end

-- The counters rolled forward to t's window.
local function read(st, t)
  local now = math.floor(t / W)
  if not st.win then return now, 0, 0 end
  if st.win >= now then return st.win, st.prev, st.curr end
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
  return ${encodeState(['st.win', 'st.prev', 'st.curr', 'st.adm', 'st.rej'])}
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
  if weighted(win, prev, t) + (curr + p) * W > LIMIT * W then return nil end
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

local function hint(st) return 0 end
local function release(st) return {0} end
local function reserve(st) return {0} end
${DRIVER}`;
