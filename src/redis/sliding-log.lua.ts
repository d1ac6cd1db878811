import { ttlTo } from './compose.lua.js';
import { luaNumber, type Rule } from './rule.js';
import { readCounts, writeCounts } from './state.lua.js';

/** Lua: the grant time logged at index `i` of K1, newest first; a missing one is long expired. */
function entry(i: string): string {
  return `(tonumber(redis.call('LINDEX', K1, ${i})) or -math.huge)`;
}

/**
 * Lua: `local name`, entry(`at`) of the list as saved, without a LINDEX where the script knows
 * it (its first `pushed` entries are NOW's stamp; it holds `size`, math.huge: not known).
 */
function known(at: string, name: string): string {
  return `local ${name}
if ${at} < pushed then
  ${name} = NOW
elseif ${at} >= size then
  ${name} = -math.huge
else
  ${name} = ${entry(at)}
end`;
}

/**
 * SlidingLog (src/algorithms/sliding-log.ts): exact. K1 lists the times the last `limit`
 * permits were granted, newest first (index i: the in-memory ring's head − 1 − i); K2 holds
 * "admitted rejected @version". Both live until the newest entry leaves the window.
 */
export function slidingLogRule(p: {
  readonly limit: number;
  readonly windowUs: number;
  /** The largest limit and window (µs) it had: kept, so a limit raised again counts them all. */
  readonly keep?: number;
  readonly keepUs?: number;
  /** The options version (reconfigure()). */
  readonly version: number;
}): Rule {
  return {
    guarded: true,
    name: 'sliding-log',
    consts: `local LIMIT = ${luaNumber(p.limit)}
local W = ${luaNumber(p.windowUs)}
local KEEP = ${luaNumber(Math.max(p.limit, p.keep ?? 0))}
local KEEP_W = ${luaNumber(Math.max(p.windowUs, p.keepUs ?? 0))}`,
    load: () => `local adm, rej = 0, 0
${readCounts('K2', ['adm', 'rej'], p.version)}
local newest
local pushed, size = 0, math.huge`,
    // After granting x, the last LIMIT entries must lie in the window: the entry just before
    // them (index LIMIT - x) has to have expired. More than LIMIT never fits (a fleet lease
    // may ask more; a negative index would read the list from its oldest end).
    fits: (x) => `${x} <= LIMIT and not (${entry(`LIMIT - ${x}`)} > NOW - W)`,
    // x entries of NOW's stamp, pushed 1000 at a time.
    take: (x) => `local stamp = string.format('%.17g', NOW)
local batch = {}
for i = 1, math.min(${x}, 1000) do batch[i] = stamp end
local left = ${x}
local len
while left > 0 do
  local k = math.min(left, 1000)
  len = redis.call('LPUSH', K1, unpack(batch, 1, k))
  left = left - k
end
if len > KEEP then
  redis.call('LTRIM', K1, 0, KEEP - 1)
  len = KEEP
end
newest, pushed, size = NOW, ${x}, len`,
    fresh: `if not newest then newest = ${entry('0')} end
fresh = math.max(0, newest + W - NOW)`,
    // A refusal leaves the list as it was: its TTL stands. The keys live until the newest
    // entry leaves the largest window the limiter had (its own, unless reconfigured).
    save: `if newest + KEEP_W > NOW then
  local counts = ${writeCounts(['adm', 'rej'], p.version)}
  if SERVER and v and not ok then
    redis.call('SET', K2, counts, 'KEEPTTL')
  else
    local ttl = ${ttlTo('newest + KEEP_W')}
    redis.call('PEXPIRE', K1, ttl)
    redis.call('SET', K2, counts, 'PX', ttl)
  end
else
  redis.call('DEL', K1, K2)
  size = 0
end`,
    avail: `local lo, hi = 0, LIMIT
while lo < hi do
  local mid = math.ceil((lo + hi) / 2)
  ${known('LIMIT - mid', 'e')}
  if e <= NOW - W then lo = mid else hi = mid - 1 end
end
avail = lo`,
    // est(): when the entry LIMIT - P leaves the window; read after the save (which may have
    // deleted a list out of order).
    retry: `${known('LIMIT - P', 'e')}
local function grants(r) return not (e > NOW + r - W) end
local guess = e + W - NOW`,
    // No `counted`: a leased permit counts for W from its grant, spent later for W from its
    // spending. Only entries inside the window are given back. Permits taken at a known time
    // (EXTRA: a block's, a cancelled waiter's) are up to P entries of that stamp, oldest side
    // first, never others (the newest may be another process's); fewer found, the rest stay
    // counted. Permits refunded as taken just now are the newest entries.
    give: (ret) => `if EXTRA ~= '' then
  if TAKEN <= NOW - W then return ${ret(['1'])} end
  redis.call('LREM', K1, -P, string.format('%.17g', TAKEN))
else
  local k = 0
  while k < P and ${entry('k')} > NOW - W do k = k + 1 end
  if k == 0 then return ${ret(['1'])} end
  redis.call('LPOP', K1, k)
end`,
    drop: "redis.call('DEL', K1, K2)",
  };
}
