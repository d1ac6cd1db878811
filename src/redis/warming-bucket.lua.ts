import { DRIVER, PRELUDE } from './driver.lua.js';
import { decodeState, encodeState } from './state.lua.js';

/**
 * WarmingBucket (src/algorithms/warming-bucket.ts): Guava's SmoothWarmingUp with the
 * in-memory class's arithmetic, operation for operation, on plain fields instead of a
 * packed word. Stored as stored quanta, next free time (units since time 0; the in-memory
 * class counts from its epoch: the same figures when that epoch is 0), admitted, rejected
 * (state.lua.ts), with a TTL until the state is cold again; a cold state is no state.
 *
 * ARGV[6…]: stable interval µs, threshold, maxPermits, slope, cool-down µs per permit,
 * quanta per permit, µs per unit, limit, maxQuanta (warmingModel()'s figures).
 */
export const WARMING_BUCKET_SCRIPT = `${PRELUDE}
local S = tonumber(ARGV[6])
local THR = tonumber(ARGV[7])
local MAXP = tonumber(ARGV[8])
local SLOPE = tonumber(ARGV[9])
local COOL = tonumber(ARGV[10])
local QUANTA = tonumber(ARGV[11])
local UNIT = tonumber(ARGV[12])
local LIMIT = tonumber(ARGV[13])
local MAXQ = tonumber(ARGV[14])
local PERUS = 1 / UNIT

local function decode(v)
  local q, nf, adm, rej
  ${decodeState('v', ['q', 'nf', 'adm', 'rej'], 'WarmingBucket')}
  return {q = q, nf = nf, adm = adm, rej = rej}
end

local function load() return getState(KEYS[1], decode) or {adm = 0, rej = 0} end

local function units(t) return math.floor(t * PERUS) end
local function storedOf(st) return math.min(MAXP, st.q / QUANTA) end
local function coldAt(stored, nf) return nf * UNIT + (MAXP - stored) * COOL end

-- Guava's storedPermitsToWaitTime(): the trapezoid above the threshold, the stable
-- interval below it, each part truncated to whole µs.
local function waitUs(stored, take)
  local above = stored - THR
  local us = 0
  if above > 0 then
    local fromAbove = math.min(above, take)
    local length = S + above * SLOPE + (S + (above - fromAbove) * SLOPE)
    us = math.floor(fromAbove * length / 2.0)
    take = take - fromAbove
  end
  return us + math.floor(S * take)
end

-- Guava's reserveEarliestAvailable() at unit time 'at' (nf <= at).
local function take(stored, nf, at, p)
  if at > nf then stored = math.min(MAXP, stored + ((at - nf) * UNIT) / COOL) end
  local spend = math.min(p, stored)
  local w = waitUs(stored, spend) + math.floor((p - spend) * S)
  return {q = math.min(MAXQ, math.ceil((stored - spend) * QUANTA)), nf = at + math.ceil(w * PERUS)}
end

local function fresh(st, t)
  if not st.nf then return 0 end
  return math.max(0, coldAt(storedOf(st), st.nf) - t)
end

local function encode(st)
  return ${encodeState(['st.q', 'st.nf', 'st.adm', 'st.rej'])}
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

-- Pays later: admitted once the previous request's debt is paid.
local function step(st, t, p)
  local now = units(t)
  if st.nf then
    if st.nf > now then return nil end
    local stored = storedOf(st)
    if t < coldAt(stored, st.nf) then return take(stored, st.nf, now, p) end
  end
  return take(MAXP, now, now, p)
end

-- A refund undoes a grant: permits back to storage, the debt shrunk by what taking them
-- from there costs, never to before now; nothing once the debt is paid.
local function give(st, t, p, taken)
  if not st.nf then return nil end
  local now = units(t)
  if st.nf <= now then return nil end
  local stored = storedOf(st)
  local back = math.min(MAXP, stored + p)
  local credit = waitUs(back, back - stored) + math.floor((p - (back - stored)) * S)
  return {q = math.min(MAXQ, math.ceil(back * QUANTA)), nf = math.max(now, st.nf - math.floor(credit * PERUS))}
end

local function avail(st, t)
  if st.nf and st.nf > units(t) then return 0 end
  return LIMIT
end

local function est(st, t, p)
  if not st.nf then return 0 end
  return math.max(0, st.nf * UNIT - t)
end

local function counted(st, t) return INF end
local function hint(st) return 0 end
local function release(st) return {0} end
local function reserve(st) return {0} end
${DRIVER}`;
