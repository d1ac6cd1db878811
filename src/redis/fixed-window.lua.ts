import { DRIVER, PRELUDE } from './driver.lua.js';
import { decodeState, encodeState, windowGeometry } from './state.lua.js';

const GEO = windowGeometry('W');

/**
 * FixedWindow (src/algorithms/fixed-window.ts): windows aligned to floor(t / windowUs).
 * Stored as window, count, admitted, rejected (state.lua.ts) with a TTL of the rest of the
 * window.
 *
 * ARGV[6…]: limit, windowUs.
 */
export const FIXED_WINDOW_SCRIPT = `${PRELUDE}
local LIMIT = tonumber(ARGV[6])
local W = tonumber(ARGV[7])

local function decode(v)
  local win, count, adm, rej
  ${decodeState('v', ['win', 'count', 'adm', 'rej'], 'FixedWindow', GEO)}
  return {win = win, count = count, adm = adm, rej = rej}
end

local function load() return getState(KEYS[1], decode) or {adm = 0, rej = 0} end

-- The window the state counts in (>= the current one) and its count; 0 if stale.
local function read(st, t)
  local win = math.floor(t / W)
  if not st.win then return win, 0 end
  -- A stored window later than now means the clock went back: keep counting in it.
  if st.win >= win then return st.win, st.count end
  return win, 0
end

local function fresh(st, t)
  local win, count = read(st, t)
  if count == 0 then return 0 end
  return (win + 1) * W - t
end

local function encode(st)
  return ${encodeState(['st.win', 'st.count', 'st.adm', 'st.rej'], GEO)}
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
  local win, count = read(st, t)
  if count + p > LIMIT then return nil end
  return {win = win, count = count + p}
end

-- Permits go back to the window they were taken in; from a window that has passed, nowhere.
local function give(st, t, p, taken)
  local win, count = read(st, t)
  if count == 0 or math.floor(taken / W) ~= win then return nil end
  return {win = win, count = math.max(0, count - p)}
end

local function avail(st, t)
  local _, count = read(st, t)
  return LIMIT - count
end

local function est(st, t, p)
  local win = read(st, t)
  return (win + 1) * W - t
end

-- Leased permits count in st.win: spent after it ends they would be spent in the next one.
local function counted(st, t) return (st.win + 1) * W - t end

local function hint(st) return 0 end
local function release(st) return {0} end
local function reserve(st) return {0} end
${DRIVER}`;
