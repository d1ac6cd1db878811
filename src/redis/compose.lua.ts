import { type Composed, luaNumber, luaValue, type Ret, type Rule, type Single } from './rule.js';

/**
 * The one composer of every Redis script (composeScript()), from an algorithm's rule
 * (rule.ts). Every form carries the limiter's parameters as constants (one script, one
 * SHA1, per parameter set, loaded on first use by the runner's NOSCRIPT → EVAL).
 */

/** Lua: an error's text ends with the call's token, how the runner knows it (none in a batch). */
export const MARK = "(TOKEN and (' [' .. TOKEN .. ']') or '')";

/** Lua: `local v`, K1's value, by redis.pcall: a key of another type fails with the token. */
const GET_K1 = `local v = redis.pcall('GET', K1)
if type(v) == 'table' then error(redis.error_reply(v.err .. ${MARK})) end`;

/** GET_K1 in a batch: the value MGET prefetched (PRE, taken once), else a GET, which says why. */
const PREFETCHED_GET_K1 = `local v = PRE
PRE = nil
if not v then
  v = redis.pcall('GET', K1)
  if type(v) == 'table' then error(redis.error_reply(v.err .. ${MARK})) end
end`;

/**
 * Lua: `name` made a reply figure in place: integers stay numbers, the rest '%.17g' strings
 * (Redis would truncate a Lua number); inline, as a function is built per run.
 */
export function toReply(name: string): string {
  return `if not (${name} == math.floor(${name}) and ${name} > -9e15 and ${name} < 9e15) then
  ${name} = string.format('%.17g', ${name})
end`;
}

/**
 * Lua: a TTL in ms lasting until `endUs` (µs on NOW's clock), with the slack, from NOW's whole
 * ms plus 1: Redis adds it to its ms clock, which may be in NOW's ms or the one before (a key
 * gone early forgets what it counted). At most 2^53 ms, as Redis refuses PX '1e+17'.
 */
export function ttlTo(endUs: string): string {
  return `math.min(9007199254740992, math.ceil((${endUs}) / 1000) - math.floor(NOW / 1000) + 1 + SLACK_MS)`;
}

/**
 * Lua: `local fresh` (rule.fresh) and the save: rule.save, or rule.stored written to K1 (K1
 * deleted when fresh is 0). The TTL is kept when `keep` holds, on Redis time only: every
 * writer sets a TTL reaching its state's end (setting one is the dearest part of a SET).
 */
function save(rule: Rule): string {
  const s = rule.stored;
  return `local fresh = 0
${rule.fresh}
${
  s === undefined
    ? rule.save
    : `if not (fresh > 0) then
  redis.call('DEL', K1)
elseif SERVER and ${s.keep} then
  redis.call('SET', K1, ${s.value}, 'KEEPTTL')
else
  redis.call('SET', K1, ${s.value}, 'PX', ${ttlTo(s.until)})
end`
}`;
}

/**
 * Lua: `local retry`, the least whole µs from NOW at which `grants(µs)` holds, searched from
 * `guess` (µs from NOW) as in memory: up by doubling steps, then down by halving; math.huge
 * when the guess is not a number, or nothing grants within 2^52 µs (where whole µs end).
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

/** Lua: `grants(r)` and `guess` (rule.ts), then `local retry`, the search's answer. */
function retry(rule: Rule): string {
  if (rule.at === undefined) return `${rule.retry}\n${RETRY_SEARCH}`;
  return `local function grants(r)
  local t = NOW + r
  ${rule.at('t')}
  return ${rule.fits('P')}
end
${rule.guess}
${RETRY_SEARCH}`;
}

/**
 * Lua: the verdict of `op` (absent: by OP), `ok` and `got`. A call: its P permits, if they
 * fit. A fleet lease ('b'): the most of P that fit, at least LEAST — the whole lease first
 * (a hot key not limited takes one test), else a bisection. Then P is LEAST: what a refusal
 * counts and waits for.
 */
function verdict(rule: Rule, op: Single | undefined): string {
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
  return `local got = P
local ok
${
  op === 'b'
    ? leased
    : op
      ? call
      : `if OP == 'b' then
  ${leased}
else
  ${call}
end`
}`;
}

/** Lua: the reply of a decision, from its fields (`granted`, `refused`). */
type Decide = (fields: readonly string[]) => string;

/** A grant's fields (a lease's add got and counted); a refusal's (then the rule's hint). */
const granted = ['1', 'avail', '0', 'fresh', 'now'];
const refused = (rule: Rule) => ['0', 'avail', 'retry', 'fresh', 'now', rule.hint ?? '0'];

/** Lua: `local now`, NOW as a reply figure. */
const NOW_REPLY = `local now = NOW
${toReply('now')}`;

/**
 * Lua: a decision's reply, `ok` and `fresh` known: avail, then `granted` (given `now` when
 * `grantNow`) or, the retry searched, `refused` (given `now` when `needsNow`).
 */
function reply(
  rule: Rule,
  granted: string,
  refused: string,
  needsNow: boolean,
  grantNow = needsNow,
): string {
  return `local avail
${rule.avail}
${toReply('fresh')}
if ok then
  ${grantNow ? NOW_REPLY : ''}
  ${granted}
else
  ${retry(rule)}
  ${toReply('retry')}
  ${needsNow ? NOW_REPLY : ''}
  ${refused}
end`;
}

/** Lua: the decision of `op` (absent: the driver's t, c, w, q and b, by OP), after load. */
function decide(
  rule: Rule,
  op: Single | undefined,
  ret: Ret,
  tryRet: Ret,
  decision: Decide = ret,
  needsNow = true,
  grantNow = needsNow,
): string {
  const grant = (lease: boolean) =>
    `return ${decision(lease ? [...granted, 'got', 'counted'] : granted)}`;
  const counted = `local counted = ${rule.counted ?? 'math.huge'}
  ${toReply('counted')}
  `;
  const granting =
    op === undefined
      ? `${counted}if OP == 'b' then ${grant(true)} end\n  ${grant(false)}`
      : op === 'b'
        ? `${counted}${grant(true)}`
        : grant(false);
  // A caller about to wait ('w') or reserving ('q') is not refused yet: no count.
  return `${verdict(rule, op)}
if ok then
  ${rule.take('got')}
  adm = adm + got
elseif ${op ? 'true' : "OP ~= 'w' and OP ~= 'q'"} then
  rej = rej + P
end
${
  op
    ? ''
    : `if OP == 'q' and not ok then
  ${retry(rule)}
  ${rule.reserve ? rule.reserve(ret, save(rule)) : `return ${ret(['0'])}`}
end`
}
${save(rule)}
${rule.after ?? ''}
${
  op === 't'
    ? `if ok then return ${tryRet('1')} end\nreturn ${tryRet('0')}`
    : `${op ? '' : `if OP == 't' then\n  if ok then return ${ret('1')} end\n  return ${ret('0')}\nend`}
${reply(rule, granting, `return ${decision(refused(rule))}`, needsNow, grantNow)}`
}`;
}

/** Lua: the driver's body for every op (`get`: rule.load's; `decision`, `needsNow`: decide()'s). */
function driverBody(rule: Rule, ret: Ret, get: string, decision?: Decide, needsNow = true): string {
  return `${rule.load(get)}
if OP == 'x' then
  ${rule.drop ?? "redis.call('DEL', K1)"}
  return ${ret(['1'])}
elseif OP == 's' then
  local avail
  ${rule.avail}
  ${['avail', 'adm', 'rej'].map(toReply).join('\n')}
  return ${ret(['avail', 'adm', 'rej'])}
elseif OP == 'r' then
  local TAKEN = NOW
  if EXTRA ~= '' then TAKEN = tonumber(EXTRA) end
  local ok = false
  ${rule.give(ret)}
  ${save(rule)}
  return ${ret(['1'])}
elseif OP == 'l' then
  ${rule.release ? rule.release(ret) : `return ${ret(['0'])}`}
elseif OP ~= 't' and OP ~= 'c' and OP ~= 'w' and OP ~= 'q' and OP ~= 'b' then
  error(redis.error_reply('ERR atomic-limiter: unknown op ' .. tostring(OP) .. ${MARK}))
end
local LEAST
if OP == 'b' then LEAST = tonumber(EXTRA) end
${decide(rule, undefined, ret, ret, decision, needsNow)}`;
}

/**
 * Lua: the body of run(CALLS), CALLS equal tryAcquire() or consume() calls (OP) of P permits
 * on one key, each decided as its driver run would, with one load and one save: the state
 * stays in locals between calls (rule.again re-derives what load derives from it), as its
 * Redis commands cost more than the arithmetic.
 */
function decideRun(rule: Rule, decision: Decide): string {
  return `${rule.load(PREFETCHED_GET_K1)}
local granted = false
for _ = 1, CALLS do
  local got = P
  local ok = ${rule.fits('P')}
  if ok then
    ${rule.take('got')}
    adm = adm + got
    granted = true
    ${rule.again}
  else
    rej = rej + P
  end
  if OP == 't' then
    putv(ok and 1 or 0)
  else
    local fresh = 0
    ${rule.fresh}
    ${reply(rule, decision(granted), decision(refused(rule)), false)}
  end
end
-- save's ok: the state saved is after a grant.
local ok = granted
${save(rule)}
${rule.after ?? ''}
return true`;
}

/**
 * The batch form's replies, in one flat table R (from R[D + 1]), not a table a call: Redis
 * converts each table of a reply at a cost, and the client parses one array. An entry: a
 * bare value (`putv(x)`); a table of n fields: n, then the fields (`putN`); a decision: −n,
 * then its fields but `now`, which the client knows (`decN`); a plain grant, the most common
 * entry: −1, avail, fresh (`grant`: allowed and a retry of 0 go without saying). Returns the
 * helpers' Lua (of the arities used) with the Ret and Decide that call them.
 */
function flatReplies(): { ret: Ret; decision: Decide; helpers: () => string } {
  const tables = new Set<number>();
  const decisions = new Set<number>();
  let grants = false;
  const ret: Ret = (x) => {
    if (typeof x === 'string') return `putv(${x})`;
    tables.add(x.length);
    return `put${x.length}(${x.join(', ')})`;
  };
  const decision: Decide = (f) => {
    if (f === granted) {
      grants = true;
      return `grant(${f[1]}, ${f[3]})`;
    }
    const fields = [...f.slice(0, 4), ...f.slice(5)];
    decisions.add(fields.length);
    return `dec${fields.length}(${fields.join(', ')})`;
  };
  const helper = (name: string, head: number, n: number) => {
    const params = Array.from({ length: n }, (_, i) => `a${i + 1}`);
    const sets = params.map((a, i) => `R[D + ${i + 2}] = ${a}`).join(' ');
    return `local function ${name}(${params.join(', ')}) R[D + 1] = ${head} ${sets} D = D + ${n + 1} return true end`;
  };
  const helpers = () =>
    [
      'local function putv(x) R[D + 1] = x D = D + 1 return true end',
      ...[...tables].sort().map((n) => helper(`put${n}`, n, n)),
      ...[...decisions].sort().map((n) => helper(`dec${n}`, -n, n)),
      ...(grants ? [helper('grant', -1, 2)] : []),
    ].join('\n');
  return { ret, decision, helpers };
}

/** Lua: `r`, a failure (an error reply or a raised error), as an error's text. */
const ERROR_TEXT = `if type(r) == 'table' then r = r.err end
r = tostring(r)
-- A Lua runtime error has no code: give it one, as Redis does for a failed EVALSHA.
if not string.match(r, '^%u[%u%d_-]* ') then r = 'ERR ' .. r end`;

/**
 * Lua: `body` run inside pcall, so that a raised error (a command on a key of another type)
 * carries the token too: `{TOKEN, reply}`, or an error reply ending in ` [TOKEN]`.
 */
function guard(body: string): string {
  return `local ok, r = pcall(function()
local TOKEN
${body}
end)
if ok and type(r) == 'table' and r.err then ok = false end
if ok then return {TOKEN, r} end
${ERROR_TEXT}
return redis.error_reply(r .. ' [' .. TOKEN .. ']')`;
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
 * Builds the forms of `rule`'s script, with the TTL slack `slackMs`. ARGV of the driver: 1 op
 * ('t' tryAcquire, 'c' consume, 'w' a waiter's try, 'q' reserve, 'r' refund, 'l' release,
 * 'b' a fleet block, 's' stats, 'x' reset), 2 time in µs ('' = Redis TIME), 3 permits, 4
 * extra (a refund's taking time, a lease id, a block's least), the token last. A single
 * form's: 1 the token, then 't'/'c' 2 permits (absent: 1), 3 time (absent: TIME); 'b' 2
 * least, 3 most, 4 time.
 *
 * The batch's ARGV: 1 keys per call, then items, the token last. An item not a number sets
 * the mode of the calls after it: op, time ('' = TIME, read once a batch), extra. A number
 * is a run of equal calls in that mode, ±(permits × 256 + how many): positive on the next
 * call's keys in KEYS (each key's names once), negative on the run before's: one argument a
 * run, as each costs an encoding and a parse. The batch replies {token, TIME's µs (0 when
 * unread), an entry per call (flatReplies())}; a call whose run failed has '!' and the
 * error's text (that call alone fails; what it wrote stays, as for its own EVALSHA).
 */
export function composeScript(rule: Rule, slackMs: number): Composed {
  const consts = `local SLACK_MS = ${luaNumber(slackMs)}
${rule.consts}`;
  const bare: Ret = luaValue;
  const tokened: Ret = (x) => `{TOKEN, ${luaValue(x)}}`;
  // A guarded rule's body runs inside pcall and replies bare; the wrapper adds the token.
  const ret = rule.guarded ? bare : tokened;
  const top = (body: string) => (rule.guarded ? guard(body) : body);
  // The head of a script run for one call, its token in ARGV[`token`].
  const head = (name: string, token: string) => `-- atomic-limiter:${name}
local K1, K2 = KEYS[1], KEYS[2]
local TOKEN = ARGV[${token}]
${consts}`;
  const driver = `${head(rule.name, '#ARGV')}
local OP = ARGV[1]
${nowFrom('ARGV[2]', "ARGV[2] == ''")}
local P = tonumber(ARGV[3])
local EXTRA = ARGV[4]
${top(driverBody(rule, ret, GET_K1))}`;
  const flat = flatReplies();
  const batchBody = driverBody(rule, flat.ret, PREFETCHED_GET_K1, flat.decision, false);
  const runBody = rule.again === undefined ? undefined : decideRun(rule, flat.decision);
  const oneOf = (op: 't' | 'c') => `local function one${op.toUpperCase()}()
${rule.load(PREFETCHED_GET_K1)}
${decide(rule, op, flat.ret, flat.ret, flat.decision, false)}
end`;
  const functions = `local function one()
${batchBody}
end
${oneOf('t')}
${oneOf('c')}
${
  runBody === undefined
    ? ''
    : `local function run(CALLS)
${runBody}
end`
}`;
  // A rule whose load GETs its first key takes it from one MGET of every call's first key,
  // before the first call: one command, not one a key. Only a key's first load takes it (its
  // later calls read what the ones before wrote).
  const prefetch = rule.load(GET_K1) !== rule.load(PREFETCHED_GET_K1);
  const batch = `-- atomic-limiter:${rule.name}-batch
local K1, K2, TOKEN
${consts}
local OP, NOW, SERVER, P, EXTRA
local R, D = {}, 2
local PRE, MG
${flat.helpers()}
${functions}
local ONE = one
local nk = tonumber(ARGV[1])
${
  prefetch
    ? `if nk == 1 then
  MG = redis.call('MGET', unpack(KEYS))
else
  local firsts = {}
  for j = 1, #KEYS, nk do firsts[#firsts + 1] = KEYS[j] end
  MG = redis.call('MGET', unpack(firsts))
end`
    : ''
}
local last = #ARGV - 1
local serverNow = 0
local g = 0
local i = 2
while i <= last do
  local e = tonumber(ARGV[i])
  if not e then
    OP = ARGV[i]
    SERVER = ARGV[i + 1] == ''
    NOW = tonumber(ARGV[i + 1])
    if SERVER then
      if serverNow == 0 then
        local t = redis.call('TIME')
        serverNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
      end
      NOW = serverNow
    end
    EXTRA = ARGV[i + 2]
    -- tryAcquire() and consume() have forms of their own: no other op's branches.
    if OP == 't' then ONE = oneT elseif OP == 'c' then ONE = oneC else ONE = one end
    i = i + 3
  else
    if e > 0 then
      K1, K2 = KEYS[g + 1], KEYS[g + 2]
      ${prefetch ? 'PRE = MG[g / nk + 1]' : ''}
      g = g + nk
    else
      e = -e
      PRE = nil
    end
    local count = e % 256
    local permits = (e - count) / 256
    local f, n = ONE, 1
    ${
      runBody === undefined
        ? ''
        : `-- A run of equal calls on one key: one load and one save (run()). Failing, it fails
    -- every call of the run, having written nothing.
    if count > 1 and (OP == 't' or OP == 'c') then f, n = run, count end`
    }
    for _ = 1, count / n do
      P = permits
      local from = D
      local ok, r = pcall(f, n)
      if ok and r ~= true then
        ok = false
        if not (type(r) == 'table' and r.err) then r = 'ERR the script returned nothing' end
      end
      if not ok then
        ${ERROR_TEXT}
        D = from
        for _ = 1, n do
          R[D + 1] = '!' .. r
          D = D + 1
        end
      end
    end
    i = i + 1
  end
end
R[1] = ARGV[#ARGV]
R[2] = serverNow
return R`;
  const single = (op: Single) => {
    const args =
      op === 'b'
        ? `local LEAST = tonumber(ARGV[2])
local P = tonumber(ARGV[3])
${nowFrom('ARGV[4]', 'not ARGV[4]')}`
        : `local P = 1
if ARGV[2] then P = tonumber(ARGV[2]) end
${nowFrom('ARGV[3]', 'not ARGV[3]')}`;
    // tryAcquire()'s verdict goes back as one integer, token × 2 + verdict, and a decision
    // as one flat table, the token first: Redis converts every table of a reply at a cost.
    // consume()'s plain grant is {token, avail, fresh}: its allowed and retry go without
    // saying, and consume() reads no time.
    const tryRet: Ret = rule.guarded ? bare : (x) => `tonumber(TOKEN) * 2 + ${x}`;
    const plain = !rule.guarded && op === 'c';
    const flatDecision: Decide | undefined = rule.guarded
      ? undefined
      : (f) => (plain && f === granted ? '{TOKEN, avail, fresh}' : `{TOKEN, ${f.join(', ')}}`);
    return `${head(`${rule.name}-${op === 't' ? 'try' : op === 'c' ? 'consume' : 'lease'}`, '1')}
local OP = '${op}'
local EXTRA = ''
${args}
${top(`${rule.load(GET_K1)}\n${decide(rule, op, ret, tryRet, flatDecision, true, !plain)}`)}`;
  };
  return { driver, batch, single };
}
