import {
  LEASE_ARGS,
  luaNumber,
  SINGLE_ARGS,
  searchRetry,
  TRY_REPLY,
  toReply,
  ttlTo,
  verdictLua,
  type WindowParams,
} from './single.lua.js';

/**
 * Lua: sliding-log.lua.ts's entry(i), inline: the grant time logged at index `i` (a Lua
 * expression) of KEYS[1], newest first; a missing entry (`false` from Redis) is long expired.
 */
function entry(i: string): string {
  return `(tonumber(redis.call('LINDEX', KEYS[1], ${i})) or -math.huge)`;
}

/**
 * Lua: `local name`, entry(`at`) of the list as saved, from what the script knows of it
 * (`pushed`, `size`) where it can: the same value, without a LINDEX.
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
 * tryAcquire() ('t', replies 1 or 0), consume() ('c', replies as the shared script's 'c')
 * or a fleet lease ('b', replies as the shared script's 'b') of one SlidingLog call, with
 * the limiter's parameters inline: sliding-log.lua.ts's load(), step(), save(), fresh(),
 * avail(), est(), counted() and the driver's retryAfter() and lease, step for step. KEYS[1]
 * is the list of grant times, KEYS[2] "admitted rejected", as that script reads and writes
 * them; the list is read entry by entry (LINDEX) as there, so a reply probes the same
 * entries in the same order and answers alike even of a list out of order.
 *
 * What a call alone saves: the newest entry is not read back after a grant (its stamp is
 * fmt(NOW), which reads back as NOW: '%.17g' round-trips), the list is trimmed only when
 * the push took it past LIMIT entries (every writer trims it to LIMIT), and a refusal, which
 * leaves the list as it was, keeps both keys' TTLs (single.lua.ts saveState(): the TTLs there
 * reach the newest entry's end already).
 */
export function slidingLogSingleScript(op: 't' | 'c' | 'b', p: WindowParams): string {
  const limit = luaNumber(p.limit);
  const lease = op === 'b';
  const timeArg = lease ? 'ARGV[3]' : 'ARGV[2]';
  const head = `-- atomic-limiter:sliding-log-${op === 't' ? 'try' : op === 'c' ? 'consume' : 'lease'}
local W = ${luaNumber(p.windowUs)}
${lease ? LEASE_ARGS : SINGLE_ARGS}
local adm, rej = 0, 0
local v = redis.call('GET', KEYS[2])
if v then
  local a, b = string.match(v, '^(%S+) (%S+)$')
  adm, rej = tonumber(a), tonumber(b)
end
-- step(): after granting x, the last LIMIT entries must lie in the window: the entry just
-- before them (index LIMIT - x) has to have expired.
${verdictLua(lease, (x) => `not (${entry(`${limit} - ${x}`)} > NOW - W)`)}
local newest, len
if ok then
  -- save(): got entries of NOW's stamp, pushed 1000 at a time as there.
  local stamp = string.format('%.17g', NOW)
  local batch = {}
  for i = 1, math.min(got, 1000) do batch[i] = stamp end
  local left = got
  while left > 0 do
    local k = math.min(left, 1000)
    len = redis.call('LPUSH', KEYS[1], unpack(batch, 1, k))
    left = left - k
  end
  if len > ${limit} then
    redis.call('LTRIM', KEYS[1], 0, ${limit} - 1)
    len = ${limit}
  end
  adm = adm + got
  newest = NOW
else
  rej = rej + P
  newest = ${entry('0')}
end
-- fresh(): until the newest entry leaves the window.
local fresh = math.max(0, newest + W - NOW)
if fresh > 0 then
  local counts = string.format('%.17g %.17g', adm, rej)
  if not ${timeArg} and v and not ok then
    redis.call('SET', KEYS[2], counts, 'KEEPTTL')
  else
    local ttl = ${ttlTo('NOW + fresh', p.slackMs)}
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('SET', KEYS[2], counts, 'PX', ttl)
  end
else
  redis.call('DEL', KEYS[1], KEYS[2])
end
`;
  if (op === 't') return `${head}${TRY_REPLY}`;
  return `${head}
-- What is known of the list as saved, and need not be read: its first \`pushed\` entries
-- are NOW's stamp, and it holds \`size\` entries (math.huge: not known).
local pushed, size = 0, math.huge
if fresh <= 0 then
  size = 0
elseif ok then
  pushed, size = got, len
end
-- avail(), of the list as saved: the most permits a grant now could take.
local lo, hi = 0, ${limit}
while lo < hi do
  local mid = math.ceil((lo + hi) / 2)
  ${known(`${limit} - mid`, 'e')}
  if e <= NOW - W then lo = mid else hi = mid - 1 end
end
local avail = lo
${toReply('fresh')}
local now = NOW
${toReply('now')}
${
  // A logged permit's end is its grant's, not its spending's: counted() is INF.
  lease
    ? "if ok then return {1, avail, 0, fresh, now, got, 'inf'} end"
    : 'if ok then return {1, avail, 0, fresh, now} end'
}
-- Refused: the driver's retryAfter() from est(), when the entry LIMIT - P leaves the
-- window; read, like there, after the save (which may have deleted a list out of order).
${known(`${limit} - P`, 'e')}
local function grants(r) return not (e > NOW + r - W) end
${searchRetry('e + W - NOW')}
${toReply('retry')}
return {0, avail, retry, fresh, now, 0}
`;
}
