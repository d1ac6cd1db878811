import { DRIVER, PRELUDE } from './driver.lua.js';
import { bucketGeometry, decodeState, encodeState, stateBytes } from './state.lua.js';

const GEO = bucketGeometry('K', 'SCALE');

/**
 * Lua: a fast bucket's origin (gcra.lua.ts): origin(t), the origin of a key first written
 * at t, and rebase(e, tat), the origin and TAT of a stored state at NOW — moved forward when
 * its units since the origin pass 2^51, what is ahead kept and one unit added (the rounding
 * of a unit's fraction may move it by less than one: never earlier); a TAT already passed
 * is no TAT. Shared by the driver script and the single-call scripts. Needs SCALE and NOW.
 */
export const GCRA_ORIGIN = `local function origin(t)
  if t * SCALE < 2^51 then return 0 end
  return math.floor(t / 2^36) * 2^36
end
local function rebase(e, tat)
  if (NOW - e) * SCALE < 2^51 then return e, tat end
  local ne = origin(NOW)
  if not tat then return ne, nil end
  local ahead = tat - math.floor((NOW - e) * SCALE)
  if ahead <= 0 then return ne, nil end
  return ne, math.floor((NOW - ne) * SCALE) + ahead + 1
end`;

/**
 * TokenBucket and LeakyBucket (GCRA, src/algorithms/gcra.ts). The state is the theoretical
 * arrival time in units of 1/K of the emission interval, counted from time 0 (the
 * in-memory class counts from its epoch: the same figures when that epoch is 0). Stored as
 * tat, admitted, rejected (state.lua.ts; and the origin, below) with a TTL of the time to refill, rounded up to the
 * bucket's step (gcraStepMs(): every script that writes the key rounds the same way, so a
 * single-call script may keep the TTL of a key whose state ends in the same step).
 *
 * A bucket past 10^6 per second (scale > 1: a unit under 1 µs) cannot count Redis TIME's
 * µs since 1970 in units exactly in a double, so its key counts from an origin of its own,
 * stored as a fourth field: 0 while time in units stays under 2^51 (a ManualClock's: the
 * in-memory figures), else a multiple of 2^36 µs at or before the key's first write. A key
 * kept busy until its units since the origin pass 2^51 (26 days at 10^9 per second) moves
 * its origin forward (rebase()), keeping what is ahead, one unit stricter.
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

-- A fast bucket (a unit under 1 µs) counts from its key's origin (st.e); a slow one from 0.
local FAST = SCALE > 1
local function units(st, t)
  if FAST then return math.floor((t - st.e) * SCALE) end
  return math.floor(t * SCALE)
end
${GCRA_ORIGIN}
-- A state of the other kind from before states carried their settings (version 1: the
-- bucket's rate changed across 10^6 per second; a fast state has four fields, a slow one
-- three) is no state: the key starts afresh. One carrying them (version 2) is checked
-- against this bucket's (state.lua.ts).
local function decode(v)
  local tat, adm, rej, e
  if #v == (FAST and ${stateBytes(3)} or ${stateBytes(4)}) then return nil end
  if FAST then
    ${decodeState('v', ['tat', 'adm', 'rej', 'e'], 'TokenBucket/LeakyBucket', GEO)}
  else
    ${decodeState('v', ['tat', 'adm', 'rej'], 'TokenBucket/LeakyBucket', GEO)}
  end
  return {tat = tat, adm = adm, rej = rej, e = e}
end

local function load()
  local st = getState(KEYS[1], decode)
  if not st then return {adm = 0, rej = 0, e = FAST and origin(NOW) or nil} end
  if FAST then st.e, st.tat = rebase(st.e, st.tat) end
  return st
end

local function fresh(st, t)
  if not st.tat then return 0 end
  local ahead = st.tat - units(st, t)
  if ahead > 0 then return ahead / SCALE end
  return 0
end

local function encode(st)
  if FAST then return ${encodeState(['st.tat', 'st.adm', 'st.rej', 'st.e'], GEO)} end
  return ${encodeState(['st.tat', 'st.adm', 'st.rej'], GEO)}
end

local function save(st)
  local f = fresh(st, NOW)
  if f <= 0 then
    delKey(KEYS[1])
  else
    -- Every field is an integer (the TAT counts whole units). The key lives until the end of
    -- the step in which the bucket is full again (tat > units(NOW), so at least 1 ms).
    putState(KEYS[1], st, encode, ttlTo(math.ceil(((st.e or 0) + st.tat / SCALE) / STEP_US) * STEP_US))
  end
end

local function drop() delKey(KEYS[1]) end

local function step(st, t, p)
  local now = units(st, t)
  local base = now
  if st.tat and st.tat > now then base = st.tat end
  local cost = p * K
  local allowance = TAU
  if LEAKY then allowance = cost end
  if base - now + cost > allowance then return nil end
  return {tat = base + cost, e = st.e}
end

local function give(st, t, p, taken)
  if not st.tat then return nil end
  local now = units(st, t)
  if st.tat <= now then return nil end
  return {tat = math.max(now, st.tat - p * K), e = st.e}
end

local function avail(st, t)
  if not st.tat then return LIMIT end
  local ahead = math.max(0, st.tat - units(st, t))
  if LEAKY then
    if ahead == 0 then return LIMIT end
    return 0
  end
  return math.max(0, math.min(LIMIT, math.floor((TAU - ahead) / K)))
end

local function est(st, t, p)
  local now = units(st, t)
  local tat = now
  if st.tat then tat = math.max(now, st.tat) end
  if LEAKY then return (tat - now) / SCALE end
  return (tat + p * K - TAU - now) / SCALE
end

-- A bucket's leased permits have no window to end: a block is held to blockTtlMs alone.
local function counted(st, t) return INF end
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
  local now = units(st, NOW)
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
