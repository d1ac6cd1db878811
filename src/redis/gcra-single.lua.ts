import { GCRA_ORIGIN } from './gcra.lua.js';
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
} from './single.lua.js';
import { bucketGeometry, decodeState, encodeState, stateBytes } from './state.lua.js';

const GEO = bucketGeometry('K', 'SCALE');

/** A GCRA limiter's parameters, as gcra.ts computes them (gcra.lua.ts ARGV[6…]). */
export interface GcraParams {
  readonly k: number;
  /** Units per µs. */
  readonly scale: number;
  /** capacity × k. */
  readonly tau: number;
  readonly limit: number;
  readonly leaky: boolean;
  /** TTL slack in ms (a ManualClock's). */
  readonly slackMs: number;
  /** The TTL's step in ms (gcraStepMs()). */
  readonly stepMs: number;
}

/**
 * The step a bucket's TTL is rounded up to (ms): an eighth of the time the bucket takes to
 * fill from empty, 1 ms to 1 s. The key lives until the bucket is full again, to the end of
 * that step: at most one step longer than it must, and a key spent faster than it refills
 * has its TTL set about once per step instead of on every call (single.lua.ts saveState()).
 */
export function gcraStepMs(capacity: number, intervalUs: number): number {
  return Math.min(1000, Math.max(1, Math.floor((capacity * intervalUs) / 8000)));
}

/**
 * tryAcquire() ('t', replies 1 or 0), consume() ('c', replies as the shared script's 'c')
 * or a fleet lease ('b', replies as the shared script's 'b') of one TokenBucket /
 * LeakyBucket call, with the limiter's parameters inline: the arithmetic of gcra.lua.ts's
 * step(), save(), avail(), fresh() and the driver's retryAfter() and lease, step for step,
 * without building them as functions on the grant path. The key holds tat, admitted,
 * rejected (state.lua.ts) — and, past 10^6 per second, the key's origin — as gcra.lua.ts
 * reads and writes it.
 */
export function gcraSingleScript(op: 't' | 'c' | 'b', p: GcraParams): string {
  const lease = op === 'b';
  const k = luaNumber(p.k);
  // step()'s test for x permits: a leaky bucket's allowance is the cost itself.
  const fits = (x: string) =>
    `base - u + ${x} * ${k} <= ${p.leaky ? `${x} * ${k}` : luaNumber(p.tau)}`;
  // A fast bucket (a unit under 1 µs) counts from its key's origin E, stored as a fourth
  // field (gcra.lua.ts); a slow one from 0, as before.
  const fast = p.scale > 1;
  const fields = fast ? ['tat', 'adm', 'rej', 'E'] : ['tat', 'adm', 'rej'];
  const since = (t: string) => (fast ? `(${t} - E)` : `(${t})`);
  // The µs on Redis's clock at which a TAT ends.
  const endUs = (tat: string) => (fast ? `(E + ${tat} / SCALE)` : `${tat} / SCALE`);
  const head = `-- atomic-limiter:gcra-${op === 't' ? 'try' : op === 'c' ? 'consume' : 'lease'}
local K = ${luaNumber(p.k)}
local SCALE = ${luaNumber(p.scale)}
local TAU = ${luaNumber(p.tau)}
local STEP_US = ${luaNumber(p.stepMs * 1000)}
${lease ? LEASE_ARGS : SINGLE_ARGS}
local tat, adm, rej${fast ? ', E' : ''}
local v = redis.call('GET', KEYS[1])
-- A version-1 state of the other kind (gcra.lua.ts decode()) is no state.
if v and #v ~= ${stateBytes(fast ? 3 : 4)} then
  ${decodeState('v', fields, 'TokenBucket/LeakyBucket', GEO)}
else
  adm, rej = 0, 0
end
${
  fast
    ? `${GCRA_ORIGIN}
local oldEnds
if tat then oldEnds = math.ceil(${endUs('tat')} / STEP_US) end
if E then E, tat = rebase(E, tat) else E = origin(NOW) end
`
    : ''
}local u = math.floor(${since('NOW')} * SCALE)
local base = u
if tat and tat > u then base = tat end
${verdictLua(lease, fits)}
local old = tat
if ok then
  tat = base + got * K
  adm = adm + got
else
  rej = rej + P
end
${op === 't' ? '' : "-- What was asked (a refusal's wait is for it).\nlocal cost = P * K\n"}-- save(): the key lives until the end of the step in which the bucket is fresh again, or
-- goes; a state ending in the stored one's step keeps its TTL.
${saveOrDelete(
  'tat and tat > u',
  `local ends = math.ceil(${endUs('tat')} / STEP_US)
  ${saveState(
    encodeState(fields, GEO),
    fast ? 'oldEnds and ends <= oldEnds' : 'old and ends <= math.ceil(old / SCALE / STEP_US)',
    ttlTo('ends * STEP_US', p.slackMs),
    lease ? 'ARGV[3]' : 'ARGV[2]',
  )}`,
)}
`;
  if (op === 't') return `${head}${TRY_REPLY}`;
  const avail = p.leaky
    ? `if ahead == 0 then avail = ${luaNumber(p.limit)} else avail = 0 end`
    : `avail = math.max(0, math.min(${luaNumber(p.limit)}, math.floor((TAU - ahead) / K)))`;
  return `${head}
local avail = ${luaNumber(p.limit)}
local fresh = 0
if tat then
  local ahead = math.max(0, tat - u)
  ${avail}
  if tat > u then fresh = (tat - u) / SCALE end
end
${toReply('fresh')}
local now = NOW
${toReply('now')}
${lease ? "if ok then return {1, avail, 0, fresh, now, got, 'inf'} end" : 'if ok then return {1, avail, 0, fresh, now} end'}
-- Refused: the driver's retryAfter(), the least µs r at which step(NOW + r) grants.
local function grants(r)
  local n = math.floor(${since('NOW + r')} * SCALE)
  local b = n
  if old and old > n then b = old end
  return b - n + cost <= ${p.leaky ? 'cost' : luaNumber(p.tau)}
end
local t0 = u
if old then t0 = math.max(u, old) end
${searchRetry(p.leaky ? '(t0 - u) / SCALE' : '(t0 + cost - TAU - u) / SCALE')}
${toReply('retry')}
return {0, avail, retry, fresh, now, 0}
`;
}
