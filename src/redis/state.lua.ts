import { getKey, MARK } from './compose.lua.js';
import { luaNumber } from './rule.js';

/**
 * How a bucket's or a window's state is stored in its key: a version byte (2; 3 past a
 * limiter's first reconfigure(), then its options version: Lineage), the writer's
 * settings (Geometry), then the fields, as little-endian doubles (struct.pack '<B' + 'd' × n):
 * one C call to read or write, where text needs a parse and a format per field. Doubles hold
 * every figure exactly (integers below 2^53). The version byte and the length make a value
 * of another format (another program's, or an older one) an error naming the key.
 */

/**
 * What a state's numbers mean: the settings they are counted in (a window's length, a
 * bucket's units), written into the state beside them so that a limiter with other settings
 * on the same prefix (a rolling deploy that changed `windowMs`) never misreads them, nor
 * overwrites them as its own: it refuses the key with an error naming it and both settings.
 * Settings that only bound the count (a limit, a capacity) are not part of it: a limiter
 * reads another limit's count as its own, as `reconfigure()` does in memory.
 */
export interface Geometry {
  /** Lua expressions: this limiter's settings (defined where the state is decoded). */
  readonly values: readonly string[];
  /** Lua: the text naming settings `vals` (Lua expressions) for the error. */
  describe(vals: readonly string[]): string;
}

/** struct format of a state of `fields` doubles. */
function format(fields: number): string {
  return `<B${'d'.repeat(fields)}`;
}

/** The length of a stored state of `fields` doubles (and `geometry` settings), in bytes. */
export function stateBytes(fields: number, geometry = 0): number {
  return 1 + 8 * (fields + geometry);
}

/** Lua: a number for a message, shortest form. */
export function shown(x: string): string {
  return `string.format('%.15g', ${x})`;
}

/**
 * Where a limiter stands among its options' versions (reconfigure()): its own version and,
 * for each earlier one, the settings its states were written with; and how a state of an
 * earlier version is carried over to this limiter's settings. Version 0 (never
 * reconfigured) writes what it always wrote (a version-2 state); a later version writes
 * version 3, `[3, options version, settings…, fields…]`.
 */
export interface Lineage {
  /** This limiter's options version. */
  readonly version: number;
  /** The settings (Geometry values, as numbers) of versions 0 … version − 1. */
  readonly past: readonly (readonly number[])[];
  /** When (µs, the limiter's clock) each version from 1 on was made: `times[w - 1]`. */
  readonly times: readonly number[];
  /**
   * Lua: converts the fields of a state from settings `from` (Lua expressions, an earlier
   * version's) to settings `to` (the next version's), as seen at time `at` (a Lua
   * expression), when that version was made: the in-memory describe() and restate().
   */
  convert(from: readonly string[], to: readonly string[], at: string): string;
  /** The fields of a version-3 state, when they are not `names` (all decoded into locals). */
  readonly fields?: readonly string[];
  /** Other field lists a version-2 state of version 0 may have (another layout of it). */
  readonly others?: readonly (readonly string[])[];
}

/**
 * Lua: the call stops, changing nothing, because the state at K1 was written under a newer
 * options version `u` (a Lua expression) than this script's: its limiter takes up the newer
 * options (base.ts reads the error) and runs the call again.
 */
export function newer(u: string): string {
  return `error(redis.error_reply('NEWER ' .. string.format('%d', ${u}) .. ${MARK}))`;
}

/** The error text that newer() raises, as the runner reports it: the version. */
export const NEWER_ERROR = / failed: NEWER (\d+)$/;

/**
 * Lua: reads the string `v` into the local names given (declared by the caller). Version 2
 * (what a never-reconfigured limiter writes) holds the writer's settings first: others than
 * `geo`'s are an error naming the key and both. Version 3 holds the options version too: a
 * newer one than `lineage`'s stops the call (newer()), an older one must hold that
 * version's settings and is converted. Version 1 (written before settings were stored) is
 * read as this limiter's own.
 */
export function decodeState(
  v: string,
  names: readonly string[],
  what: string,
  geo: Geometry,
  lineage?: Lineage,
): string {
  const n = geo.values.length;
  const error = `'ERR atomic-limiter: ' .. K1 .. ' holds no ${what} state of a known version (another program wrote it, or a ${what} of other options)'`;
  const stored = geo.values.map((_, i) => `g${i + 1}`);
  const differs = (values: readonly string[]) =>
    values.map((x, i) => `${stored[i]} ~= ${x}`).join(' or ');
  const mismatch = (values: readonly string[]) =>
    `error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds a ${what} state written with ' .. ${geo.describe(stored)} .. '; this limiter has ' .. ${geo.describe(values)} .. ': limiters whose settings differ need a prefix each (or reset() the key)' .. ${MARK}))`;
  const version = lineage?.version ?? 0;
  if (version === 0) {
    // One unpack of a state of the length written now; the settings alone of another length
    // (unpack() of a shorter string fails with a message of its own), for the error. A
    // version-3 state was written under newer options.
    return `local version = string.byte(${v}, 1)
  if version == 2 and #${v} == ${stateBytes(names.length, n)} then
    local _, ${stored.join(', ')}
    _, ${stored.join(', ')}, ${names.join(', ')} = struct.unpack('${format(n + names.length)}', ${v})
    if ${differs(geo.values)} then ${mismatch(geo.values)} end
  elseif version == 2 and #${v} >= ${stateBytes(0, n)} then
    local _, ${stored.join(', ')} = struct.unpack('${format(n)}', ${v})
    if ${differs(geo.values)} then ${mismatch(geo.values)} end
    error(redis.error_reply(${error} .. ${MARK}))
  elseif version == 1 and #${v} == ${stateBytes(names.length)} then
    local _
    _, ${names.join(', ')} = struct.unpack('${format(names.length)}', ${v})
  elseif version == 3 and #${v} >= ${stateBytes(1)} then
    local _, u = struct.unpack('<Bd', ${v})
    ${newer('u')}
  else
    error(redis.error_reply(${error} .. ${MARK}))
  end`;
  }
  const fields = lineage!.fields ?? names;
  const list = (xs: readonly string[]) => `{${xs.join(', ')}}`;
  const at = (t: string) => geo.values.map((_, i) => `${t}[${i + 1}]`);
  // Version u's settings (< VERSION) checked, then the fields carried over version by
  // version, each at the time it was made, as the in-memory class converted every state
  // then. The tables are built only here: on a key's first call under a new version. After
  // a conversion the key's TTL is set anew (SERVER false: no KEEPTTL), as the state's end
  // moved with its settings.
  const convert = `local GEOS = {${[...lineage!.past.map((g) => list(g.map(luaNumber))), list(geo.values)].join(', ')}}
    local TIMES = {${lineage!.times.map(luaNumber).join(', ')}}
    local was = GEOS[u + 1]
    if not was then error(redis.error_reply(${error} .. ${MARK})) end
    if ${differs(at('was'))} then ${mismatch(at('was'))} end
    for w = u + 1, VERSION do
      local from, to, AT = GEOS[w], GEOS[w + 1], TIMES[w]
      ${lineage!.convert(at('from'), at('to'), 'AT')}
    end
    SERVER = false`;
  const layouts = [names, ...(lineage!.others ?? [])];
  const two = layouts
    .map(
      (l) => `#${v} == ${stateBytes(l.length, n)} then
    _, ${stored.join(', ')}, ${l.join(', ')} = struct.unpack('${format(n + l.length)}', ${v})`,
    )
    .join('\n  elseif version == 2 and ');
  return `local version = string.byte(${v}, 1)
  local u = 0
  local _, ${stored.join(', ')}
  if version == 3 and #${v} >= ${stateBytes(1)} then
    _, u = struct.unpack('<Bd', ${v})
    if u > VERSION then ${newer('u')} end
    if #${v} ~= ${stateBytes(fields.length, n + 1)} then error(redis.error_reply(${error} .. ${MARK})) end
    _, u, ${stored.join(', ')}, ${fields.join(', ')} = struct.unpack('<Bd${'d'.repeat(n + fields.length)}', ${v})
  elseif version == 2 and ${two}
  elseif version == 1 and #${v} == ${stateBytes(names.length)} then
    _, ${names.join(', ')} = struct.unpack('${format(names.length)}', ${v})
    u = VERSION
    ${stored.map((s, i) => `${s} = ${geo.values[i]}`).join('\n    ')}
  else
    error(redis.error_reply(${error} .. ${MARK}))
  end
  if u == VERSION then
    if ${differs(geo.values)} then ${mismatch(geo.values)} end
  else
    ${convert}
  end`;
}

/**
 * Lua: the load of K1's state of `fields` and then the admitted and rejected counters, as
 * locals of those names: decoded by decodeState() when the key holds one; else the fields
 * nil (a fresh key) and the counters 0.
 */
export function loadState(
  fields: readonly string[],
  what: string,
  geo: Geometry,
  lineage: Lineage | undefined,
): string {
  const names = [...fields, 'adm', 'rej'];
  return `local ${names.join(', ')}
${getKey('K1')}
if v then
  ${decodeState('v', names, what, geo, lineage)}
else
  adm, rej = 0, 0
end`;
}

/** Lua: `local VERSION`, the options version a lineage's decodeState() compares with. */
export function versionConst(lineage: Lineage | undefined): string {
  return lineage && lineage.version > 0 ? `local VERSION = ${lineage.version}` : '';
}

/**
 * Lua: the stored string of the values given (Lua expressions), with the writer's settings
 * (and, past version 0, its options version and the lineage's field list).
 */
export function encodeState(values: readonly string[], geo: Geometry, lineage?: Lineage): string {
  if (lineage && lineage.version > 0) {
    const fields = lineage.fields ?? values;
    return `struct.pack('<Bd${'d'.repeat(geo.values.length + fields.length)}', 3, VERSION, ${geo.values.join(', ')}, ${fields.join(', ')})`;
  }
  return `struct.pack('${format(geo.values.length + values.length)}', 2, ${geo.values.join(', ')}, ${values.join(', ')})`;
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

/**
 * A segmented SlidingWindow's state is text ("segment admitted rejected c1 … cN"); its
 * writer's settings go first as one word, `g<segment µs>/<segments>` (segmentsTag()).
 * Lua: checks the first word `first` of the stored text `v` against this limiter's `tag`
 * (a Lua expression); evaluates to how many words to skip (0 or 1). A text without the
 * word (written before settings were stored) is read as this limiter's own; a value that is
 * not such text (a SlidingWindow without segments wrote it, or another program) is an error
 * naming the key.
 */
export function checkSegmentsTag(first: string, tag: string, version = 0): string {
  const describe = (t: string) =>
    `(function(t) local s, n = string.match(t, '^g(%d+)/(%d+)') if not s then return t end return 'windowMs ' .. ${shown('s * n / 1000')} .. ' in ' .. n .. ' segments' end)(${t})`;
  // The word carries the writer's options version after '@' past version 0: a newer one
  // stops the call (newer()); an older one, of the same settings (they cannot change with
  // segments), is read as it is: its counts are plain counts under any limit.
  const base = tag.replace(/@\d+'$/, "'");
  return `(function()
  if ${first} == ${tag} then return 1 end
  if ${first} and string.byte(${first}, 1) == 103 then
    local b, u = string.match(${first}, '^(g%d+/%d+)@(%d+)$')
    if not b then b, u = ${first}, '0' end
    if b == ${base} then
      if tonumber(u) > ${version} then ${newer('tonumber(u)')} end
      return 1
    end
    error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds a SlidingWindow state written with ' .. ${describe(first)} .. '; this limiter has ' .. ${describe(tag)} .. ': limiters whose settings differ need a prefix each (or reset() the key)' .. ${MARK}))
  end
  if not (${first} and tonumber(${first})) then
    error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds no SlidingWindow state with segments (a SlidingWindow without segments wrote it, or another program)' .. ${MARK}))
  end
  return 0
end)()`;
}

/**
 * The settings word of a segmented SlidingWindow's state (checkSegmentsTag()), with the
 * writer's options version past version 0.
 */
export function segmentsTag(segmentUs: number, segments: number, version = 0): string {
  return version > 0 ? `g${segmentUs}/${segments}@${version}` : `g${segmentUs}/${segments}`;
}
