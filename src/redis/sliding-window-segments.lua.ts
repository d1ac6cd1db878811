import { DRIVER, PRELUDE } from './driver.lua.js';
import { checkSegmentsTag } from './state.lua.js';

/**
 * SlidingWindow with `segments` (src/algorithms/segmented-window.ts): the window split into
 * N segments of S µs aligned to floor(t / S); a request passes when the counts of the last
 * N segments plus its permits are at most the limit. Stored as "segment admitted rejected
 * c1 … cN", where ci counts segment (segment − N + i), with a TTL until the newest segment
 * holding permits has left the window. Redis runs one script at a time, so the counts are
 * plain numbers here; the in-memory ring's rules (a roll keeps the past counts, a refund
 * credits the segment its permits were taken in) give the same answers.
 *
 * ARGV[6…]: limit, segmentUs, segments.
 */
export const SLIDING_WINDOW_SEGMENTS_SCRIPT = `${PRELUDE}
local LIMIT = tonumber(ARGV[6])
local S = tonumber(ARGV[7])
local N = tonumber(ARGV[8])
-- The writer's settings, the state's first word (state.lua.ts segmentsTag()).
local TAG = string.format('g%d/%d', S, N)

local function load()
  local v = redis.call('GET', KEYS[1])
  if not v then return {adm = 0, rej = 0} end
  local w = {}
  for x in string.gmatch(v, '%S+') do w[#w + 1] = x end
  local o = ${checkSegmentsTag('w[1]', 'TAG')}
  local f = {}
  for i = 1 + o, #w do f[i - o] = tonumber(w[i]) end
  local cs = {}
  for i = 1, N do cs[i] = f[3 + i] or 0 end
  return {seg = f[1], adm = f[2], rej = f[3], cs = cs}
end

-- The counts rolled forward to t's segment (or kept, if the clock went back).
local function read(st, t)
  local now = math.floor(t / S)
  local cs = {}
  if not st.seg then
    for i = 1, N do cs[i] = 0 end
    return now, cs
  end
  local cur = math.max(now, st.seg)
  local shift = cur - st.seg
  for i = 1, N do
    if i + shift <= N then cs[i] = st.cs[i + shift] else cs[i] = 0 end
  end
  return cur, cs
end

local function total(cs)
  local u = 0
  for i = 1, N do u = u + cs[i] end
  return u
end

local function fresh(st, t)
  local cur, cs = read(st, t)
  for i = N, 1, -1 do
    if cs[i] > 0 then return math.max(0, (cur + i) * S - t) end
  end
  return 0
end

local function save(st)
  local f = fresh(st, NOW)
  if f <= 0 then
    redis.call('DEL', KEYS[1])
  else
    local parts = {string.format('%s %d %d %d', TAG, st.seg, st.adm, st.rej)}
    for i = 1, N do parts[i + 1] = string.format('%d', st.cs[i]) end
    redis.call('SET', KEYS[1], table.concat(parts, ' '), 'PX', ttlMs(f))
  end
end

local function drop() redis.call('DEL', KEYS[1]) end

local function step(st, t, p)
  local cur, cs = read(st, t)
  if total(cs) + p > LIMIT then return nil end
  cs[N] = cs[N] + p
  return {seg = cur, cs = cs}
end

-- Credit the segment the permits were taken in, if it is still in the window.
local function give(st, t, p, taken)
  local cur, cs = read(st, t)
  local i = math.floor(taken / S) - cur + N
  if i < 1 or i > N or cs[i] == 0 then return nil end
  cs[i] = math.max(0, cs[i] - p)
  return {seg = cur, cs = cs}
end

local function avail(st, t)
  local _, cs = read(st, t)
  return math.max(0, LIMIT - total(cs))
end

-- When enough of the oldest segments holding permits have left the window.
local function est(st, t, p)
  local cur, cs = read(st, t)
  local used = total(cs)
  if used + p <= LIMIT then return 0 end
  for i = 1, N do
    used = used - cs[i]
    if used + p <= LIMIT then return math.max(0, (cur + i) * S - t) end
  end
  return (cur + N) * S - t
end

-- Leased permits count in segment st.seg: spent after it ends they would leave the window
-- a segment late.
local function counted(st, t) return (st.seg + 1) * S - t end

local function hint(st) return 0 end
local function release(st) return {0} end
local function reserve(st) return {0} end
${DRIVER}`;
