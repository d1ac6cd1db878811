import {
  luaNumber,
  SINGLE_ARGS,
  saveState,
  searchRetry,
  toReply,
  ttlTo,
  type WindowParams,
} from './single.lua.js';
import { decodeState, encodeState } from './state.lua.js';

/**
 * tryAcquire() ('t', replies 1 or 0) or consume() ('c', replies as the shared script's
 * 'c') of one FixedWindow call, with the limiter's parameters inline: fixed-window.lua.ts's
 * read(), step(), save() and the driver's retryAfter(), step for step. The key holds
 * window, count, admitted, rejected (state.lua.ts), as fixed-window.lua.ts reads and writes it.
 */
export function fixedWindowSingleScript(op: 't' | 'c', p: WindowParams): string {
  const limit = luaNumber(p.limit);
  const head = `-- atomic-limiter:fixed-window-${op === 't' ? 'try' : 'consume'}
local W = ${luaNumber(p.windowUs)}
${SINGLE_ARGS}
local sw, sc, adm, rej
local v = redis.call('GET', KEYS[1])
if v then
  ${decodeState('v', ['sw', 'sc', 'adm', 'rej'], 'FixedWindow')}
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
local ok = count + P <= ${limit}
if ok then
  count = count + P
  adm = adm + P
  sw, sc = win, count
else
  rej = rej + P
end
-- save(): the key lives until its window ends, or goes; in the stored state's window the
-- TTL is already that.
if count > 0 then
  ${saveState(
    encodeState(['sw', 'sc', 'adm', 'rej']),
    'stored == win',
    ttlTo('(win + 1) * W', p.slackMs),
  )}
else
  redis.call('DEL', KEYS[1])
end
`;
  if (op === 't') {
    return `${head}if ok then return 1 end
return 0
`;
  }
  return `${head}
local avail = ${limit} - count
local fresh = 0
if count > 0 then fresh = (win + 1) * W - NOW end
${toReply('fresh')}
local now = NOW
${toReply('now')}
if ok then return {1, avail, 0, fresh, now} end
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
