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
} from './single.lua.js';
import { checkSegmentsTag, segmentsTag } from './state.lua.js';

/** A segmented SlidingWindow's parameters (its script's ARGV[6…]) and its TTL slack in ms. */
export interface SegmentsParams {
  readonly limit: number;
  /** A segment's µs: the window's µs over `segments`, a whole number. */
  readonly segmentUs: number;
  readonly segments: number;
  readonly slackMs: number;
}

/**
 * tryAcquire() ('t', replies 1 or 0), consume() ('c', replies as the shared script's 'c')
 * or a fleet lease ('b', replies as the shared script's 'b') of one SlidingWindow call with
 * `segments`, with the limiter's parameters inline: sliding-window-segments.lua.ts's
 * load(), read(), total(), step(), fresh(), save(), avail(), est(), counted() and the
 * driver's retryAfter() and lease, step for step. The key holds "segment admitted rejected
 * c1 … cN" as that script reads and writes it.
 *
 * Reading and writing the counts was most of the shared script's time (60 segments: over
 * half), which converts each count with tonumber(), copies them into a new table in
 * read() (once more in fresh()) and writes each back with its own '%d'. This one keeps the
 * counts as the text read, in one table it rolls in place (Lua's arithmetic reads a count's
 * text as tonumber() does), and writes them with one table.concat(). The text read is what
 * '%d' would write of it: every writer writes a count with '%d', or as a Lua number, which
 * for a whole number below 2^26 (the largest segmented limit) has the same digits.
 */
export function slidingWindowSegmentsSingleScript(op: 't' | 'c' | 'b', p: SegmentsParams): string {
  const limit = luaNumber(p.limit);
  const n = luaNumber(p.segments);
  const lease = op === 'b';
  const tag = segmentsTag(p.segmentUs, p.segments);
  const head = `-- atomic-limiter:sliding-window-segments-${op === 't' ? 'try' : op === 'c' ? 'consume' : 'lease'}
local S = ${luaNumber(p.segmentUs)}
${lease ? LEASE_ARGS : SINGLE_ARGS}
-- load(): cs[i] counts segment seg - ${n} + i, as the text read (Lua's arithmetic reads it
-- as tonumber() does) or a number; counts past these ${n} are not read, missing ones are 0.
local seg, adm, rej = nil, 0, 0
local cs = {}
local i = 1
local v = redis.call('GET', KEYS[1])
if v then
  -- The writer's settings first (state.lua.ts), then seg, adm, rej at cs[-2], cs[-1], cs[0].
  i = -2 - ${checkSegmentsTag("string.match(v, '^%S+')", `'${tag}'`)}
  for x in string.gmatch(v, '%S+') do
    cs[i] = x
    i = i + 1
  end
  seg, adm, rej = tonumber(cs[-2]), tonumber(cs[-1]), tonumber(cs[0])
end
for j = i, ${n} do cs[j] = 0 end
-- read(): NOW's segment (a later stored one: the clock went back), and the counts still in
-- the window, those past the first \`shift\` (the roll is made only by a grant, which saves it).
local cur = math.floor(NOW / S)
local shift = 0
if seg then
  if seg > cur then cur = seg end
  shift = cur - seg
end
local used = 0
for j = shift + 1, ${n} do used = used + cs[j] end
-- The stored state's newest segment holding permits leaves the window at its end, and its
-- key's TTL reaches that: a grant's state, ending with segment cur, ends no later if the
-- stored one counts in segment cur already.
local full = seg == cur and tonumber(cs[${n}]) > 0
${verdictLua(lease, (x) => `used + ${x} <= ${limit}`)}
if ok then
  -- step(): the counts rolled to segment cur, the permits counted in it.
  if shift > 0 then
    for j = 1, ${n} do
      if j + shift <= ${n} then cs[j] = cs[j + shift] else cs[j] = 0 end
    end
  end
  cs[${n}] = cs[${n}] + got
  seg, shift = cur, 0
  used = used + got
  adm = adm + got
else
  rej = rej + P
end
-- fresh() of the state saved: until its newest segment holding permits leaves the window.
local fresh = 0
for j = ${n}, shift + 1, -1 do
  if tonumber(cs[j]) > 0 then
    fresh = math.max(0, (cur + j - shift) * S - NOW)
    break
  end
end
-- A refusal saves the stored state again (its rejected count aside), which ends where it did.
${saveOrDelete(
  'fresh > 0',
  saveState(
    `string.format('${tag} %d %d %d ', seg, adm, rej) .. table.concat(cs, ' ', 1, ${n})`,
    '(not ok or full)',
    ttlTo('NOW + fresh', p.slackMs),
    lease ? 'ARGV[3]' : 'ARGV[2]',
  ),
)}
`;
  if (op === 't') return `${head}${TRY_REPLY}`;
  return `${head}
local avail = math.max(0, ${limit} - used)
${toReply('fresh')}
local now = NOW
${toReply('now')}
${
  // Leased permits count in segment cur (counted()).
  lease
    ? `local win, W = cur, S\n${WINDOW_LEASE_REPLY}`
    : 'if ok then return {1, avail, 0, fresh, now} end'
}
-- Refused: the driver's retryAfter(), the least µs r at which step(NOW + r) grants, read
-- from the stored state (unchanged but for its rejected count: seg is set, since used > 0).
local function grants(r)
  local sh = math.max(math.floor((NOW + r) / S), seg) - seg
  local u = 0
  for j = sh + 1, ${n} do u = u + cs[j] end
  return u + P <= ${limit}
end
-- est(): when enough of the oldest segments holding permits have left the window (the
-- counts past the stored ones, rolled in as 0, change nothing).
local guess = (cur + ${n}) * S - NOW
local u = used
for j = 1, ${n} - shift do
  u = u - cs[j + shift]
  if u + P <= ${limit} then
    guess = math.max(0, (cur + j) * S - NOW)
    break
  end
end
${searchRetry('guess')}
${toReply('retry')}
return {0, avail, retry, fresh, now, 0}
`;
}
