import { CALL_ARGS, RUN_OP } from './driver.lua.js';

/**
 * The batch form of an algorithm's script: several calls of one limiter decided by one
 * EVALSHA, in order, each exactly as its own EVALSHA would decide it (Redis runs a script
 * atomically, so nothing comes between them). The functions are built once per batch
 * instead of once per call, and the command, the script call and `TIME` are paid once.
 *
 * KEYS: the names of each key the calls touch, once (`nk` names per key, the same count for
 * every call of one limiter). ARGV: 1 the number of runs, 2 `nk`, 3 where the runs start,
 * 4 the TTL slack (the limiter's own), 5 unused, 6… the limiter's parameters (as in the
 * single script), then six per run of equal calls: how many, which key (1 = the first
 * `nk` names), op, time ('' = the server's TIME, read once per batch), permits, extra.
 *
 * The reply holds one entry per call: what the single script replies, or, for a call whose
 * script failed (a `redis.call` error, a wrong key type), the string '!' and the error
 * reply's text. That call alone fails; what it wrote before failing stays written, as it
 * would for its own EVALSHA, and the calls after it are still decided.
 */
export function batchSource(source: string): string {
  const head = source.indexOf(CALL_ARGS);
  const cut = source.lastIndexOf(RUN_OP);
  if (head < 0 || cut < 0 || source.indexOf(CALL_ARGS, head + 1) >= 0) {
    throw new Error('atomic-limiter/redis: a script without the driver cannot be batched');
  }
  // The call's arguments become variables set per call; keys are read from KEY, the
  // current call's slice of KEYS.
  const defs = `${source.slice(0, head)}${BATCH_ARGS}${source.slice(head + CALL_ARGS.length, cut)}`;
  const run = source.slice(cut);
  return `${defs.replaceAll('KEYS[', 'KEY[')}
local function one()${run.replaceAll('KEYS[', 'KEY[')}
end
${BATCH_LOOP}`;
}

// A key holding one state (getState/putState/delKey: buckets, windows) is read from Redis
// and decoded once per batch, and encoded and written back once at its end: what the calls
// in between see is what their own EVALSHA would have read (nothing else runs meanwhile),
// and the last write of each key is what they would leave. Each call gets a copy of the
// state, so that a change it does not save cannot reach the next call.
const BATCH_ARGS = `
local OP, NOW, PERMITS, EXTRA, SLACK_MS
local KEY = {}
local STORE = {}
local function getState(k, decode)
  local e = STORE[k]
  if not e then
    local v = redis.call('GET', k)
    e = {st = v and decode(v)}
    STORE[k] = e
  end
  if not e.st then return nil end
  local c = {}
  for f, x in pairs(e.st) do c[f] = x end
  return c
end
local function putState(k, st, encode, ms)
  STORE[k] = {st = st, enc = encode, ms = ms, dirty = true}
end
local function delKey(k) STORE[k] = {st = false, dirty = true} end
`;

const BATCH_LOOP = `
local runs = tonumber(ARGV[1])
local nk = tonumber(ARGV[2])
local at = tonumber(ARGV[3])
SLACK_MS = tonumber(ARGV[4])
local serverNow
local replies = {}
local done = 0
for i = 0, runs - 1 do
  local a = at + i * 6
  local g = tonumber(ARGV[a + 1]) - 1
  for j = 1, nk do KEY[j] = KEYS[g * nk + j] end
  OP = ARGV[a + 2]
  if ARGV[a + 3] == '' then
    if not serverNow then
      local t = redis.call('TIME')
      serverNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    NOW = serverNow
  else
    NOW = tonumber(ARGV[a + 3])
  end
  PERMITS = tonumber(ARGV[a + 4])
  EXTRA = ARGV[a + 5]
  for c = 1, tonumber(ARGV[a]) do
    local ok, r = pcall(one)
    if ok and type(r) == 'table' and r.err then
      ok, r = false, r.err
    elseif not ok and type(r) == 'table' then
      r = r.err
    end
    if ok and r == nil then ok, r = false, 'ERR the script returned nothing' end
    if not ok then
      r = tostring(r)
      -- A Lua runtime error has no code: give it one, as Redis does for a failed EVALSHA.
      if not string.match(r, '^%u[%u%d_-]* ') then r = 'ERR ' .. r end
      r = '!' .. r
    end
    done = done + 1
    replies[done] = r
  end
end
for k, e in pairs(STORE) do
  if e.dirty then
    if e.st then
      redis.call('SET', k, e.enc(e.st), 'PX', e.ms)
    else
      redis.call('DEL', k)
    end
  end
end
return replies
`;
