import { DRIVER, PRELUDE } from './driver.lua.js';

/**
 * SlidingLog (src/algorithms/sliding-log.ts): exact. KEYS[1] is a list of the times the
 * last `limit` permits were granted, newest first (one entry per permit, like the
 * in-memory ring); KEYS[2] holds "admitted rejected". Index i is the in-memory log
 * position head − 1 − i; a missing entry is long expired. Both keys live until the newest
 * entry leaves the window.
 *
 * ARGV[6…]: limit, windowUs.
 */
export const SLIDING_LOG_SCRIPT = `${PRELUDE}
local LIMIT = tonumber(ARGV[6])
local W = tonumber(ARGV[7])

local function entry(i)
  local v = redis.call('LINDEX', KEYS[1], i)
  if v then return tonumber(v) end
  return -INF
end

local function load()
  local v = redis.call('GET', KEYS[2])
  if not v then return {adm = 0, rej = 0} end
  local a, b = string.match(v, '^(%S+) (%S+)$')
  return {adm = tonumber(a), rej = tonumber(b)}
end

local function fresh(st, t)
  local newest = entry(0)
  if newest == -INF then return 0 end
  return math.max(0, newest + W - t)
end

local function save(st)
  if st.push then
    local stamp = fmt(NOW)
    local batch = {}
    for i = 1, math.min(st.push, 1000) do batch[i] = stamp end
    local left = st.push
    while left > 0 do
      local n = math.min(left, 1000)
      redis.call('LPUSH', KEYS[1], unpack(batch, 1, n))
      left = left - n
    end
    redis.call('LTRIM', KEYS[1], 0, LIMIT - 1)
  elseif st.pop then
    redis.call('LPOP', KEYS[1], st.pop)
  elseif st.rem then
    redis.call('LREM', KEYS[1], -st.rem, st.stamp)
  end
  local f = fresh(st, NOW)
  if f <= 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  else
    redis.call('PEXPIRE', KEYS[1], ttlMs(f))
    redis.call('SET', KEYS[2], fmt(st.adm) .. ' ' .. fmt(st.rej), 'PX', ttlMs(f))
  end
end

local function drop() redis.call('DEL', KEYS[1], KEYS[2]) end

-- After granting, the last LIMIT entries must lie in the window: the entry just before
-- them (index LIMIT - p) has to have expired.
local function step(st, t, p)
  if entry(LIMIT - p) > t - W then return nil end
  return {push = p}
end

-- Only entries still inside the window count against the limit; give those back. The next
-- grants push their own times (a refunded entry's older time is never reused). Permits
-- taken at a known time (EXTRA: a fleet block's, a cancelled waiter's) are entries of that
-- stamp (fmt() of the same double: the reply's NOW, read back): up to p of them go, from
-- the oldest side, never other entries (the newest may be another process's, and dropping
-- them would free room ahead of the window). Fewer found (a block's permits of two leases
-- share the older stamp): the rest stay counted, the safe direction. Permits refunded as
-- taken just now (no EXTRA) are the newest entries, as in memory.
local function give(st, t, p, taken)
  if EXTRA ~= '' then
    if taken <= t - W then return nil end
    return {rem = p, stamp = fmt(taken)}
  end
  local k = 0
  while k < p and entry(k) > t - W do k = k + 1 end
  if k == 0 then return nil end
  return {pop = k}
end

local function avail(st, t)
  local lo = 0
  local hi = LIMIT
  while lo < hi do
    local mid = math.ceil((lo + hi) / 2)
    if entry(LIMIT - mid) <= t - W then lo = mid else hi = mid - 1 end
  end
  return lo
end

local function est(st, t, p)
  return entry(LIMIT - p) + W - t
end

-- A logged permit counts for W from its grant, but spent later it would count for W from
-- its spending: no end of a block makes that exact. A block is held to blockTtlMs alone.
local function counted(st, t) return INF end

local function hint(st) return 0 end
local function release(st) return {0} end
local function reserve(st) return {0} end
${DRIVER}`;
