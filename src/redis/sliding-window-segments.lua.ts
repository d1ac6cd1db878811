import { MARK } from './compose.lua.js';
import { luaNumber, type Rule } from './rule.js';
import { mismatch, newer, shown } from './state.lua.js';

/**
 * SlidingWindow with `segments` (src/algorithms/segmented-window.ts): the window split into
 * N segments of S µs aligned to floor(t / S); a request passes when the counts of the last
 * N segments plus its permits are at most the limit (the in-memory ring's rules). Stored as
 * "g<S>/<N>@<options version> segment admitted rejected c1 … cN", where ci counts segment
 * (segment − N + i), until the newest segment holding permits has left the window.
 *
 * The counts are kept as the text read, in one table rolled in place (Lua's arithmetic reads
 * a count's text as tonumber() does), and written with one table.concat(): converting each
 * count was most of a call's time. The text read is what '%d' would write of it: a whole
 * number below 2^26 (the largest segmented limit) has the same digits as a Lua number.
 */
export function slidingWindowSegmentsRule(p: {
  readonly limit: number;
  /** A segment's µs: the window's µs over `segments`, a whole number. */
  readonly segmentUs: number;
  readonly segments: number;
  /** The options version (reconfigure()). */
  readonly version: number;
}): Rule {
  const base = `g${p.segmentUs}/${p.segments}`;
  const describe = (t: string) =>
    `(function(t) local s, n = string.match(t, '^g(%d+)/(%d+)') if not s then return t end return 'windowMs ' .. ${shown('s * n / 1000')} .. ' in ' .. n .. ' segments' end)(${t})`;
  // The counts rolled to segment cur in place (a grant's or a refund's).
  const roll = `if shift > 0 then
  for j = 1, N do
    if j + shift <= N then cs[j] = cs[j + shift] else cs[j] = 0 end
  end
end
seg, shift = cur, 0`;
  const at = (t: string) => `local cur = math.floor(${t} / S)
local shift = 0
if seg then
  if seg > cur then cur = seg end
  shift = cur - seg
end
local used = 0
for j = shift + 1, N do used = used + cs[j] end`;
  return {
    name: 'sliding-window-segments',
    consts: `local LIMIT = ${luaNumber(p.limit)}
local S = ${luaNumber(p.segmentUs)}
local N = ${luaNumber(p.segments)}`,
    // cs[i] counts segment seg - N + i (missing ones 0). cur: NOW's segment (a later stored
    // one: the clock went back); the counts in the window are those past the first `shift`
    // (rolled by a grant or refund). `full`: the stored state counts in segment cur, so a
    // grant's state ends no later than it.
    load: (get) => `local seg, adm, rej = nil, 0, 0
local cs = {}
local i = 1
${get}
if v then
  -- The tag first, then seg, adm, rej at cs[-2], cs[-1], cs[0]. An older options version's
  -- counts (its settings cannot change with segments) are read as they are, under any limit.
  local first = string.match(v, '^%S+')
  if first ~= '${base}@${p.version}' then
    local b, u = string.match(first or '', '^(g%d+/%d+)@(%d+)$')
    if b ~= '${base}' then
      if b then ${mismatch('SlidingWindow', describe('b'), describe(`'${base}'`))} end
      error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds no SlidingWindow state with segments (a SlidingWindow without segments wrote it, or another program)' .. ${MARK}))
    end
    if tonumber(u) > ${p.version} then ${newer('tonumber(u)')} end
  end
  i = -3
  for x in string.gmatch(v, '%S+') do
    cs[i] = x
    i = i + 1
  end
  seg, adm, rej = tonumber(cs[-2]), tonumber(cs[-1]), tonumber(cs[0])
end
for j = i, N do cs[j] = 0 end
${at('NOW')}
local full = seg == cur and tonumber(cs[N]) > 0`,
    fits: (x) => `used + ${x} <= LIMIT`,
    take: (x) => `${roll}
cs[N] = cs[N] + ${x}
used = used + ${x}`,
    fresh: `for j = N, shift + 1, -1 do
  if tonumber(cs[j]) > 0 then
    fresh = math.max(0, (cur + j - shift) * S - NOW)
    break
  end
end`,
    // A refusal saves the stored state again (its rejected count aside): it ends where it did.
    stored: {
      value: `string.format('${base}@${p.version} %d %d %d ', seg, adm, rej) .. table.concat(cs, ' ', 1, N)`,
      keep: '(not ok or full)',
      until: 'NOW + fresh',
    },
    avail: 'avail = math.max(0, LIMIT - used)',
    // est(): when enough of the oldest segments holding permits have left the window (the
    // counts past the stored ones, rolled in as 0, change nothing).
    at,
    guess: `local guess = (cur + N) * S - NOW
local u = used
for j = 1, N - shift do
  u = u - cs[j + shift]
  if u + P <= LIMIT then
    guess = math.max(0, (cur + j) * S - NOW)
    break
  end
end`,
    // Leased permits count in segment cur: spent after it ends they would leave the window a
    // segment late.
    counted: '(cur + 1) * S - NOW',
    // Credit the segment the permits were taken in, if it is still in the window.
    give: (ret) => `local at = math.floor(TAKEN / S) - cur + N
local c = 0
if at >= 1 and at + shift <= N then c = tonumber(cs[at + shift]) end
if at > N or c == 0 then return ${ret(['1'])} end
${roll}
cs[at] = math.max(0, c - P)`,
  };
}
