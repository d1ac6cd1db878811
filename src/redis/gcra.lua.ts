import { DRIVER, PRELUDE } from './driver.lua.js';
import { decodeState, encodeState } from './state.lua.js';

/**
 * TokenBucket and LeakyBucket (GCRA, src/algorithms/gcra.ts). The state is the theoretical
 * arrival time in units of 1/K of the emission interval, counted from time 0 (the
 * in-memory class counts from its epoch: the same figures when that epoch is 0). Stored as
 * tat, admitted, rejected (state.lua.ts) with a TTL of the time to refill, rounded up to the
 * bucket's step (gcraStepMs(): every script that writes the key rounds the same way, so a
 * single-call script may keep the TTL of a key whose state ends in the same step).
 *
 * ARGV[6…]: K, scale (units per µs), tau (capacity × K), limit, leaky (1/0), queueLimit,
 * step (ms).
 */
export const GCRA_LUA = `${PRELUDE}
local K = tonumber(ARGV[6])
local SCALE = tonumber(ARGV[7])
local TAU = tonumber(ARGV[8])
local LIMIT = tonumber(ARGV[9])
local LEAKY = ARGV[10] == '1'
local QLIMIT = tonumber(ARGV[11])
local STEP_US = tonumber(ARGV[12]) * 1000

local function units(t) return math.floor(t * SCALE) end

local function decode(v)
  local tat, adm, rej
  ${decodeState('v', ['tat', 'adm', 'rej'], 'TokenBucket/LeakyBucket')}
  return {tat = tat, adm = adm, rej = rej}
end

local function load() return getState(KEYS[1], decode) or {adm = 0, rej = 0} end

local function fresh(st, t)
  if not st.tat then return 0 end
  local ahead = st.tat - units(t)
  if ahead > 0 then return ahead / SCALE end
  return 0
end

local function encode(st) return ${encodeState(['st.tat', 'st.adm', 'st.rej'])} end

local function save(st)
  local f = fresh(st, NOW)
  if f <= 0 then
    delKey(KEYS[1])
  else
    -- All three are integers (the TAT counts whole units). The key lives until the end of
    -- the step in which the bucket is full again (tat > units(NOW), so at least 1 ms).
    putState(KEYS[1], st, encode, ttlTo(math.ceil(st.tat / SCALE / STEP_US) * STEP_US))
  end
end

local function drop() delKey(KEYS[1]) end

local function step(st, t, p)
  local now = units(t)
  local base = now
  if st.tat and st.tat > now then base = st.tat end
  local cost = p * K
  local allowance = TAU
  if LEAKY then allowance = cost end
  if base - now + cost > allowance then return nil end
  return {tat = base + cost}
end

local function give(st, t, p, taken)
  if not st.tat then return nil end
  local now = units(t)
  if st.tat <= now then return nil end
  return {tat = math.max(now, st.tat - p * K)}
end

local function avail(st, t)
  if not st.tat then return LIMIT end
  local ahead = math.max(0, st.tat - units(t))
  if LEAKY then
    if ahead == 0 then return LIMIT end
    return 0
  end
  return math.max(0, math.min(LIMIT, math.floor((TAU - ahead) / K)))
end

local function est(st, t, p)
  local now = units(t)
  local tat = now
  if st.tat then tat = math.max(now, st.tat) end
  if LEAKY then return (tat - now) / SCALE end
  return (tat + p * K - TAU - now) / SCALE
end

local function hint(st) return 0 end
local function release(st) return {0} end
`;

/**
 * acquire(): reserve the first time the permits can be had, in the script (FIFO in order
 * of arrival at Redis). Permits waiting ahead, counting this request, may not pass the
 * queue limit: for a token bucket the permits owed past the burst, for a leaky bucket the
 * permits in the bucket. Replies {3, waitUs, now} reserved, or {2, retryAfterUs} full.
 */
const RESERVE = `
local function reserve(st)
  local now = units(NOW)
  local base = now
  if st.tat and st.tat > now then base = st.tat end
  local cost = PERMITS * K
  local waiting
  if LEAKY then
    waiting = math.ceil((base - now) / K) + PERMITS
  else
    waiting = math.ceil((base + cost - TAU - now) / K)
  end
  local r = retryAfter(st, PERMITS)
  if QLIMIT == 0 or waiting > QLIMIT or r == INF then
    st.rej = st.rej + PERMITS
    save(st)
    return {2, fmt(r)}
  end
  local nx = step(st, NOW + r, PERMITS)
  nx.adm = st.adm + PERMITS
  nx.rej = st.rej
  save(nx)
  return {3, fmt(r), fmt(NOW)}
end
`;

export const GCRA_SCRIPT =
  GCRA_LUA + DRIVER.replace('local st = load()', `${RESERVE}\nlocal st = load()`);
