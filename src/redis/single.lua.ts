/**
 * What the single-call scripts share (gcra-single, fixed-window-single,
 * sliding-window-single, sliding-window-segments-single and sliding-log-single .lua.ts):
 * the hot path of one call, tryAcquire(), consume() or a fleet lease, as a script of its
 * own per limiter.
 *
 * Why not the shared driver: Redis builds every function of a script on each run, and
 * every argument costs the client an encoding and Redis a parse and a Lua string. So these
 * scripts define no function on the grant path, make as few `redis.call`s as the state
 * allows (a bucket or window three: TIME, GET, SET … PX), and carry the limiter's
 * parameters as constants in their source — one script (one SHA1) per parameter set,
 * loaded on first use by the runner's NOSCRIPT → EVAL.
 *
 * ARGV (trailing ones omitted): 1 permits (absent: 1), 2 time in µs (absent: Redis TIME).
 * They read and write the key exactly as the algorithm's shared script and its batch form
 * do (same encoding, same TTL), so a key may be decided by either in turn.
 *
 * The TTL is written only when it must grow (saveState()): setting an expiry is the dearest
 * part of a `SET` (Redis removes the key's expiry entry and adds a new one, and rewrites the
 * command for propagation) — measured on one call alone, `SET … PX` cost Redis ~4 µs more
 * than `SET … KEEPTTL`, a quarter of a whole decision.
 */
/** A window's parameters (its script's ARGV[6…]: limit, window µs) and its TTL slack in ms. */
export interface WindowParams {
  readonly limit: number;
  readonly windowUs: number;
  readonly slackMs: number;
}

/** Lua: `local NOW`, the time in µs from argument `arg` when given, else Redis TIME. */
function nowFrom(arg: string): string {
  return `local NOW
if ${arg} then
  NOW = tonumber(${arg})
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end`;
}

export const SINGLE_ARGS = `
local P = 1
if ARGV[1] then P = tonumber(ARGV[1]) end
${nowFrom('ARGV[2]')}
`;

/**
 * Lua: the verdict of a call (`lease` false: its P permits, if `fits(P)`) or of a fleet
 * lease (the driver's 'b': the most of P for which `fits` holds, at least LEAST — the whole
 * lease first, else a bisection on the same test), as `ok` and `got`, the count granted.
 * `fits(x)` is a Lua condition on a count x. After a lease's, P is LEAST: what a refusal
 * counts and waits for.
 */
export function verdictLua(lease: boolean, fits: (x: string) => string): string {
  if (!lease)
    return `local got = P
local ok = ${fits('P')}`;
  return `local got = P
if not (${fits('P')}) then
  local function fitsX(x) return ${fits('x')} end
  got = 0
  if fitsX(LEAST) then
    local lo, hi = LEAST, P - 1
    while lo < hi do
      local mid = math.floor((lo + hi + 1) / 2)
      if fitsX(mid) then lo = mid else hi = mid - 1 end
    end
    got = lo
  end
end
local ok = got > 0
P = LEAST`;
}

/**
 * Lua: a window's reply to a granted lease, as the driver's 'b' (needs avail, fresh, now,
 * got, win, W): last, counted(), how long the permits granted count in their window.
 */
export const WINDOW_LEASE_REPLY = `if ok then
  local counted = (win + 1) * W - NOW
  ${toReply('counted')}
  return {1, avail, 0, fresh, now, got, counted}
end`;

/**
 * A fleet lease's ARGV (trailing one omitted): 1 the least to grant, 2 the most (a lease's
 * size), 3 time in µs (absent: Redis TIME).
 */
export const LEASE_ARGS = `
local LEAST = tonumber(ARGV[1])
local P = tonumber(ARGV[2])
${nowFrom('ARGV[3]')}
`;

/**
 * Lua: writes the state `packed` (a Lua expression) to KEYS[1], keeping the key's TTL when
 * `keep` (a Lua condition) says that the state stored before this call expires no earlier
 * than the one written needs — on Redis time only: every script that writes the key sets a
 * TTL reaching at least the stored state's end (the same rule in each), so a state ending
 * no later than the stored one is covered by the TTL already there. Otherwise (a longer
 * life, no key before, or a ManualClock's time, which is not Redis's) `SET … PX ttlMs`.
 */
export function saveState(
  packed: string,
  keep: string,
  ttlMs: string,
  timeArg = 'ARGV[2]',
): string {
  return `if not ${timeArg} and ${keep} then
    redis.call('SET', KEYS[1], ${packed}, 'KEEPTTL')
  else
    redis.call('SET', KEYS[1], ${packed}, 'PX', ${ttlMs})
  end`;
}

/**
 * Lua: `save` (saveState() and what it needs) while `live` (the state saved is not fresh
 * yet), else the key goes: a fresh state is no state.
 */
export function saveOrDelete(live: string, save: string): string {
  return `if ${live} then
  ${save}
else
  redis.call('DEL', KEYS[1])
end`;
}

/** Lua: a tryAcquire() script's reply, after its head decided `ok`. */
export const TRY_REPLY = `if ok then return 1 end
return 0
`;

/**
 * Lua: the driver's ttlTo() (driver.lua.ts), a TTL in ms lasting until `endUs` (a Lua
 * expression, µs on NOW's clock), with the limiter's slack; at most 2^53 ms (see there).
 */
export function ttlTo(endUs: string, slackMs: number): string {
  return `math.min(9007199254740992, math.ceil((${endUs}) / 1000) - math.floor(NOW / 1000) + ${luaNumber(1 + slackMs)})`;
}

/**
 * Lua: the driver's `out()` applied to the local `name` in place (integers stay numbers,
 * sent as integer replies; the rest become '%.17g' strings) — inline, since a function
 * would be built on every run.
 */
export function toReply(name: string): string {
  return `if not (${name} == math.floor(${name}) and ${name} > -9e15 and ${name} < 9e15) then
  ${name} = string.format('%.17g', ${name})
end`;
}

/**
 * A number as a Lua literal that reads back as the same double: JavaScript's shortest
 * round-trip form is one Lua's strtod() reads exactly (what tonumber() of the same string
 * as an argument would give).
 */
export function luaNumber(x: number): string {
  if (!Number.isFinite(x)) throw new Error(`atomic-limiter/redis: no Lua literal for ${x}`);
  return String(x);
}

/**
 * The ARGV of a single-call script for a call's head (op, time, permits, extra, slack): a
 * lease's ('b') as LEASE_ARGS, the others' as SINGLE_ARGS.
 */
export function singleArgs(head: readonly string[]): string[] {
  const time = head[1]!;
  const permits = head[2]!;
  if (head[0] === 'b') return time === '' ? [head[3]!, permits] : [head[3]!, permits, time];
  if (time !== '') return [permits, time];
  return permits === '1' ? [] : [permits];
}

/**
 * Lua: `local retry`, the least whole µs from now at which `grants(µs)` holds (the local
 * function each script defines on its refusal path), searched from the estimate `guess`
 * (a Lua expression, µs from now): up by doubling steps, then down by halving; math.huge
 * when the estimate is not a number, or past 2^52 µs (where whole µs are not all doubles and
 * a search would not end), or no time within 2^52 µs grants.
 */
export function searchRetry(guess: string): string {
  return `local retry
local guess = ${guess}
if guess ~= guess or guess > 4503599627370496 then
  retry = math.huge
else
  local hi = math.max(0, math.ceil(guess))
  local lo = 0
  if grants(hi) and (hi == 0 or not grants(hi - 1)) then
    retry = hi
  else
    if not grants(hi) then
      local s = 1
      repeat
        lo = hi + 1
        hi = hi + s
        s = s * 2
        if hi > 4503599627370496 then retry = math.huge break end
      until grants(hi)
    end
    if not retry then
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if grants(mid) then hi = mid else lo = mid + 1 end
      end
      retry = hi
    end
  end
end`;
}
