import { saveState, ttlTo } from './compose.lua.js';
import { luaNumber, type Rule } from './rule.js';
import { encodeState, type Lineage, loadState, versionConst, windowGeometry } from './state.lua.js';

const GEO = windowGeometry('W');

/** A window's parameters. */
export interface WindowParams {
  readonly limit: number;
  readonly windowUs: number;
}

/**
 * Lua: a FixedWindow state carried from window `from[0]` (µs) to `to[0]` at time `at`, as in
 * memory: the count of a window not yet over is counted in the new window containing `at`
 * (or the later one the stored window reaches); a window over counts nothing.
 */
function convert(from: readonly string[], to: readonly string[], at: string): string {
  const [o, n] = [from[0]!, to[0]!];
  return `if sw then
        if sw >= math.floor(${at} / ${o}) then
          sw = math.max(math.floor(sw * ${o} / ${n}), math.floor(${at} / ${n}))
        else
          sw, sc = nil, nil
        end
      end`;
}

/**
 * The lineage of a FixedWindow at `version`, whose earlier versions had windows `pastUs`
 * and were made at `times` (µs).
 */
export function windowLineage(
  version: number,
  pastUs: readonly number[],
  times: readonly number[],
): Lineage {
  return { version, past: pastUs.map((w) => [w]), times, convert };
}

/**
 * FixedWindow (src/algorithms/fixed-window.ts): windows aligned to floor(t / windowUs).
 * Stored as window, count, admitted, rejected (state.lua.ts) with a TTL of the rest of the
 * window. A stored window later than now means the clock went back: it keeps counting in it.
 */
export function fixedWindowRule(p: WindowParams, lineage?: Lineage): Rule {
  return {
    name: 'fixed-window',
    consts: `local LIMIT = ${luaNumber(p.limit)}
local W = ${luaNumber(p.windowUs)}
${versionConst(lineage)}`,
    // The stored window (sw) is kept: its key's TTL reaches that window's end (a stored
    // state counts something: one with nothing to count is deleted).
    load: `${loadState(['sw', 'sc'], 'FixedWindow', GEO, lineage)}
local stored = sw
local win = math.floor(NOW / W)
local count = 0
if sw and sw >= win then win, count = sw, sc end`,
    fits: (x) => `count + ${x} <= LIMIT`,
    // take keeps win and count as a load would derive them.
    again: '',
    take: (x) => `count = count + ${x}
sw, sc = win, count`,
    fresh: 'if count > 0 then fresh = (win + 1) * W - NOW end',
    save: `if fresh > 0 then
  ${saveState('K1', encodeState(['sw', 'sc', 'adm', 'rej'], GEO, lineage), 'stored == win', ttlTo('(win + 1) * W'))}
else
  redis.call('DEL', K1)
end`,
    avail: 'avail = math.max(0, LIMIT - count)',
    retry: `local function grants(r)
  local w = math.floor((NOW + r) / W)
  local n = 0
  if sw and sw >= w then n = sc end
  return n + P <= LIMIT
end
local guess = (win + 1) * W - NOW`,
    // Leased permits count in this window: spent after it ends they would be spent in the next.
    counted: '(win + 1) * W - NOW',
    // Permits go back to the window they were taken in; from a window that has passed, nowhere.
    give: (ret) => `if count == 0 or math.floor(TAKEN / W) ~= win then return ${ret(['1'])} end
count = math.max(0, count - P)
sw, sc = win, count`,
    drop: "redis.call('DEL', K1)",
  };
}
