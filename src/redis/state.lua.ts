/**
 * How a bucket's or a fixed window's state is stored in its key: a version byte (1), then
 * the fields as little-endian doubles (struct.pack '<B' + 'd' × n). The shared scripts,
 * their batch form and the single-call scripts read and write it through these snippets,
 * so a key may pass from one to another.
 *
 * Why binary: `struct.unpack` / `struct.pack` are one C call each, where the text form
 * cost a `string.match`, a `tonumber` per field and a `string.format` — measured as the
 * largest part of a single call's Lua work in Redis. Doubles hold every figure exactly
 * (integers below 2^53). The version byte and the length make a value of another format
 * (another program's, or an older one) an error naming the key, never a misread.
 */

/** struct format of a state of `fields` doubles. */
function format(fields: number): string {
  return `<B${'d'.repeat(fields)}`;
}

/** The length of a stored state of `fields` doubles, in bytes. */
export function stateBytes(fields: number): number {
  return 1 + 8 * fields;
}

/** Lua: reads the string `v` into the local names given (declared by the caller). */
export function decodeState(v: string, names: readonly string[], what: string): string {
  const bytes = stateBytes(names.length);
  const error = `'ERR atomic-limiter: ' .. KEYS[1] .. ' holds no ${what} state of this version'`;
  // The length first: unpack() of a shorter string fails with a message of its own.
  return `if #${v} ~= ${bytes} then error(redis.error_reply(${error})) end
  local version
  version, ${names.join(', ')} = struct.unpack('${format(names.length)}', ${v})
  if version ~= 1 then error(redis.error_reply(${error})) end`;
}

/** Lua: the stored string of the values given (Lua expressions). */
export function encodeState(values: readonly string[]): string {
  return `struct.pack('${format(values.length)}', 1, ${values.join(', ')})`;
}
