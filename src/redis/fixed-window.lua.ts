import { type History, luaNumber, type Packed, type Rule } from './rule.js';
import { encodeState, loadState, shown } from './state.lua.js';

/**
 * FixedWindow (src/algorithms/fixed-window.ts): windows aligned to floor(t / windowUs).
 * Stored as window, count, admitted, rejected (state.lua.ts) with a TTL of the rest of the
 * window. A stored window later than now means the clock went back: it keeps counting in it.
 */
export function fixedWindowRule(
  p: { readonly limit: number; readonly windowUs: number },
  history: History,
): Rule {
  const state: Packed = {
    what: 'FixedWindow',
    fields: ['sw', 'sc', 'adm', 'rej'],
    geo: { values: ['W'], describe: (v) => `'windowMs ' .. ${shown(`${v[0]} / 1000`)}` },
    history,
    // From window o (µs) to n, as in memory: the count of a window not over at `at` is
    // counted in the new window containing `at` (or the later one the stored window reaches).
    convert: ([o], [n], at) => `if sw >= math.floor(${at} / ${o}) then
        sw = math.max(math.floor(sw * ${o} / ${n}), math.floor(${at} / ${n}))
      else
        sw, sc = nil, nil
      end`,
  };
  const at = (t: string) => `local win = math.floor(${t} / W)
local count = 0
if sw and sw >= win then win, count = sw, sc end`;
  return {
    name: 'fixed-window',
    consts: `local LIMIT = ${luaNumber(p.limit)}
local W = ${luaNumber(p.windowUs)}`,
    // The stored window (sw) is kept: its key's TTL reaches that window's end (a stored
    // state counts something: one with nothing to count is deleted).
    load: (get) => `${loadState(state, get)}
local stored = sw
${at('NOW')}`,
    at,
    fits: (x) => `count + ${x} <= LIMIT`,
    // take keeps win and count as a load would derive them.
    again: '',
    take: (x) => `count = count + ${x}
sw, sc = win, count`,
    fresh: 'if count > 0 then fresh = (win + 1) * W - NOW end',
    stored: {
      value: encodeState(state),
      keep: 'stored == win',
      until: '(win + 1) * W',
    },
    avail: 'avail = math.max(0, LIMIT - count)',
    guess: 'local guess = (win + 1) * W - NOW',
    // Leased permits count in this window: spent after it ends they would be spent in the next.
    counted: '(win + 1) * W - NOW',
    // Permits go back to the window they were taken in; from a window that has passed, nowhere.
    give: (ret) => `if count == 0 or math.floor(TAKEN / W) ~= win then return ${ret(['1'])} end
count = math.max(0, count - P)
sw, sc = win, count`,
  };
}
