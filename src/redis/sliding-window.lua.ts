import { WIDE_SPAN } from '../engine/layout.js';
import { type History, luaNumber, type Packed, type Rule } from './rule.js';
import { encodeState, loadState, shown } from './state.lua.js';

/**
 * SlidingWindow (src/algorithms/sliding-window.ts): the two-window counter,
 * prev × (1 − elapsed / windowUs) + curr + permits ≤ limit, multiplied by windowUs as in
 * memory so that every figure is exact — while limit × windowUs < 2^53; past that (a wide
 * window) compared in doubles a hair stricter than their rounding, operation for operation
 * as the in-memory wide table, whose previous count is read rounded up to its quantum
 * (`prevQuantum`; 1: exact). Stored as window, prev, curr, admitted, rejected with a TTL
 * until both windows are empty.
 */
export function slidingWindowRule(
  p: { readonly limit: number; readonly windowUs: number; readonly prevQuantum: number },
  history: History,
): Rule {
  const exact = p.limit * p.windowUs < WIDE_SPAN;
  const stored = (x: string) =>
    p.prevQuantum === 1 ? x : `math.min(LIMIT, math.ceil(${x} / Q) * Q)`;
  const state: Packed = {
    what: 'SlidingWindow',
    fields: ['sw', 'sp', 'sc', 'adm', 'rej'],
    // Its window and the previous count's quantum.
    geo: {
      values: ['W', 'Q'],
      describe: (v) =>
        `'windowMs ' .. ${shown(`${v[0]} / 1000`)} .. ' (previous count in steps of ' .. ${shown(v[1]!)} .. ')'`,
    },
    history,
    // From window o (µs) to n, as in memory: read as of `at`; under the same window both
    // counts stay, under another the previous count's weight then plus the current count
    // are counted, rounded up, in the new window containing `at`.
    convert: ([o], [n], at) => `local ow, pv, cu = math.floor(${at} / ${o}), 0, 0
      if sw >= ow then
        ow, pv, cu = sw, sp, sc
      elseif sw == ow - 1 then
        pv = sc
      end
      if pv == 0 and cu == 0 then
        sw, sp, sc = nil, nil, nil
      elseif ${o} == ${n} then
        sw, sp, sc = ow, pv, cu
      else
        local share = pv * math.max(0, ${o} - math.max(0, ${at} - ow * ${o})) / ${o}
        sw, sp, sc = math.max(math.floor(${at} / ${n}), math.floor(ow * ${o} / ${n})), 0, math.ceil(share + cu)
      end`,
  };
  const at = (t: string) => `local win = math.floor(${t} / W)
local prev, curr = 0, 0
if sw then
  if sw >= win then
    win, prev, curr = sw, ${stored('sp')}, sc
  elseif sw == win - 1 then
    prev = sc
  end
end
local weighted = prev * math.max(0, W - math.max(0, ${t} - win * W))`;
  return {
    name: 'sliding-window',
    consts: `local LIMIT = ${luaNumber(p.limit)}
local W = ${luaNumber(p.windowUs)}
local Q = ${luaNumber(p.prevQuantum)}`,
    // `ends`: where the stored state ends (in windows), which its key's TTL reaches: the end
    // of the window after its own if it counts in its own, else its own window's end.
    load: (get) => `${loadState(state, get)}
local ends
if sw then
  if sc > 0 then ends = sw + 2 elseif sp > 0 then ends = sw + 1 end
end
${at('NOW')}`,
    at,
    fits: (x) =>
      exact
        ? `weighted + (curr + ${x}) * W <= LIMIT * W`
        : `(curr + ${x}) <= LIMIT and weighted / W <= (LIMIT - (curr + ${x})) * (1 - 2^-40)`,
    // A load of the state taken reads the previous count as stored (take set weighted so).
    again: p.prevQuantum === 1 ? '' : `prev = ${stored('prev')}`,
    // A grant saves the previous count as it is read back (in steps, for a wide window).
    take: (x) => `curr = curr + ${x}
sw, sp, sc = win, prev, curr${p.prevQuantum === 1 ? '' : `\nweighted = ${stored('prev')} * math.max(0, W - math.max(0, NOW - win * W))`}`,
    fresh: `if curr > 0 then
  fresh = (win + 2) * W - NOW
elseif prev > 0 then
  fresh = math.max(0, (win + 1) * W - NOW)
end`,
    // A grant saves a state counting in NOW's window (it ends a window later); a refusal or a
    // refund saves a state ending no later than the stored one.
    stored: {
      value: encodeState(state),
      keep: 'ends and (not ok or win + 2 <= ends)',
      until: 'NOW + fresh',
    },
    avail: 'avail = math.max(0, math.floor(LIMIT - (weighted / W + curr)))',
    guess: `local guess
if curr + P <= LIMIT then
  if prev == 0 then
    guess = 0
  else
    guess = win * W + W - ((LIMIT - curr - P) * W) / prev - NOW
  end
else
  guess = win * W + W + math.max(0, W - ((LIMIT - P) * W) / curr) - NOW
end`,
    // Leased permits count in this window's count: spent after it ends they would weigh as
    // the previous window's, less and less.
    counted: '(win + 1) * W - NOW',
    // Credit the window the permits were taken in (the current or the previous one).
    give: (ret) => `local tw = math.floor(TAKEN / W)
if tw == win and curr > 0 then
  curr = math.max(0, curr - P)
elseif tw == win - 1 and prev > 0 then
  prev = math.max(0, prev - P)
else
  return ${ret(['1'])}
end
sw, sp, sc = win, prev, curr`,
  };
}
