import {
  LEASE_ARGS,
  luaNumber,
  SINGLE_ARGS,
  saveOrDelete,
  saveState,
  searchRetry,
  TRY_REPLY,
  toReply,
  ttlTo,
  verdictLua,
  WINDOW_LEASE_REPLY,
  type WindowParams,
} from './single.lua.js';
import { decodeState, encodeState, windowGeometry } from './state.lua.js';

const GEO = windowGeometry('W');

/**
 * tryAcquire() ('t', replies 1 or 0), consume() ('c', replies as the shared script's 'c')
 * or a fleet lease ('b', replies as the shared script's 'b') of one FixedWindow call, with
 * the limiter's parameters inline: fixed-window.lua.ts's read(), step(), save(), counted()
 * and the driver's retryAfter() and lease, step for step. The key holds window, count,
 * admitted, rejected (state.lua.ts), as fixed-window.lua.ts reads and writes it.
 */
export function fixedWindowSingleScript(op: 't' | 'c' | 'b', p: WindowParams): string {
  const limit = luaNumber(p.limit);
  const lease = op === 'b';
  const head = `-- atomic-limiter:fixed-window-${op === 't' ? 'try' : op === 'c' ? 'consume' : 'lease'}
local W = ${luaNumber(p.windowUs)}
${lease ? LEASE_ARGS : SINGLE_ARGS}
local sw, sc, adm, rej
local v = redis.call('GET', KEYS[1])
if v then
  ${decodeState('v', ['sw', 'sc', 'adm', 'rej'], 'FixedWindow', GEO)}
else
  adm, rej = 0, 0
end
-- read(): the window the state counts in (a later stored one: the clock went back).
local win = math.floor(NOW / W)
local count = 0
-- The stored state's window: its key's TTL reaches that window's end (a stored state
-- counts something: one with nothing to count is deleted).
local stored = sw
if sw and sw >= win then win, count = sw, sc end
${verdictLua(lease, (x) => `count + ${x} <= ${limit}`)}
if ok then
  count = count + got
  adm = adm + got
  sw, sc = win, count
else
  rej = rej + P
end
-- save(): the key lives until its window ends, or goes; in the stored state's window the
-- TTL is already that.
${saveOrDelete(
  'count > 0',
  saveState(
    encodeState(['sw', 'sc', 'adm', 'rej'], GEO),
    'stored == win',
    ttlTo('(win + 1) * W', p.slackMs),
    lease ? 'ARGV[3]' : 'ARGV[2]',
  ),
)}
`;
  if (op === 't') return `${head}${TRY_REPLY}`;
  return `${head}
local avail = ${limit} - count
local fresh = 0
if count > 0 then fresh = (win + 1) * W - NOW end
${toReply('fresh')}
local now = NOW
${toReply('now')}
${lease ? WINDOW_LEASE_REPLY : 'if ok then return {1, avail, 0, fresh, now} end'}
-- Refused: the driver's retryAfter(), the least µs r at which step(NOW + r) grants.
local function grants(r)
  local w = math.floor((NOW + r) / W)
  local n = 0
  if sw and sw >= w then n = sc end
  return n + P <= ${limit}
end
${searchRetry('(win + 1) * W - NOW')}
${toReply('retry')}
return {0, avail, retry, fresh, now, 0}
`;
}
