/** Argument and option checks. Messages name the option and show the value given. */

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
    throw new TypeError(`${name}: options must be an object, got ${show(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      throw new TypeError(
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
    throw new TypeError(`${owner}: option "${name}" must be an integer, got ${show(value)}`);
  }
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(
      `${owner}: option "${name}" must be an integer from ${min} to ${max}, got ${show(value)}`,
    );
  }
  return value;
}

export function positiveNumberOption(
  owner: string,
  name: string,
  value: unknown,
  min: number,
  max: number,
): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${owner}: option "${name}" must be a number, got ${show(value)}`);
  }
  if (!Number.isFinite(value) || value < min || value > max) {
    throw new RangeError(
      `${owner}: option "${name}" must be a finite number from ${min} to ${max}, got ${show(value)}`,
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
    throw new TypeError(
      `${owner}: option "${name}" must be one of ${allowed.map((a) => `"${a}"`).join(', ')}, got ${show(value)}`,
    );
  }
  return value as T;
}

/** Slow-path explanation of a bad `permits` argument; the hot path only calls this on failure. */
export function permitsError(owner: string, permits: unknown, limit: number): Error {
  if (typeof permits !== 'number') {
    return new TypeError(`${owner}: permits must be an integer, got ${show(permits)}`);
  }
  if (permits > limit && Number.isInteger(permits)) {
    return new RangeError(
      `${owner}: permits (${permits}) exceed the limit (${limit}); such a request can never succeed`,
    );
  }
  return new RangeError(
    `${owner}: permits must be an integer from 1 to ${limit}, got ${show(permits)}`,
  );
}

export function keyError(owner: string, key: unknown): Error {
  if (typeof key === 'number') {
    return new RangeError(`${owner}: a numeric key must be finite, got ${show(key)}`);
  }
  return new TypeError(`${owner}: key must be a string or a finite number, got ${show(key)}`);
}
