import { type History, luaNumber, type Packed, type Rule } from './rule.js';
import { encodeState, loadState, shown } from './state.lua.js';

/** A GCRA limiter's parameters, as gcra.ts computes them. */
export interface GcraParams {
  readonly k: number;
  /** Units per µs. */
  readonly scale: number;
  readonly limit: number;
  readonly leaky: boolean;
  readonly queueLimit: number;
  /** The TTL's step in ms (gcraStepMs()). */
  readonly stepMs: number;
  /** The options' versions (reconfigure()), `past` the units [k, scale] of each earlier one. */
  readonly history: History;
}

/**
 * The step a bucket's TTL is rounded up to (ms): an eighth of its fill time, 1 ms to 1 s. A
 * key lives at most a step longer than it must, and one spent faster than it refills has
 * its TTL set about once a step, not on every call.
 */
export function gcraStepMs(capacity: number, intervalUs: number): number {
  return Math.min(1000, Math.max(1, Math.floor((capacity * intervalUs) / 8000)));
}

/**
 * TokenBucket and LeakyBucket (GCRA, src/algorithms/gcra.ts): the theoretical arrival time
 * (tat) in units of 1/K of the emission interval, from time 0 (the in-memory figures when
 * its epoch is 0). Stored as tat, admitted, rejected (state.lua.ts) with a TTL of the time
 * to refill, rounded up to the bucket's step: a state ending in the stored one's step keeps
 * its TTL. Past 10^6 per second (a unit under 1 µs) Redis TIME's µs in units are not exact
 * in a double, so the key counts from an origin E, a fourth field: 0 while units stay under
 * 2^51 (a ManualClock's), else a multiple of 2^36 µs at or before its first write, moved
 * forward once units pass 2^51, what is ahead kept, one unit stricter, never earlier.
 */
export function gcraRule(p: GcraParams): Rule {
  const fast = p.scale > 1;
  const state: Packed = {
    what: 'TokenBucket/LeakyBucket',
    fields: ['tat', 'adm', 'rej'],
    spare: { name: 'E', written: fast },
    // Its units: K a permit, SCALE per µs.
    geo: {
      values: ['K', 'SCALE'],
      describe: (v) =>
        `'refillPerSecond ' .. ${shown(`${v[1]} * 1000000 / ${v[0]}`)} .. ' (' .. ${shown(v[0]!)} .. ' units a permit)'`,
    },
    history: p.history,
    // From units from[0] a permit, from[1] per µs, to units to[0], to[1], at `at`, as in
    // memory: what a key owes, in permits, stays owed, rounded up in the new units; E as
    // the load sets it.
    convert: (from, to, at) => `local ahead = tat - math.floor((${at} - (E or 0)) * ${from[1]})
      if ahead > 0 then
        E = 0
        if ${to[1]} > 1 and ${at} * ${to[1]} >= 2^51 then E = math.floor(${at} / 2^36) * 2^36 end
        tat = math.floor((${at} - E) * ${to[1]}) + math.ceil(ahead * ${to[0]} / ${from[0]})
      else
        tat = nil
      end`,
  };
  // A leaky bucket's allowance is the cost itself.
  const allowance = (x: string) => (p.leaky ? `${x} * K` : 'TAU');
  // `t` may be a sum (a reservation's 'NOW + retry'): bracketed, its whole is scaled.
  const at = (t: string) => `local u = math.floor(${fast ? `(${t} - E)` : `(${t})`} * SCALE)
local base = u
if tat and tat > u then base = tat end`;
  // The step the state ends in.
  const ends = `math.ceil(${fast ? '(E + tat / SCALE)' : 'tat / SCALE'} / STEP_US)`;
  return {
    name: 'gcra',
    consts: `local K = ${luaNumber(p.k)}
local SCALE = ${luaNumber(p.scale)}
local TAU = ${luaNumber(p.limit * p.k)}
local LIMIT = ${luaNumber(p.limit)}
local STEP_US = ${luaNumber(p.stepMs * 1000)}`,
    load: (get) => `${loadState(state, get)}
local oldEnds
if tat then oldEnds = ${ends} end
${
  fast
    ? `if not E or (NOW - E) * SCALE >= 2^51 then
  local origin = 0
  if NOW * SCALE >= 2^51 then origin = math.floor(NOW / 2^36) * 2^36 end
  if E and tat then
    local ahead = tat - math.floor((NOW - E) * SCALE)
    if ahead <= 0 then tat = nil else tat = math.floor((NOW - origin) * SCALE) + ahead + 1 end
  end
  E = origin
end
`
    : ''
}${at('NOW')}`,
    at,
    fits: (x) => `base - u + ${x} * K <= ${allowance(x)}`,
    take: (x) => `tat = base + ${x} * K`,
    again: 'base = tat',
    fresh: 'if tat and tat > u then fresh = (tat - u) / SCALE end',
    stored: {
      value: encodeState(state),
      keep: `oldEnds and ${ends} <= oldEnds`,
      until: `${ends} * STEP_US`,
    },
    avail: `avail = LIMIT
if tat then
  local ahead = math.max(0, tat - u)
  ${p.leaky ? 'if ahead > 0 then avail = 0 end' : 'avail = math.max(0, math.min(LIMIT, math.floor((TAU - ahead) / K)))'}
end`,
    guess: `local guess = ${p.leaky ? '(base - u) / SCALE' : '(base + P * K - TAU - u) / SCALE'}`,
    give: (ret) => `if not (tat and tat > u) then return ${ret(['1'])} end
tat = math.max(u, tat - P * K)`,
    // acquire(): reserve the first time the permits can be had (FIFO by arrival at Redis),
    // unless the permits waiting, this call's too, pass the queue limit (a token bucket's owed
    // past the burst, a leaky bucket's in it). Replies {3, waitUs, now}, or {2, retryUs} full.
    reserve: (ret, save) => `local cost = P * K
local waiting = ${p.leaky ? 'math.ceil((base - u) / K) + P' : 'math.ceil((base + cost - TAU - u) / K)'}
local full = ${p.queueLimit === 0 ? 'true' : `waiting > ${luaNumber(p.queueLimit)}`} or retry == math.huge
if full then
  rej = rej + P
else
  ${at('NOW + retry')}
  tat = base + cost
  adm = adm + P
end
${save}
if full then return ${ret(['2', 'string.format("%.17g", retry)'])} end
return ${ret(['3', 'string.format("%.17g", retry)', 'string.format("%.17g", NOW)'])}`,
  };
}
