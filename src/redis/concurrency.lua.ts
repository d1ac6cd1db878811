import { ttlTo } from './compose.lua.js';
import { luaNumber, luaString, type Rule } from './rule.js';
import { readCounts, writeCounts } from './state.lua.js';

/**
 * Concurrency: K1 holds "held admitted rejected @version", K2 a sorted set of leases
 * ("id|permits", scored by their expiry in µs), both until the last lease expires. Expired
 * leases are freed by the first call that sees them; whatever frees permits publishes the
 * key's tag (between its braces) on the limiter's channel, so waiting acquire() calls try
 * again. EXTRA is the lease id of a grant or of a lease's release.
 */
export function concurrencyRule(p: {
  readonly limit: number;
  readonly leaseUs: number;
  readonly channel: string;
  /** The options version (reconfigure()). */
  readonly version: number;
}): Rule {
  const counts = writeCounts(['held', 'adm', 'rej'], p.version);
  const save = `if add then
  -- A grant of tryAcquire() or consume() is marked '~': no lease holds it, so release() by
  -- key frees those first, and a lease's own release() still finds its id.
  local id = EXTRA
  if OP == 't' or OP == 'c' then id = '~' .. EXTRA end
  redis.call('ZADD', K2, NOW + LEASE_US, id .. '|' .. add)
end
local last = redis.call('ZRANGE', K2, -1, -1, 'WITHSCORES')
if held <= 0 or #last == 0 then
  redis.call('DEL', K1, K2)
else
  local ms = ${ttlTo('NOW + math.max(1, tonumber(last[2]) - NOW)')}
  redis.call('SET', K1, ${counts}, 'PX', ms)
  redis.call('PEXPIRE', K2, ms)
end
if freed then redis.call('PUBLISH', CHANNEL, tag()) end`;
  return {
    guarded: true,
    name: 'concurrency',
    // free(n): frees n permits: those of tryAcquire()/consume() grants ('~', held by no id)
    // first, then leases, oldest first (a grant split if need be), so that a lease's own
    // release() still finds its permits. The '~' grants are looked for 32 at a time among
    // the first 128 grants: they lead where release(key) is how permits come back, and the
    // search stays bounded where leases are many.
    consts: `local LIMIT = ${luaNumber(p.limit)}
local LEASE_US = ${luaNumber(p.leaseUs)}
local CHANNEL = ${luaString(p.channel)}
local function tag() return string.match(K1, '{([^{}]*)}$') end
local function permitsOf(member) return tonumber(string.match(member, '|(%d+)$')) end
local function free(n)
  local left = n
  -- Frees what left asks of member m (score s): true when part of m stays.
  local function take(m, s)
    local c = permitsOf(m)
    redis.call('ZREM', K2, m)
    local part = c > left
    if part then
      redis.call('ZADD', K2, s, string.match(m, '^(.*)|%d+$') .. '|' .. (c - left))
      c = left
    end
    left = left - c
    return part
  end
  local at = 0
  while left > 0 and at < 128 do
    local batch = redis.call('ZRANGE', K2, at, at + 31, 'WITHSCORES')
    if #batch == 0 then break end
    local kept = 0
    for i = 1, #batch, 2 do
      if not (left > 0 and string.sub(batch[i], 1, 1) == '~') or take(batch[i], batch[i + 1]) then
        kept = kept + 1
      end
    end
    at = at + kept
  end
  while left > 0 do
    local first = redis.call('ZRANGE', K2, 0, 0, 'WITHSCORES')
    if #first == 0 then break end
    take(first[1], first[2])
  end
end`,
    // Written at once when leases expired: a stats() call must not leave the count behind.
    load: () => `local held, adm, rej = 0, 0, 0
local add, freed
${readCounts('K1', ['held', 'adm', 'rej'], p.version)}
local gone = redis.call('ZRANGEBYSCORE', K2, '-inf', NOW)
if #gone > 0 then
  for _, m in ipairs(gone) do held = held - permitsOf(m) end
  held = math.max(0, held)
  redis.call('ZREMRANGEBYSCORE', K2, '-inf', NOW)
  if held == 0 then
    redis.call('DEL', K1)
  else
    redis.call('SET', K1, ${counts}, 'KEEPTTL')
  end
  redis.call('PUBLISH', CHANNEL, tag())
end`,
    fits: (x) => `held + ${x} <= LIMIT`,
    take: (x) => `held = held + ${x}
add = ${x}`,
    fresh: 'if held > 0 then fresh = math.huge end',
    save,
    avail: 'avail = math.max(0, LIMIT - held)',
    retry: `local function grants(r) return false end
local guess = math.huge`,
    // Time until the earliest lease expires (when waiting alone helps), or -1.
    hint: `(function()
  local first = redis.call('ZRANGE', K2, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return math.max(0, tonumber(first[2]) - NOW)
end)()`,
    // refund(): like memory's giveBack, never below zero.
    give: (ret) => `if held == 0 then return ${ret(['1'])} end
local n = math.min(P, held)
free(n)
held, freed = math.max(0, held - n), true`,
    // release(): a lease by id (EXTRA), or permits from the oldest; {-1, held} past held.
    release: (ret) => `if EXTRA ~= '' then
  if redis.call('ZREM', K2, EXTRA .. '|' .. P) ~= 1 then return ${ret(['0'])} end
else
  if held < P then return ${ret(['-1', 'string.format("%.17g", held)'])} end
  free(P)
end
held, freed = math.max(0, held - P), true
${save}
return ${ret(['1'])}`,
    drop: `redis.call('DEL', K1, K2)
redis.call('PUBLISH', CHANNEL, tag())`,
  };
}
