import { MARK } from './compose.lua.js';

/**
 * How a bucket's or a window's state is stored in its key: a version byte (2), the writer's
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
 * Lua: reads the string `v` into the local names given (declared by the caller). Version 2
 * (what is written now) holds the writer's settings first: others than `geo`'s are an
 * error naming the key and both. Version 1 (written before settings were stored) is read as
 * this limiter's own.
 */
export function decodeState(
  v: string,
  names: readonly string[],
  what: string,
  geo?: Geometry,
): string {
  if (geo === undefined) return decodeUnmarked(v, names, what);
  const n = geo.values.length;
  const error = `'ERR atomic-limiter: ' .. K1 .. ' holds no ${what} state of a known version (another program wrote it, or a ${what} of other options)'`;
  const stored = geo.values.map((_, i) => `g${i + 1}`);
  const differs = geo.values.map((x, i) => `${stored[i]} ~= ${x}`).join(' or ');
  const mismatch = `error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds a ${what} state written with ' .. ${geo.describe(stored)} .. '; this limiter has ' .. ${geo.describe(geo.values)} .. ': limiters whose settings differ need a prefix each (or reset() the key)' .. ${MARK}))`;
  // One unpack of a state of the length written now; the settings alone of another length
  // (unpack() of a shorter string fails with a message of its own), for the error.
  return `local version = string.byte(${v}, 1)
  if version == 2 and #${v} == ${stateBytes(names.length, n)} then
    local _, ${stored.join(', ')}
    _, ${stored.join(', ')}, ${names.join(', ')} = struct.unpack('${format(n + names.length)}', ${v})
    if ${differs} then ${mismatch} end
  elseif version == 2 and #${v} >= ${stateBytes(0, n)} then
    local _, ${stored.join(', ')} = struct.unpack('${format(n)}', ${v})
    if ${differs} then ${mismatch} end
    error(redis.error_reply(${error} .. ${MARK}))
  elseif version == 1 and #${v} == ${stateBytes(names.length)} then
    local _
    _, ${names.join(', ')} = struct.unpack('${format(names.length)}', ${v})
  else
    error(redis.error_reply(${error} .. ${MARK}))
  end`;
}

/**
 * Lua: decodeState() of a state that records no settings (version 1): for an algorithm
 * whose stored numbers no setting reinterprets, or not given one yet.
 */
function decodeUnmarked(v: string, names: readonly string[], what: string): string {
  const error = `'ERR atomic-limiter: ' .. K1 .. ' holds no ${what} state of this version'`;
  return `if #${v} ~= ${stateBytes(names.length)} then error(redis.error_reply(${error} .. ${MARK})) end
  local version
  version, ${names.join(', ')} = struct.unpack('${format(names.length)}', ${v})
  if version ~= 1 then error(redis.error_reply(${error} .. ${MARK})) end`;
}

/** Lua: the stored string of the values given (Lua expressions), with the writer's settings. */
export function encodeState(values: readonly string[], geo?: Geometry): string {
  if (geo === undefined) return `struct.pack('${format(values.length)}', 1, ${values.join(', ')})`;
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
export function checkSegmentsTag(first: string, tag: string): string {
  const describe = (t: string) =>
    `(function(t) local s, n = string.match(t, '^g(%d+)/(%d+)$') if not s then return t end return 'windowMs ' .. ${shown('s * n / 1000')} .. ' in ' .. n .. ' segments' end)(${t})`;
  return `(function()
  if ${first} == ${tag} then return 1 end
  if ${first} and string.byte(${first}, 1) == 103 then
    error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds a SlidingWindow state written with ' .. ${describe(first)} .. '; this limiter has ' .. ${describe(tag)} .. ': limiters whose settings differ need a prefix each (or reset() the key)' .. ${MARK}))
  end
  if not (${first} and tonumber(${first})) then
    error(redis.error_reply('ERR atomic-limiter: ' .. K1 .. ' holds no SlidingWindow state with segments (a SlidingWindow without segments wrote it, or another program)' .. ${MARK}))
  end
  return 0
end)()`;
}

/** The settings word of a segmented SlidingWindow's state (checkSegmentsTag()). */
export function segmentsTag(segmentUs: number, segments: number): string {
  return `g${segmentUs}/${segments}`;
}
