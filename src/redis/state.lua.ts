import { MARK } from './compose.lua.js';
import { luaNumber, type Packed } from './rule.js';

/**
 * How a bucket's or a window's state is stored in its key: a head of 4 bytes, LAYOUT then
 * the writer's options version (reconfigure()) in the other three (version × 256 + LAYOUT,
 * little-endian: one figure to compare with this limiter's), then its settings (Geometry)
 * and the fields as doubles (struct.pack '<I4' + 'd' × n): one C call to read or write,
 * where text needs a parse and a format per field. Doubles hold every figure exactly
 * (integers below 2^53). The layout byte and the length make a value of another format
 * (another program's) an error naming the key.
 */
const LAYOUT = 3;

/** struct format of a state of `fields` after the head and settings of `s`. */
function format(s: Packed, fields: readonly string[]): string {
  return `<I4${'d'.repeat(s.geo.values.length + fields.length)}`;
}

/** The field lists a stored state may hold, its writer's first (with its spare and without). */
function layouts(s: Packed): (readonly string[])[] {
  if (s.spare === undefined) return [s.fields];
  const full = [...s.fields, s.spare.name];
  return s.spare.written ? [full, s.fields] : [s.fields, full];
}

/** Lua: a number for a message, shortest form. */
export function shown(x: string): string {
  return `string.format('%.15g', ${x})`;
}

/**
 * Lua: the call stops, changing nothing, because the state at K1 was written under a newer
 * options version `u` (a Lua expression) than this script's: its limiter takes up the newer
 * options (base.ts reads the error) and runs the call again.
 */
export function newer(u: string): string {
  return `error(redis.error_reply('NEWER ' .. string.format('%d', ${u}) .. ${MARK}))`;
}

/**
 * Lua: `local v`, GET of `key`, and from it the counts `names` (declared by the caller), text
 * "a b … @u": u, the writer's options version, newer than `version` stops the call first.
 */
export function readCounts(key: string, names: readonly string[], version: number): string {
  const texts = names.map((_, i) => `c${i + 1}`);
  return `local v = redis.call('GET', ${key})
if v then
  local ${texts.join(', ')}, u = string.match(v, '^${names.map(() => '(%S+)').join(' ')} @(%d+)$')
  if tonumber(u) > ${version} then ${newer('tonumber(u)')} end
  ${names.join(', ')} = ${texts.map((t) => `tonumber(${t})`).join(', ')}
end`;
}

/** Lua: the text of the counts `names` as readCounts() reads them. */
export function writeCounts(names: readonly string[], version: number): string {
  return `string.format('${names.map(() => '%.17g').join(' ')} @${version}', ${names.join(', ')})`;
}

/** Lua: the error of a state of `what` written with settings `was` (Lua text), not `has`. */
export function mismatch(what: string, was: string, has: string): string {
  return `error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds a ${what} state written with ' .. ${was} .. '; this limiter has ' .. ${has} .. ': limiters whose settings differ need a prefix each (or reset() the key)' .. ${MARK}))`;
}

/** The error text that newer() raises, as the runner reports it: the version. */
export const NEWER_ERROR = / failed: NEWER (\d+)$/;

/**
 * Lua: the load of K1's state `s` (its string by `get`) into locals of its fields' names
 * (declared here); a key holding none leaves them nil and adm, rej 0. Settings other than
 * `geo`'s are an error naming the key and both; a newer options version than the history's
 * stops the call (newer()); an older one must hold that version's settings and is converted.
 */
export function loadState(s: Packed, get: string): string {
  const { what, fields, geo } = s;
  const version = s.history.version;
  const g = geo.values.map((_, i) => `g${i + 1}`);
  const error = `error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds no ${what} state of a known version (another program wrote it, or a ${what} of other options)' .. ${MARK}))`;
  const check = (values: readonly string[]) =>
    `if ${values.map((x, i) => `${g[i]} ~= ${x}`).join(' or ')} then ${mismatch(what, geo.describe(g), geo.describe(values))} end`;
  const list = (xs: readonly string[]) => `{${xs.join(', ')}}`;
  const at = (t: string) => geo.values.map((_, i) => `${t}[${i + 1}]`);
  // Version u's settings checked, then the fields carried over version by version, each at
  // the time it was made, as the in-memory class converted every state then. The tables are
  // built only here: on a key's first call under a new version. After a conversion the key's
  // TTL is set anew (SERVER false: no KEEPTTL), as the state's end moved with its settings.
  const geos = [...s.history.past.map((x) => list(x.map(luaNumber))), list(geo.values)];
  const convert = `local GEOS = {${geos.join(', ')}}
    local TIMES = {${s.history.times.map(luaNumber).join(', ')}}
    local was = GEOS[u + 1]
    if not was then ${error} end
    ${check(at('was'))}
    for w = u + 1, ${version} do
      local from, to, AT = GEOS[w], GEOS[w + 1], TIMES[w]
      if ${fields[0]} then
        ${s.convert(at('from'), at('to'), 'AT')}
      end
    end
    SERVER = false`;
  const read = layouts(s).map(
    (l) => `#v == ${4 + 8 * (g.length + l.length)} then
    head, ${g.join(', ')}, ${l.join(', ')} = struct.unpack('${format(s, l)}', v)`,
  );
  return `local ${[...fields, ...(s.spare ? [s.spare.name] : [])].join(', ')}
${get}
if v then
  local head, ${g.join(', ')}
  if ${read.join('\n  elseif ')}
  else
    ${error}
  end
  if head == ${version * 256 + LAYOUT} then
    ${check(geo.values)}
  elseif head % 256 ~= ${LAYOUT} then
    ${error}
  else
    local u = (head - ${LAYOUT}) / 256
    if u > ${version} then ${newer('u')} end
    ${version === 0 ? '' : convert}
  end
else
  adm, rej = 0, 0
end`;
}

/** Lua: the stored string of state `s` (its fields' locals), as loadState() reads it. */
export function encodeState(s: Packed): string {
  const fields = layouts(s)[0]!;
  return `struct.pack('${format(s, fields)}', ${s.history.version * 256 + LAYOUT}, ${s.geo.values.join(', ')}, ${fields.join(', ')})`;
}
