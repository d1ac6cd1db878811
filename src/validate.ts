/**
 * Argument and option checks. Messages name the option and show the value given; the errors
 * carry Node's codes (`ERR_INVALID_ARG_TYPE` for a TypeError, `ERR_OUT_OF_RANGE` for a
 * RangeError) so that callers can tell them apart without parsing messages.
 */

/** A TypeError with `code: 'ERR_INVALID_ARG_TYPE'`, as Node reports a bad argument. */
export function typeError(message: string): TypeError {
  const error = new TypeError(message);
  Object.defineProperty(error, 'code', { value: 'ERR_INVALID_ARG_TYPE', enumerable: true });
  Error.captureStackTrace?.(error, typeError);
  return error;
}

/** A RangeError with `code: 'ERR_OUT_OF_RANGE'`, as Node reports a value out of range. */
export function rangeError(message: string): RangeError {
  const error = new RangeError(message);
  Object.defineProperty(error, 'code', { value: 'ERR_OUT_OF_RANGE', enumerable: true });
  Error.captureStackTrace?.(error, rangeError);
  return error;
}

/** Longest key, in bytes of UTF-8: longer keys are a RangeError (hashing them is not free). */
export const MAX_KEY_BYTES = 4096;

export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function') return 'a function';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  return String(value);
}

export function checkOptionsObject(
  name: string,
  options: unknown,
  known: readonly string[],
): Record<string, unknown> {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw typeError(`${name}: options must be an object, got ${show(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      throw typeError(
        `${name}: unknown option "${key}"; expected one of ${known.map((k) => `"${k}"`).join(', ')}`,
      );
    }
  }
  return options as Record<string, unknown>;
}

export function integerOption(
  owner: string,
  name: string,
  value: unknown,
  min: number,
  max: number,
  fallback?: number,
): number {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'number') {
    throw typeError(`${owner}: option "${name}" must be an integer, got ${show(value)}`);
  }
  if (!Number.isInteger(value) || value < min || value > max) {
    throw rangeError(
      `${owner}: option "${name}" must be an integer from ${min} to ${max}, got ${show(value)}`,
    );
  }
  return value;
}

/**
 * A finite number from `min` (or, `aboveMin`, strictly above it) to `max`, or a TypeError /
 * RangeError naming the option.
 */
export function positiveNumberOption(
  owner: string,
  name: string,
  value: unknown,
  min: number,
  max: number,
  aboveMin = false,
): number {
  if (typeof value !== 'number') {
    throw typeError(`${owner}: option "${name}" must be a number, got ${show(value)}`);
  }
  if (!Number.isFinite(value) || (aboveMin ? value <= min : value < min) || value > max) {
    const from = aboveMin ? `above ${min} and at most` : `from ${min} to`;
    throw rangeError(
      `${owner}: option "${name}" must be a finite number ${from} ${max}, got ${show(value)}`,
    );
  }
  return value;
}

export function enumOption<T extends string>(
  owner: string,
  name: string,
  value: unknown,
  allowed: readonly T[],
  fallback: T,
): T {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !allowed.includes(value as T)) {
    throw typeError(
      `${owner}: option "${name}" must be one of ${allowed.map((a) => `"${a}"`).join(', ')}, got ${show(value)}`,
    );
  }
  return value as T;
}

/**
 * The permits rule of every call that takes permits (tryAcquire, consume, acquire, refund,
 * release, on every backend): an integer from 1 to `limit`. (The decision's fast path,
 * enter() in engine/decision.ts, tests the same rule in fewer bytes of bytecode.)
 */
export function isPermits(permits: unknown, limit: number): permits is number {
  return (
    (permits as number) >= 1 &&
    (permits as number) <= limit &&
    ((permits as number) | 0) === permits
  );
}

/** Throws what permitsError() says unless isPermits(permits, limit). */
export function checkPermits(owner: string, permits: unknown, limit: number): void {
  if (!isPermits(permits, limit)) throw permitsError(owner, permits, limit);
}

/** Slow-path explanation of a bad `permits` argument; the hot path only calls this on failure. */
export function permitsError(owner: string, permits: unknown, limit: number): Error {
  if (typeof permits !== 'number') {
    return typeError(`${owner}: permits must be an integer, got ${show(permits)}`);
  }
  if (permits > limit && Number.isInteger(permits)) {
    return rangeError(
      `${owner}: permits (${permits}) exceed the limit (${limit}); such a request can never succeed`,
    );
  }
  return rangeError(
    `${owner}: permits must be an integer from 1 to ${limit}, got ${show(permits)}`,
  );
}

export function keyError(owner: string, key: unknown): Error {
  if (typeof key === 'number') {
    return rangeError(`${owner}: a numeric key must be finite, got ${show(key)}`);
  }
  if (typeof key === 'string') {
    return rangeError(
      `${owner}: a key may be at most ${MAX_KEY_BYTES} bytes of UTF-8, got ${Buffer.byteLength(key, 'utf8')} bytes`,
    );
  }
  return typeError(`${owner}: key must be a string or a finite number, got ${show(key)}`);
}

/**
 * Whether `key` is a key every limiter accepts: a string of at most MAX_KEY_BYTES bytes of
 * UTF-8, or a finite number. (A string of n UTF-16 units has n to 3n bytes of UTF-8, so only
 * lengths in between are measured.)
 */
export function isKey(key: unknown): key is string | number {
  if (typeof key === 'string') {
    return (
      key.length <= MAX_KEY_BYTES / 3 ||
      (key.length <= MAX_KEY_BYTES && Buffer.byteLength(key, 'utf8') <= MAX_KEY_BYTES)
    );
  }
  return typeof key === 'number' && Number.isFinite(key);
}

/**
 * Throws what every limiter throws for a bad key (`undefined`, the default key, passes).
 * For clients of other backends, so that they refuse exactly what memory refuses.
 */
export function checkKey(owner: string, key: unknown): void {
  if (key !== undefined && !isKey(key)) throw keyError(owner, key);
}

/**
 * The options of `acquire()` (every backend's): `signal`, an AbortSignal, and `timeoutMs`,
 * from 0 to 2^31 − 1 milliseconds.
 */
export function acquireOptions(
  owner: string,
  options: unknown,
): { signal: AbortSignal | undefined; timeoutMs: number | undefined } {
  const opts = checkOptionsObject(`${owner}.acquire`, options, ['signal', 'timeoutMs']);
  const signal = opts.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw typeError(
      `${owner}.acquire: option "signal" must be an AbortSignal, got ${show(signal)}`,
    );
  }
  const timeoutMs = opts.timeoutMs;
  if (timeoutMs !== undefined) {
    if (typeof timeoutMs !== 'number') {
      throw typeError(
        `${owner}.acquire: option "timeoutMs" must be a number, got ${show(timeoutMs)}`,
      );
    }
    if (!(timeoutMs >= 0) || timeoutMs > 2 ** 31 - 1) {
      throw rangeError(
        `${owner}.acquire: option "timeoutMs" must be from 0 to 2147483647, got ${show(timeoutMs)}`,
      );
    }
  }
  return { signal, timeoutMs };
}

/** A promise, or anything with a `then` method (what `await` would wait for). */
export function isThenable<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
