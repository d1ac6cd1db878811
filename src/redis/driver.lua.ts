/**
 * The Lua every script shares, around one algorithm's functions. An algorithm defines
 * `load()`, `save(st)`, `drop()`, `step(st, t, p)`, `give(st, t, p, taken)`, `avail(st, t)`,
 * `fresh(st, t)` and `est(st, t, p)`: the same functions, with the same arithmetic, as the
 * in-memory class (src/algorithms/*.ts), on plain fields instead of a packed word. `t` is
 * microseconds; nothing here rounds except where the in-memory class rounds. One more, for
 * fleet mode's leases ('b'): `counted(st, t)`, the µs from `t` that permits just granted
 * keep counting in the window they were counted in (a window's end; INF where no end makes
 * a block exact: buckets and the log, README "Fleet mode").
 *
 * ARGV: 1 op ('t' tryAcquire, 'c' consume, 'w' a waiter's try, 'q' reserve, 'r' refund,
 * 'l' release, 'b' a fleet block, 's' stats, 'x' reset), 2 time in µs ('' = the server's TIME), 3 permits, 4 extra (a refund's taking
 * time, or a lease id), 5 extra TTL in ms (slack for a ManualClock), 6… the algorithm's
 * parameters. Numbers go back as strings ('%.17g' round-trips a double; Redis would
 * truncate a Lua number to an integer).
 */
export const CALL_ARGS = `
local OP = ARGV[1]
local NOW
if ARGV[2] == '' then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  NOW = tonumber(ARGV[2])
end
local PERMITS = tonumber(ARGV[3])
local EXTRA = ARGV[4]
local SLACK_MS = tonumber(ARGV[5])
-- A key holding one state as a string (buckets, windows) is read and written through
-- these (the algorithm's decode and encode), which the batch form replaces by a cache of
-- decoded states written back once per batch.
local function getState(k, decode)
  local v = redis.call('GET', k)
  if v then return decode(v) end
  return nil
end
local function putState(k, st, encode, ms) redis.call('SET', k, encode(st), 'PX', ms) end
local function delKey(k) redis.call('DEL', k) end
`;

/** What every script shares after its call's arguments (the batch script too). */
const HELPERS = `local INF = math.huge
local function fmt(x) return string.format('%.17g', x) end
-- A figure for the reply: integers as integer replies (exact), the rest as '%.17g' strings.
local function out(x)
  if x == math.floor(x) and x > -9e15 and x < 9e15 then return x end
  return fmt(x)
end
-- A TTL (ms) that lasts until endUs (µs on NOW's clock). Redis adds it to its own ms clock
-- when the write runs, which may still be in NOW's ms (or, counting from the script's
-- start, the one before): so from NOW's whole ms, plus 1. From NOW itself (ceil(us / 1000))
-- it could end up to a ms before endUs, and a key gone early forgets what it counted.
-- At most 2^53 ms (285 000 years): Redis writes a number as '%.17g', and 1e17 and more
-- would reach PX as '1e+17', which it refuses.
local function ttlTo(endUs)
  return math.min(9007199254740992, math.ceil(endUs / 1000) - math.floor(NOW / 1000) + 1 + SLACK_MS)
end
local function ttlMs(us) return ttlTo(NOW + us) end
`;

/** The head of every algorithm's script: one call's arguments, then the shared helpers. */
export const PRELUDE = CALL_ARGS + HELPERS;

/** Where the driver stops defining functions and runs the op (the batch script's cut). */
export const RUN_OP = '\nlocal st = load()\n';

/** Runs the op. The retry search is the in-memory Limiter.retryAfterUs(), step for step. */
export const DRIVER = `
local function retryAfter(st, p)
  local guess = est(st, NOW, p)
  -- Past 2^52 µs whole µs are not all doubles: the search would never end (as in memory).
  if guess ~= guess or guess > 4503599627370496 then return INF end
  local function ok(r) return step(st, NOW + r, p) ~= nil end
  local hi = math.max(0, math.ceil(guess))
  local lo = 0
  if ok(hi) then
    if hi == 0 or not ok(hi - 1) then return hi end
  else
    local s = 1
    repeat
      lo = hi + 1
      hi = hi + s
      s = s * 2
      if hi > 4503599627370496 then return INF end
    until ok(hi)
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ok(mid) then hi = mid else lo = mid + 1 end
  end
  return hi
end

local st = load()
if OP == 't' then
  -- tryAcquire(): the verdict alone, nothing else computed.
  local nx = step(st, NOW, PERMITS)
  if nx then
    nx.adm = st.adm + PERMITS
    nx.rej = st.rej
    save(nx)
    return 1
  end
  st.rej = st.rej + PERMITS
  save(st)
  return 0
elseif OP == 'c' or OP == 'w' or OP == 'q' then
  local nx = step(st, NOW, PERMITS)
  if nx then
    nx.adm = st.adm + PERMITS
    nx.rej = st.rej
    save(nx)
    return {1, out(avail(nx, NOW)), 0, out(fresh(nx, NOW)), out(NOW)}
  end
  if OP == 'q' then return reserve(st) end
  -- A caller about to wait ('w') is not refused: only count real refusals.
  if OP == 'c' then st.rej = st.rej + PERMITS end
  save(st)
  return {0, out(avail(st, NOW)), out(retryAfter(st, PERMITS)), out(fresh(st, NOW)), out(NOW),
    out(hint(st))}
elseif OP == 'b' then
  -- Fleet mode: lease a block, up to PERMITS and at least EXTRA (step is monotone in p, so the
  -- largest grantable p is found by bisection). Replies as 'c' with the count granted, then
  -- how long the permits granted keep counting where they were counted (counted()), last.
  -- The whole block first: a hot key that is not limited (the case leases are for) takes
  -- one step, not a bisection's seven.
  local least = tonumber(EXTRA)
  local lo = PERMITS
  local nx = step(st, NOW, PERMITS)
  if not nx then
    if not step(st, NOW, least) then
      st.rej = st.rej + least
      save(st)
      return {0, out(avail(st, NOW)), out(retryAfter(st, least)), out(fresh(st, NOW)), out(NOW), 0}
    end
    local hi = PERMITS - 1
    lo = least
    while lo < hi do
      local mid = math.floor((lo + hi + 1) / 2)
      if step(st, NOW, mid) then lo = mid else hi = mid - 1 end
    end
    nx = step(st, NOW, lo)
  end
  nx.adm = st.adm + lo
  nx.rej = st.rej
  save(nx)
  return {1, out(avail(nx, NOW)), 0, out(fresh(nx, NOW)), out(NOW), lo, out(counted(nx, NOW))}
elseif OP == 'r' then
  local taken = NOW
  if EXTRA ~= '' then taken = tonumber(EXTRA) end
  local nx = give(st, NOW, PERMITS, taken)
  if nx then
    nx.adm = st.adm
    nx.rej = st.rej
    save(nx)
  end
  return {1}
elseif OP == 'l' then
  return release(st)
elseif OP == 's' then
  return {out(avail(st, NOW)), out(st.adm), out(st.rej)}
elseif OP == 'x' then
  drop()
  return {1}
end
return redis.error_reply('atomic-limiter: unknown op ' .. tostring(OP))
`;
