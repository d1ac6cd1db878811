/**
 * tryAcquire() on TokenBucket / LeakyBucket: the hot path as a script of its own, without
 * the shared driver's functions, since Redis builds every function of a script on each run
 * and that dominated the cost. The arithmetic is GCRA_LUA's step() and save(), inline.
 * Replies 1 (granted) or 0.
 *
 * ARGV as the shared scripts: 1 op (unused), 2 time, 3 permits, 4 extra, 5 slack, 6 K,
 * 7 scale, 8 tau, 9 limit, 10 leaky.
 */
export const GCRA_TRY_SCRIPT = `
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local permits = tonumber(ARGV[3])
local K = tonumber(ARGV[6])
local scale = tonumber(ARGV[7])
local tau = tonumber(ARGV[8])
local u = math.floor(now * scale)
local tat, adm, rej = u, 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local a, b, c = string.match(v, '^(%S+) (%S+) (%S+)$')
  tat, adm, rej = tonumber(a), tonumber(b), tonumber(c)
end
local base = u
if tat > u then base = tat end
local cost = permits * K
local allowance = tau
if ARGV[10] == '1' then allowance = cost end
local ok = base - u + cost <= allowance
if ok then
  tat = base + cost
  adm = adm + permits
else
  rej = rej + permits
end
if tat > u then
  local ms = math.ceil((tat - u) / scale / 1000) + tonumber(ARGV[5])
  redis.call('SET', KEYS[1], string.format('%d %d %d', tat, adm, rej), 'PX', ms)
else
  redis.call('DEL', KEYS[1])
end
if ok then return 1 end
return 0
`;
