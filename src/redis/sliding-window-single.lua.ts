import { WIDE_SPAN } from '../engine/layout.js';
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
import { fitsLua, storedPrevLua } from './sliding-window.lua.js';
import { decodeState, encodeState, windowGeometry } from './state.lua.js';

/**
 * tryAcquire() ('t', replies 1 or 0), consume() ('c', replies as the shared script's 'c')
 * or a fleet lease ('b', replies as the shared script's 'b') of one two-window
 * SlidingWindow call, with the limiter's parameters inline: sliding-window.lua.ts's read(),
 * weighted(), step(), save(), avail(), est(), counted() and the driver's retryAfter() and
 * lease, step for step. The key holds window, prev, curr, admitted, rejected
 * (state.lua.ts), as sliding-window.lua.ts reads and writes it.
 */
export function slidingWindowSingleScript(
  op: 't' | 'c' | 'b',
  p: WindowParams & { readonly prevQuantum: number },
): string {
  const limit = luaNumber(p.limit);
  // The stored previous count as read (sliding-window.lua.ts read()): a wide window's in
  // steps of its quantum.
  const q = luaNumber(p.prevQuantum);
  const stored = (x: string) => (p.prevQuantum === 1 ? x : storedPrevLua(x, limit, q));
  // The window test (fitsLua()), with its exactness known here.
  const exact = p.limit * p.windowUs < WIDE_SPAN;
  const fits = (wp: string, used: string) => fitsLua(wp, used, limit, 'W', exact);
  const geo = windowGeometry('W', q);
  const lease = op === 'b';
  const head = `-- atomic-limiter:sliding-window-${op === 't' ? 'try' : op === 'c' ? 'consume' : 'lease'}
local W = ${luaNumber(p.windowUs)}
${lease ? LEASE_ARGS : SINGLE_ARGS}
local sw, sp, sc, adm, rej
local v = redis.call('GET', KEYS[1])
if v then
  ${decodeState('v', ['sw', 'sp', 'sc', 'adm', 'rej'], 'SlidingWindow', geo)}
else
  adm, rej = 0, 0
end
-- Where the stored state ends (in windows): the end of the window after its own if it
-- counts in its own, else its own window's end; its key's TTL reaches that.
local ends
if sw then
  if sc > 0 then ends = sw + 2 elseif sp > 0 then ends = sw + 1 end
end
-- read(): the counters rolled forward to NOW's window.
local win = math.floor(NOW / W)
local prev, curr = 0, 0
if sw then
  if sw >= win then
    win, prev, curr = sw, ${stored('sp')}, sc
  elseif sw == win - 1 then
    prev = sc
  end
end
local weighted = prev * math.max(0, W - math.max(0, NOW - win * W))
${verdictLua(lease, (x) => fits('weighted', `curr + ${x}`))}
if ok then
  curr = curr + got
  adm = adm + got
  sw, sp, sc = win, prev, curr
else
  rej = rej + P
end
-- save(): fresh() of the state saved, read at NOW (the rolled counters).
local fresh = 0
if curr > 0 then
  fresh = (win + 2) * W - NOW
elseif prev > 0 then
  fresh = math.max(0, (win + 1) * W - NOW)
end
-- A grant saves a state counting in NOW's window (it ends a window later); a refusal saves
-- the stored state again, which ends where it did.
${saveOrDelete(
  'fresh > 0',
  saveState(
    encodeState(['sw', 'sp', 'sc', 'adm', 'rej'], geo),
    'ends and (not ok or win + 2 <= ends)',
    ttlTo('NOW + fresh', p.slackMs),
    lease ? 'ARGV[3]' : 'ARGV[2]',
  ),
)}
`;
  if (op === 't') return `${head}${TRY_REPLY}`;
  return `${head}
${
  // A grant saved the previous count as it is read back (in steps, for a wide window).
  p.prevQuantum === 1
    ? ''
    : `if ok then weighted = ${stored('prev')} * math.max(0, W - math.max(0, NOW - win * W)) end\n`
}local avail = math.max(0, math.floor(${limit} - (weighted / W + curr)))
${toReply('fresh')}
local now = NOW
${toReply('now')}
${lease ? WINDOW_LEASE_REPLY : 'if ok then return {1, avail, 0, fresh, now} end'}
-- Refused: the driver's retryAfter(), the least µs r at which step(NOW + r) grants, read
-- from the stored state (unchanged but for its rejected count).
local function grants(r)
  local t = NOW + r
  local w = math.floor(t / W)
  local pv, cu = 0, 0
  if sw then
    if sw >= w then
      w, pv, cu = sw, ${stored('sp')}, sc
    elseif sw == w - 1 then
      pv = sc
    end
  end
  return ${fits('pv * math.max(0, W - math.max(0, t - w * W))', 'cu + P')}
end
local guess
if curr + P <= ${limit} then
  if prev == 0 then
    guess = 0
  else
    guess = win * W + W - ((${limit} - curr - P) * W) / prev - NOW
  end
else
  guess = win * W + W + math.max(0, W - ((${limit} - P) * W) / curr) - NOW
end
${searchRetry('guess')}
${toReply('retry')}
return {0, avail, retry, fresh, now, 0}
`;
}
