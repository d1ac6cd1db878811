/**
 * The one composer of every Redis script. An algorithm states its rule once, as named Lua
 * fragments on plain locals (Rule); composeScript() builds from them each form a limiter
 * runs:
 *
 * - `single(op)`: one tryAcquire() ('t'), consume() ('c') or fleet lease ('b') call, the
 *   hot path: no function built on the grant path, the fewest `redis.call`s and arguments.
 * - `driver`: every op, chosen by ARGV[1].
 * - `batch`: several calls of one limiter in one EVALSHA, each decided as its own driver
 *   run would decide it (Redis runs a script atomically: nothing comes between them).
 *
 * Every form carries the limiter's parameters as constants in its source (one script, one
 * SHA1, per parameter set, loaded on first use by the runner's NOSCRIPT → EVAL). The locals every fragment may read: NOW (µs), P (permits), EXTRA (a refund's taking time
 * or a lease id; '' when none), OP, SERVER (true when NOW is Redis TIME: only then may a
 * write keep the key's TTL, since every writer sets a TTL from Redis's clock), LEAST (a
 * lease's least), K1 and K2 (the call's keys), SLACK_MS (the TTL slack), adm and rej (the
 * key's counts, declared by `load`), ok and got (the verdict), fresh (µs until the state
 * saved is fresh again), avail (permits a call could take now).
 */

/** The driver's ops (composeScript()). */
export type Op = 't' | 'c' | 'w' | 'q' | 'b' | 'r' | 'l' | 's' | 'x';

/** One algorithm's rule, as Lua fragments on the locals named above. */
export interface Rule {
  /** Names the script (and its forms) in errors. */
  readonly name: string;
  readonly consts: string;
  /** Lua: reads the key(s) into the state's locals, as seen at NOW; declares adm and rej. */
  readonly load: string;
  /** Lua condition: `x` permits may be granted at NOW. */
  fits(x: string): string;
  /** Lua: counts `x` permits granted at NOW into the state. */
  take(x: string): string;
  /** Lua: sets `fresh`, the µs until the state (as it would be saved) is fresh. */
  readonly fresh: string;
  /** Lua: writes the state (or deletes the key when fresh is 0); `ok`: after a grant. */
  readonly save: string;
  /** Lua: sets `avail` (after save: of the state saved). */
  readonly avail: string;
  /**
   * Lua: defines `grants(r)` (P permits would be granted at NOW + r, the state as loaded)
   * and `guess` (µs from NOW: where the retry search starts).
   */
  readonly retry: string;
  /** Lua expression: µs from NOW that permits just leased keep counting where counted. */
  readonly counted: string;
  /** Lua: P permits given back, taken at TAKEN (µs); then saved. */
  readonly give: string;
  readonly drop: string;
  /** Lua expression: the 6th figure of a refusal (Concurrency: µs to the first expiry). */
  readonly hint?: string;
  /** Lua: release() of a lease (replies itself). */
  readonly release?: string;
  /** Lua: acquire()'s reservation of a refused call, `retry` known (replies itself). */
  readonly reserve?: string;
  /** Lua: after a grant or refusal is saved (Concurrency publishes here). */
  readonly after?: string;
}

/** The forms of one limiter's script. */
export interface Composed {
  readonly driver: string;
  readonly batch: string;
  single(op: 't' | 'c' | 'b'): string;
}

/** A number as a Lua literal that reads back as the same double (shortest round-trip form). */
export function luaNumber(x: number): string {
  if (!Number.isFinite(x)) throw new Error(`atomic-limiter/redis: no Lua literal for ${x}`);
  return String(x);
}

/**
 * Lua: `name` made a reply figure in place: integers stay numbers (exact integer replies), the
 * rest '%.17g' strings (Redis would truncate a Lua number); inline: a function is built per run.
 */
export function toReply(name: string): string {
  return `if not (${name} == math.floor(${name}) and ${name} > -9e15 and ${name} < 9e15) then
  ${name} = string.format('%.17g', ${name})
end`;
}

/**
 * Lua: a TTL in ms lasting until `endUs` (µs on NOW's clock), with the slack. Redis adds it
 * to its own ms clock when the write runs, which may still be in NOW's ms (or, counting from
 * the script's start, the one before): so from NOW's whole ms, plus 1; from NOW itself it
 * could end up to a ms early, and a key gone early forgets what it counted. At most 2^53 ms:
 * Redis writes a number as '%.17g', and 1e17 and more would reach PX as '1e+17', which it
 * refuses.
 */
export function ttlTo(endUs: string): string {
  return `math.min(9007199254740992, math.ceil((${endUs}) / 1000) - math.floor(NOW / 1000) + 1 + SLACK_MS)`;
}

/**
 * Lua: writes `packed` to `key`, keeping the key's TTL when `keep` says that the state
 * stored before ends no earlier than the one written — on Redis time only: every writer
 * sets a TTL reaching at least its state's end, so a state ending no later than the stored
 * one is covered by the TTL already there. Setting an expiry is the dearest part of a SET.
 */
export function saveState(key: string, packed: string, keep: string, ttlMs: string): string {
  return `if SERVER and ${keep} then
    redis.call('SET', ${key}, ${packed}, 'KEEPTTL')
  else
    redis.call('SET', ${key}, ${packed}, 'PX', ${ttlMs})
  end`;
}

/**
 * Lua: `local retry`, the least whole µs from NOW at which `grants(µs)` holds, searched from
 * `guess` (µs from NOW): up by doubling steps, then down by halving; math.huge when the
 * guess is not a number, or past 2^52 µs (where whole µs are not all doubles and a search
 * would not end), or no time within 2^52 µs grants. The in-memory retry search, step for step.
 */
const RETRY_SEARCH = `local retry
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

/**
 * Lua: the verdict, `ok` and `got`. A call: its P permits, if they fit. A fleet lease: the
 * most of P that fit, at least LEAST — the whole lease first (a hot key that is not
 * limited, the case leases are for, takes one test), else a bisection on the same test
 * (fits is monotone in the count). After a lease's, P is LEAST: what a refusal counts and
 * waits for.
 */
function verdict(rule: Rule, lease: 'yes' | 'no' | 'by-op'): string {
  const call = `ok = ${rule.fits('P')}`;
  const leased = `if not (${rule.fits('P')}) then
    local function fitsX(x) return ${rule.fits('x')} end
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
  ok = got > 0
  P = LEAST`;
  const body =
    lease === 'no'
      ? call
      : lease === 'yes'
        ? leased
        : `if OP == 'b' then
  ${leased}
else
  ${call}
end`;
  return `local got = P
local ok
${body}`;
}

/** Lua: the decision ops' body (t, c, w, q, b as `ops` has them), after load. */
function decide(rule: Rule, ops: readonly Op[]): string {
  const has = (o: Op) => ops.includes(o);
  const only = ops.length === 1;
  const lease = only ? (has('b') ? 'yes' : 'no') : has('b') ? 'by-op' : 'no';
  // A caller about to wait ('w') or reserving ('q') is not refused yet: no count.
  const counts = only ? 'true' : "OP ~= 'w' and OP ~= 'q'";
  const refusedReply = `{0, avail, retry, fresh, now, ${rule.hint ?? '0'}}`;
  const grantedReply = (lease: boolean) =>
    lease ? '{1, avail, 0, fresh, now, got, counted}' : '{1, avail, 0, fresh, now}';
  return `${verdict(rule, lease)}
if ok then
  ${rule.take('got')}
  adm = adm + got
elseif ${counts} then
  rej = rej + P
end
${
  has('q')
    ? `if OP == 'q' and not ok then
  ${rule.retry}
  ${RETRY_SEARCH}
  ${rule.reserve ?? 'return {0}'}
end
`
    : ''
}local fresh = 0
${rule.fresh}
${rule.save}
${rule.after ?? ''}
${has('t') ? (only ? 'if ok then return 1 end\nreturn 0' : "if OP == 't' then\n  if ok then return 1 end\n  return 0\nend") : ''}
${
  only && has('t')
    ? ''
    : `local avail
${rule.avail}
${toReply('fresh')}
local now = NOW
${toReply('now')}
if ok then
  ${
    !has('b')
      ? `return ${grantedReply(false)}`
      : `local counted = ${rule.counted}
  ${toReply('counted')}
  ${only ? `return ${grantedReply(true)}` : `if OP == 'b' then return ${grantedReply(true)} end\n  return ${grantedReply(false)}`}`
  }
end
${rule.retry}
${RETRY_SEARCH}
${toReply('retry')}
return ${refusedReply}`
}`;
}

/** Lua: the driver's body for every op. */
function driverBody(rule: Rule): string {
  return `${rule.load}
if OP == 'x' then
  ${rule.drop}
  return {1}
elseif OP == 's' then
  local avail
  ${rule.avail}
  ${toReply('avail')}
  ${toReply('adm')}
  ${toReply('rej')}
  return {avail, adm, rej}
elseif OP == 'r' then
  local TAKEN = NOW
  if EXTRA ~= '' then TAKEN = tonumber(EXTRA) end
  local ok = false
  ${rule.give}
  local fresh = 0
  ${rule.fresh}
  ${rule.save}
  return {1}
elseif OP == 'l' then
  ${rule.release ?? 'return {0}'}
elseif OP ~= 't' and OP ~= 'c' and OP ~= 'w' and OP ~= 'q' and OP ~= 'b' then
  return redis.error_reply('atomic-limiter: unknown op ' .. tostring(OP))
end
local LEAST
if OP == 'b' then LEAST = tonumber(EXTRA) end
${decide(rule, ['t', 'c', 'w', 'q', 'b'])}`;
}

/** Lua: `local NOW, SERVER` from the time argument `arg` ('' or absent: Redis TIME). */
function nowFrom(arg: string, absent: string): string {
  return `local NOW
local SERVER = ${absent}
if SERVER then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  NOW = tonumber(${arg})
end`;
}

/**
 * Builds the forms of `rule`'s script, with the TTL slack `slackMs`.
 *
 * ARGV of the driver: 1 op ('t' tryAcquire, 'c' consume, 'w' a waiter's try, 'q' reserve,
 * 'r' refund, 'l' release, 'b' a fleet block, 's' stats, 'x' reset), 2 time in µs ('' =
 * Redis TIME), 3 permits, 4 extra (a refund's taking time, a lease id, a block's least).
 * A single form's: 't'/'c' 1 permits (absent: 1), 2 time (absent: TIME); 'b' 1 least,
 * 2 most, 3 time. The batch's: 1 the number of runs, 2 keys per call, 3 where the runs
 * start, then six per run of equal calls: how many, which key (1 = the first names), op,
 * time ('' = TIME, read once per batch), permits, extra. The batch replies one entry per
 * call: what the driver replies, or '!' and the error's text for a call whose run failed
 * (that call alone fails; what it wrote before failing stays, as for its own EVALSHA).
 */
export function composeScript(rule: Rule, slackMs: number): Composed {
  const consts = `local SLACK_MS = ${luaNumber(slackMs)}
${rule.consts}`;
  const driver = `-- atomic-limiter:${rule.name}
local K1, K2 = KEYS[1], KEYS[2]
${consts}
local OP = ARGV[1]
${nowFrom('ARGV[2]', "ARGV[2] == ''")}
local P = tonumber(ARGV[3])
local EXTRA = ARGV[4]
${driverBody(rule)}`;
  const batch = `-- atomic-limiter:${rule.name}-batch
local K1, K2
${consts}
local OP, NOW, SERVER, P, EXTRA
local function one()
${driverBody(rule)}
end
local runs = tonumber(ARGV[1])
local nk = tonumber(ARGV[2])
local at = tonumber(ARGV[3])
local serverNow
local replies = {}
local done = 0
for i = 0, runs - 1 do
  local a = at + i * 6
  local g = (tonumber(ARGV[a + 1]) - 1) * nk
  K1, K2 = KEYS[g + 1], KEYS[g + 2]
  OP = ARGV[a + 2]
  SERVER = ARGV[a + 3] == ''
  if SERVER then
    if not serverNow then
      local t = redis.call('TIME')
      serverNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    NOW = serverNow
  else
    NOW = tonumber(ARGV[a + 3])
  end
  local permits = tonumber(ARGV[a + 4])
  EXTRA = ARGV[a + 5]
  for c = 1, tonumber(ARGV[a]) do
    P = permits
    local ok, r = pcall(one)
    if ok and type(r) == 'table' and r.err then
      ok, r = false, r.err
    elseif not ok and type(r) == 'table' then
      r = r.err
    end
    if ok and r == nil then ok, r = false, 'ERR the script returned nothing' end
    if not ok then
      r = tostring(r)
      -- A Lua runtime error has no code: give it one, as Redis does for a failed EVALSHA.
      if not string.match(r, '^%u[%u%d_-]* ') then r = 'ERR ' .. r end
      r = '!' .. r
    end
    done = done + 1
    replies[done] = r
  end
end
return replies`;
  const single = (op: 't' | 'c' | 'b') => {
    const args =
      op === 'b'
        ? `local LEAST = tonumber(ARGV[1])
local P = tonumber(ARGV[2])
${nowFrom('ARGV[3]', 'not ARGV[3]')}`
        : `local P = 1
if ARGV[1] then P = tonumber(ARGV[1]) end
${nowFrom('ARGV[2]', 'not ARGV[2]')}`;
    return `-- atomic-limiter:${rule.name}-${op === 't' ? 'try' : op === 'c' ? 'consume' : 'lease'}
local K1, K2 = KEYS[1], KEYS[2]
${consts}
local OP = '${op}'
local EXTRA = ''
${args}
${rule.load}
${decide(rule, [op])}`;
  };
  return { driver, batch, single };
}
