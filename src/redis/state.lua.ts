import { getKey, MARK } from './compose.lua.js';
import { type Geometry, luaNumber, type Packed, stateBytes } from './rule.js';

/**
 * How a bucket's or a window's state is stored in its key: a version byte (2; 3 past a
 * limiter's first reconfigure(), then its options version: Lineage), the writer's
 * settings (Geometry), then the fields, as little-endian doubles (struct.pack '<B' + 'd' × n):
 * one C call to read or write, where text needs a parse and a format per field. Doubles hold
 * every figure exactly (integers below 2^53). The version byte and the length make a value
 * of another format (another program's, or an older one) an error naming the key.
 */

/** struct format of a state of `fields` doubles. */
function format(fields: number): string {
  return `<B${'d'.repeat(fields)}`;
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
 * Lua: the counts `names` (declared by the caller) read from the text `v`, "a b …", with
 * " @u" after them past version 0: the writer's options version, a newer one than
 * `version` stops the call before any write (newer()).
 */
export function readCounts(v: string, names: readonly string[], version: number): string {
  const texts = names.map((_, i) => `c${i + 1}`);
  return `local ${texts.join(', ')}, d = string.match(${v}, '^${names.map(() => '(%S+)').join(' ')}(.*)$')
  if d ~= '' and tonumber(string.match(d, '^ @(%d+)$')) > ${version} then
    ${newer("tonumber(string.match(d, '^ @(%d+)$'))")}
  end
  ${names.join(', ')} = ${texts.map((t) => `tonumber(${t})`).join(', ')}`;
}

/** Lua: the text of the counts `names` as readCounts() reads them. */
export function writeCounts(names: readonly string[], version: number): string {
  return `string.format('${names.map(() => '%.17g').join(' ')}${version > 0 ? ` @${version}` : ''}', ${names.join(', ')})`;
}

/** Lua: the error of a state of `what` written with settings `was` (Lua text), not `has`. */
export function mismatch(what: string, was: string, has: string): string {
  return `error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds a ${what} state written with ' .. ${was} .. '; this limiter has ' .. ${has} .. ': limiters whose settings differ need a prefix each (or reset() the key)' .. ${MARK}))`;
}

/** The error text that newer() raises, as the runner reports it: the version. */
export const NEWER_ERROR = / failed: NEWER (\d+)$/;

/**
 * Lua: the load of K1's state `s` into locals of its fields' names (declared here); a key
 * holding none leaves them nil and adm, rej 0. Version 2 (what a never-reconfigured limiter
 * writes) holds the writer's settings first: others than `geo`'s are an error naming the
 * key and both. Version 3 holds the options version too: a newer one than the lineage's
 * stops the call (newer()), an older one must hold that version's settings and is
 * converted. Version 1 (written before settings were stored) is read as this limiter's own.
 */
export function loadState(s: Packed): string {
  const { what, fields, geo, lineage } = s;
  const version = lineage?.version ?? 0;
  const v3 = lineage?.fields ?? fields;
  const n = geo.values.length;
  const g = geo.values.map((_, i) => `g${i + 1}`);
  const error = `error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds no ${what} state of a known version (another program wrote it, or a ${what} of other options)' .. ${MARK}))`;
  const check = (values: readonly string[]) =>
    `if ${values.map((x, i) => `${g[i]} ~= ${x}`).join(' or ')} then ${mismatch(what, geo.describe(g), geo.describe(values))} end`;
  const list = (xs: readonly string[]) => `{${xs.join(', ')}}`;
  const at = (t: string) => geo.values.map((_, i) => `${t}[${i + 1}]`);
  const branches = [
    ...[fields, ...(lineage?.others ?? [])].map(
      (l) => `version == 2 and #v == ${stateBytes(l.length, n)} then
    _, ${g.join(', ')}, ${l.join(', ')} = struct.unpack('${format(n + l.length)}', v)`,
    ),
    `version == 3 and #v >= ${stateBytes(1)} then
    _, u = struct.unpack('<Bd', v)
    if u > ${version} then ${newer('u')} end
    if #v ~= ${stateBytes(v3.length, n + 1)} then ${error} end
    _, u, ${g.join(', ')}, ${v3.join(', ')} = struct.unpack('<Bd${'d'.repeat(n + v3.length)}', v)`,
    // Never reconfigured: the settings alone of a state of another length, for the error.
    ...(version === 0
      ? [
          `version == 2 and #v >= ${stateBytes(0, n)} then
    _, ${g.join(', ')} = struct.unpack('${format(n)}', v)
    ${check(geo.values)}
    ${error}`,
        ]
      : []),
    `version == 1 and #v == ${stateBytes(fields.length)} then
    _, ${fields.join(', ')} = struct.unpack('${format(fields.length)}', v)
    u, ${g.join(', ')} = ${version}, ${geo.values.join(', ')}`,
  ];
  // Version u's settings checked, then the fields carried over version by version, each at
  // the time it was made, as the in-memory class converted every state then. The tables are
  // built only here: on a key's first call under a new version. After a conversion the key's
  // TTL is set anew (SERVER false: no KEEPTTL), as the state's end moved with its settings.
  const convert = () => `else
    local GEOS = {${[...lineage!.past.map((x) => list(x.map(luaNumber))), list(geo.values)].join(', ')}}
    local TIMES = {${lineage!.times.map(luaNumber).join(', ')}}
    local was = GEOS[u + 1]
    if not was then ${error} end
    ${check(at('was'))}
    for w = u + 1, ${version} do
      local from, to, AT = GEOS[w], GEOS[w + 1], TIMES[w]
      ${lineage!.convert(at('from'), at('to'), 'AT')}
    end
    SERVER = false`;
  return `local ${[...new Set([...fields, ...v3])].join(', ')}
${getKey('K1')}
if v${s.none === undefined ? '' : ` and #v ~= ${s.none}`} then
  local version = string.byte(v, 1)
  local u = 0
  local _, ${g.join(', ')}
  if ${branches.join('\n  elseif ')}
  else
    ${error}
  end
  if u == ${version} then
    ${check(geo.values)}
  ${version === 0 ? '' : convert()}
  end
else
  adm, rej = 0, 0
end`;
}

/**
 * Lua: the stored string of state `s` (its fields' locals), with the writer's settings (and,
 * past version 0, its options version and the lineage's field list).
 */
export function encodeState(s: Packed): string {
  const { geo, lineage } = s;
  if (lineage && lineage.version > 0) {
    const fields = lineage.fields ?? s.fields;
    return `struct.pack('<Bd${'d'.repeat(geo.values.length + fields.length)}', 3, ${lineage.version}, ${geo.values.join(', ')}, ${fields.join(', ')})`;
  }
  return `struct.pack('${format(geo.values.length + s.fields.length)}', 2, ${geo.values.join(', ')}, ${s.fields.join(', ')})`;
}

/** A window's settings: its length W (µs) and, for a sliding window, the previous count's quantum. */
export function windowGeometry(w: string, quantum?: string): Geometry {
  return {
    values: quantum === undefined ? [w] : [w, quantum],
    describe: (v) =>
      quantum === undefined
        ? `'windowMs ' .. ${shown(`${v[0]} / 1000`)}`
        : `'windowMs ' .. ${shown(`${v[0]} / 1000`)} .. ' (previous count in steps of ' .. ${shown(`${v[1]}`)} .. ')'`,
  };
}

/** A bucket's settings: its units (K per emission interval) and units per µs. */
export function bucketGeometry(k: string, scale: string): Geometry {
  return {
    values: [k, scale],
    describe: (v) =>
      `'refillPerSecond ' .. ${shown(`${v[1]} * 1000000 / ${v[0]}`)} .. ' (' .. ${shown(`${v[0]}`)} .. ' units a permit)'`,
  };
}
