import { DRIVER, PRELUDE } from './driver.lua.js';

/**
 * Concurrency: KEYS[1] holds "held admitted rejected", KEYS[2] a sorted set of leases
 * ("id|permits", scored by their expiry in µs). Expired leases are dropped, and their
 * permits freed, by the first call that sees them; whatever frees permits publishes the
 * key's tag on the limiter's channel so waiting acquire() calls try again. Both keys live
 * until the last lease expires.
 *
 * ARGV[4] is the lease id of a grant or of a lease's release; ARGV[6…]: limit, leaseUs,
 * channel.
 */
export const CONCURRENCY_SCRIPT = `${PRELUDE}
local LIMIT = tonumber(ARGV[6])
local LEASE_US = tonumber(ARGV[7])
local CHANNEL = ARGV[8]
-- The key's tag, published when permits free up: read from the key's name (between its
-- braces), so the parameters are the limiter's alone and one batch serves many keys.
local function tag() return string.match(KEYS[1], '{([^{}]*)}$') end

local function permitsOf(member) return tonumber(string.match(member, '|(%d+)$')) end

local function load()
  local v = redis.call('GET', KEYS[1])
  local st = {held = 0, adm = 0, rej = 0}
  if v then
    local a, b, c = string.match(v, '^(%S+) (%S+) (%S+)$')
    st = {held = tonumber(a), adm = tonumber(b), rej = tonumber(c)}
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', NOW)
  if #gone > 0 then
    for _, m in ipairs(gone) do st.held = st.held - permitsOf(m) end
    st.held = math.max(0, st.held)
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', NOW)
    -- Written at once: ops that only read (stats) must not leave the count behind.
    if st.held == 0 then
      redis.call('DEL', KEYS[1])
    else
      redis.call('SET', KEYS[1], fmt(st.held) .. ' ' .. fmt(st.adm) .. ' ' .. fmt(st.rej),
        'KEEPTTL')
    end
    redis.call('PUBLISH', CHANNEL, tag())
  end
  return st
end

local function fresh(st, t)
  if st.held == 0 then return 0 end
  return INF
end

local function save(st)
  if st.add then
    -- A grant of tryAcquire() or consume() is marked '~': no lease holds it, so release()
    -- by key frees those first, and a lease's own release() still finds its id.
    local id = EXTRA
    if OP == 't' or OP == 'c' then id = '~' .. EXTRA end
    redis.call('ZADD', KEYS[2], NOW + LEASE_US, id .. '|' .. st.add)
  end
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if st.held <= 0 or #last == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  else
    local ms = ttlMs(math.max(1, tonumber(last[2]) - NOW))
    redis.call('SET', KEYS[1], fmt(st.held) .. ' ' .. fmt(st.adm) .. ' ' .. fmt(st.rej), 'PX', ms)
    redis.call('PEXPIRE', KEYS[2], ms)
  end
  if st.freed then redis.call('PUBLISH', CHANNEL, tag()) end
end

local function drop()
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', CHANNEL, tag())
end

local function step(st, t, p)
  if st.held + p > LIMIT then return nil end
  return {held = st.held + p, add = p}
end

-- Frees up to p permits: those of tryAcquire()/consume() grants ('~') first, then leases,
-- each from the one granted first (a grant is split if need be). (A lease whose permits
-- release(key) took would free nothing on its own release(), and a grant nobody holds by
-- id would stay held until it expires.) The '~' grants are looked for 32 at a time, in
-- grant order, among the first 128 grants: they lead where release(key) is how permits
-- come back, and the search stays bounded where leases are many (past it, the oldest go).
local function free(st, p)
  local left = p
  local at = 0
  while left > 0 and at < 128 do
    local batch = redis.call('ZRANGE', KEYS[2], at, at + 31, 'WITHSCORES')
    if #batch == 0 then break end
    local kept = 0
    for i = 1, #batch, 2 do
      local m = batch[i]
      if left > 0 and string.sub(m, 1, 1) == '~' then
        local n = permitsOf(m)
        redis.call('ZREM', KEYS[2], m)
        if n > left then
          local id = string.match(m, '^(.*)|%d+$')
          redis.call('ZADD', KEYS[2], batch[i + 1], id .. '|' .. (n - left))
          kept = kept + 1
          n = left
        end
        left = left - n
      else
        kept = kept + 1
      end
    end
    at = at + kept
  end
  while left > 0 do
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if #first == 0 then break end
    local n = permitsOf(first[1])
    redis.call('ZREM', KEYS[2], first[1])
    if n > left then
      local id = string.match(first[1], '^(.*)|%d+$')
      redis.call('ZADD', KEYS[2], first[2], id .. '|' .. (n - left))
      n = left
    end
    left = left - n
  end
  return {held = math.max(0, st.held - p), adm = st.adm, rej = st.rej, freed = true}
end

-- refund(): like memory's giveBack, never below zero.
local function give(st, t, p, taken)
  if st.held == 0 then return nil end
  return free(st, math.min(p, st.held))
end

local function avail(st, t) return LIMIT - st.held end
local function est(st, t, p) return INF end

-- Time until the earliest lease expires (when waiting alone helps), or -1.
local function hint(st)
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return math.max(0, tonumber(first[2]) - NOW)
end

-- release(): a lease by id (ARGV[4]), or permits from the oldest leases; {-1, held} when
-- more are released than held.
local function release(st)
  if EXTRA ~= '' then
    local member = EXTRA .. '|' .. PERMITS
    if redis.call('ZREM', KEYS[2], member) == 1 then
      save({held = math.max(0, st.held - PERMITS), adm = st.adm, rej = st.rej, freed = true})
      return {1}
    end
    return {0}
  end
  if st.held < PERMITS then
    return {-1, fmt(st.held)}
  end
  save(free(st, PERMITS))
  return {1}
end

local function reserve(st) return {0} end
${DRIVER}`;
