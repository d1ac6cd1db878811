import type { WarmingModel } from '../algorithms/warming-bucket.js';
import { type Geometry, type History, luaNumber, type Packed, type Rule } from './rule.js';
import { encodeState, loadState, shown } from './state.lua.js';

/** warmingModel()'s figures, the in-memory class's (src/algorithms/warming-bucket.ts). */
type WarmingParams = Omit<WarmingModel, 'staleUs'>;

/** A WarmingBucket's settings: stable interval, most stored permits, cool-down, quanta, unit. */
const GEO: Geometry = {
  values: ['S', 'MAXP', 'COOL', 'QUANTA', 'UNIT'],
  describe: (v) =>
    `'ratePerSecond ' .. ${shown(`1000000 / ${v[0]}`)} .. ', warmupMs ' .. ${shown(`${v[2]} * ${v[1]} / 1000`)} .. ' (' .. ${shown(v[1]!)} .. ' permits stored at most)'`,
};

/** The settings GEO writes, of warmingModel()'s figures. */
export function warmingGeometry(m: WarmingParams): number[] {
  return [m.stableUs, m.maxPermits, m.coolDownUs, m.quanta, m.unitUs];
}

/**
 * WarmingBucket (src/algorithms/warming-bucket.ts): Guava's SmoothWarmingUp with the
 * in-memory class's arithmetic, operation for operation, on plain locals. Stored as quanta q,
 * next free time nf (units since time 0: the in-memory figures when its epoch is 0),
 * admitted, rejected, with a TTL until the state is cold again (a cold state is no state).
 * Pays later: a call is admitted once the previous one's debt is paid.
 */
export function warmingBucketRule(m: WarmingParams, history: History): Rule {
  const state: Packed = {
    what: 'WarmingBucket',
    fields: ['q', 'nf', 'adm', 'rej'],
    geo: GEO,
    history,
    // From settings `from` to `to` (GEO's) at `at`, as Guava's setRate() and the in-memory
    // class do: a key cold then stays cold; otherwise idleness since its next free time is
    // regained first, then its stored permits keep their share of the new maximum and its
    // next free time (what it owes) is kept.
    convert: (
      [, maxp, cool, quanta, unit],
      [, nmaxp, , nquanta, nunit],
      at,
    ) => `local s = math.min(${maxp}, q / ${quanta})
      if ${at} >= nf * ${unit} + (${maxp} - s) * ${cool} then
        q, nf = nil, nil
      else
        local was = math.floor(${at} / ${unit})
        if was > nf then s = math.min(${maxp}, s + ((was - nf) * ${unit}) / ${cool}) end
        q = math.min(math.ceil(${nmaxp} * ${nquanta}), math.ceil((s / ${maxp}) * ${nmaxp} * ${nquanta}))
        nf = math.ceil(math.max(was, nf) * ${unit} * (1 / ${nunit}))
      end`,
  };
  const at = (t: string) => `local un = math.floor(${t} * PERUS)`;
  return {
    name: 'warming-bucket',
    // waitUs(): Guava's storedPermitsToWaitTime(), the trapezoid above the threshold, the
    // stable interval below it, each part truncated to whole µs.
    consts: `local S = ${luaNumber(m.stableUs)}
local THR = ${luaNumber(m.threshold)}
local MAXP = ${luaNumber(m.maxPermits)}
local SLOPE = ${luaNumber(m.slope)}
local COOL = ${luaNumber(m.coolDownUs)}
local QUANTA = ${luaNumber(m.quanta)}
local UNIT = ${luaNumber(m.unitUs)}
local LIMIT = ${luaNumber(m.limit)}
local MAXQ = ${luaNumber(m.maxQuanta)}
local PERUS = 1 / UNIT
local function waitUs(stored, take)
  local above = stored - THR
  local us = 0
  if above > 0 then
    local fromAbove = math.min(above, take)
    local length = S + above * SLOPE + (S + (above - fromAbove) * SLOPE)
    us = math.floor(fromAbove * length / 2.0)
    take = take - fromAbove
  end
  return us + math.floor(S * take)
end`,
    load: (get) => `${loadState(state, get)}
${at('NOW')}`,
    at,
    fits: () => 'not (nf and nf > un)',
    // take keeps the state as a load would read it; load derives only `un`, from NOW.
    again: '',
    // Guava's reserveEarliestAvailable() of x permits at un, from the stored permits while
    // the state is warm, else from a cold bucket.
    take: (x) => `local stored, from = MAXP, un
if nf then
  local s = math.min(MAXP, q / QUANTA)
  if NOW < nf * UNIT + (MAXP - s) * COOL then stored, from = s, nf end
end
if un > from then stored = math.min(MAXP, stored + ((un - from) * UNIT) / COOL) end
local spend = math.min(${x}, stored)
local w = waitUs(stored, spend) + math.floor((${x} - spend) * S)
q, nf = math.min(MAXQ, math.ceil((stored - spend) * QUANTA)), un + math.ceil(w * PERUS)`,
    fresh:
      'if nf then fresh = math.max(0, nf * UNIT + (MAXP - math.min(MAXP, q / QUANTA)) * COOL - NOW) end',
    // A refusal or a refund saves a state ending no later than the stored one.
    stored: { value: encodeState(state), keep: 'not ok', until: 'NOW + fresh' },
    avail: 'if nf and nf > un then avail = 0 else avail = LIMIT end',
    guess: `local guess = 0
if nf then guess = math.max(0, nf * UNIT - NOW) end`,
    // A refund undoes a grant: permits back to storage, the debt shrunk by what taking them
    // from there costs, never to before now; nothing once the debt is paid.
    give: (ret) => `if not (nf and nf > un) then return ${ret(['1'])} end
local stored = math.min(MAXP, q / QUANTA)
local back = math.min(MAXP, stored + P)
local credit = waitUs(back, back - stored) + math.floor((P - (back - stored)) * S)
q, nf = math.min(MAXQ, math.ceil(back * QUANTA)), math.max(un, nf - math.floor(credit * PERUS))`,
  };
}
