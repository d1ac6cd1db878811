import { describe, expect, it } from 'vitest';
import { LAYOUT_VERSION } from '../../src/engine/layout.js';
import {
  attach,
  Concurrency,
  FixedWindow,
  LeakyBucket,
  LimiterClosedError,
  ManualClock,
  QueueFullError,
  SlidingLog,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';

// biome-ignore lint/suspicious/noExplicitAny: these tests pass deliberately wrong types
type Loose = any;
const make = (Cls: Loose, options: unknown) => () => new Cls(options);

describe('option validation', () => {
  it.each([
    [TokenBucket, { capacity: 0, refillPerSecond: 1 }, RangeError, /"capacity".*got 0/],
    [TokenBucket, { capacity: 2.5, refillPerSecond: 1 }, RangeError, /"capacity".*2\.5/],
    [TokenBucket, { capacity: '5', refillPerSecond: 1 }, TypeError, /"capacity".*"5"/],
    [TokenBucket, { capacity: 5 }, TypeError, /"refillPerSecond".*undefined/],
    [TokenBucket, { capacity: 5, refillPerSecond: -1 }, RangeError, /"refillPerSecond".*-1/],
    [TokenBucket, { capacity: 5, refillPerSecond: Number.NaN }, RangeError, /refillPerSecond/],
    [
      TokenBucket,
      { capacity: 5, refillPerSecond: 1, capcity: 3 },
      TypeError,
      /unknown option "capcity"/,
    ],
    [TokenBucket, { capacity: 5, refillPerSecond: 1, keys: 0 }, RangeError, /"keys".*got 0/],
    [TokenBucket, { capacity: 5, refillPerSecond: 1, queueLimit: -1 }, RangeError, /"queueLimit"/],
    [
      TokenBucket,
      { capacity: 5, refillPerSecond: 1, queueOrder: 'lifo' },
      TypeError,
      /"queueOrder".*"lifo"/,
    ],
    [TokenBucket, { capacity: 5, refillPerSecond: 1, clock: {} }, TypeError, /"clock"/],
    [TokenBucket, null, TypeError, /options must be an object, got null/],
    [LeakyBucket, { capacity: 5, ratePerSecond: 0 }, RangeError, /"ratePerSecond".*got 0/],
    [
      LeakyBucket,
      { capacity: 1, ratePerSecond: 1, queueLimit: 2 },
      RangeError,
      /"queueLimit" must be an integer from 0 to 1 \(the bucket's "capacity".*got 2/,
    ],
    [FixedWindow, { limit: 5, windowMs: 0 }, RangeError, /"windowMs".*got 0/],
    [FixedWindow, { limit: 0, windowMs: 1000 }, RangeError, /"limit".*got 0/],
    [
      SlidingWindow,
      { limit: 2 ** 31, windowMs: 1000 },
      RangeError,
      /"limit" must be an integer from 1 to 2147483647/,
    ],
    // Windows under 1 ms keep the 32-bit word's range.
    [
      SlidingWindow,
      { limit: 100_000, windowMs: 0.5 },
      RangeError,
      /"limit" must be an integer from 1 to \d+,/,
    ],
    [SlidingLog, { limit: 2 ** 17, windowMs: 1000 }, RangeError, /"limit".*131072/],
    [Concurrency, { limit: -3 }, RangeError, /"limit".*-3/],
  ] as [Loose, unknown, ErrorConstructor, RegExp][])(
    '%o rejects %o',
    (Cls, options, ErrorType, message) => {
      expect(make(Cls, options)).toThrow(ErrorType);
      expect(make(Cls, options)).toThrow(message);
    },
  );

  it('refuses a table that would not fit in shared memory, naming "keys"', () => {
    expect(() => new SlidingLog({ limit: 65_536, windowMs: 1000, keys: 100_000 })).toThrow(
      /"keys"/,
    );
  });
});

describe('attach()', () => {
  it('rejects anything that is not a limiter handle with a clear TypeError', () => {
    const loose = attach as Loose;
    expect(() => loose({})).toThrow(/expected a limiter's handle/);
    expect(() => loose(null)).toThrow(TypeError);
    expect(() =>
      loose({ kind: 'atomic-limiter', version: LAYOUT_VERSION, buffer: new ArrayBuffer(8) }),
    ).toThrow(/SharedArrayBuffer/);
    const foreign = new SharedArrayBuffer(4096);
    expect(() =>
      loose({
        kind: 'atomic-limiter',
        version: LAYOUT_VERSION,
        buffer: foreign,
        clock: { kind: 'monotonic' },
      }),
    ).toThrow(/wrong magic/);
  });

  it('rejects a SlidingLog handle without its log pool', () => {
    const log = new SlidingLog({ limit: 5, windowMs: 1000 });
    const { logs: _logs, ...withoutPool } = log.handle;
    expect(() => attach(withoutPool)).toThrow(/SlidingLog: the handle has no log pool/);
  });

  it('rejects a handle or buffer of another layout version', () => {
    const bucket = new TokenBucket({ capacity: 1, refillPerSecond: 1 });
    expect(() => attach({ ...bucket.handle, version: 99 })).toThrow(/layout version 99/);
    const copy = new SharedArrayBuffer(bucket.handle.buffer.byteLength);
    new Uint8Array(copy).set(new Uint8Array(bucket.handle.buffer));
    new Int32Array(copy)[1] = 99; // the header's version word
    expect(() => attach({ ...bucket.handle, buffer: copy })).toThrow(/layout version 99/);
  });

  it('carries the ManualClock: advancing it moves the attached limiter too', () => {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 1, refillPerSecond: 1, clock });
    const twin = attach<TokenBucket>(bucket.handle);
    expect(twin.tryAcquire()).toBe(true);
    expect(bucket.tryAcquire()).toBe(false);
    clock.advance(1000);
    expect(twin.tryAcquire()).toBe(true);
  });
});

describe('errors', () => {
  it('have stable codes and names, and are Errors', () => {
    const closed = new LimiterClosedError();
    expect(closed).toBeInstanceOf(Error);
    expect(closed.code).toBe('ERR_LIMITER_CLOSED');
    expect(closed.name).toBe('LimiterClosedError');
    const full = new QueueFullError();
    expect(full.code).toBe('ERR_QUEUE_FULL');
    expect(full).not.toBeInstanceOf(LimiterClosedError);
  });

  it('are recognised by instanceof across copies of the package', () => {
    // A copy of the class from another bundle tags its instances with the same code.
    const other = Object.assign(new Error('x'), {
      [Symbol.for('atomic-limiter.error-code')]: 'ERR_LIMITER_CLOSED',
    });
    expect(other).toBeInstanceOf(LimiterClosedError);
    expect(other).not.toBeInstanceOf(QueueFullError);
  });
});

describe('misuse is refused clearly', () => {
  it('option and argument errors carry Node-style codes', () => {
    const errorOf = (f: () => unknown) => {
      try {
        f();
      } catch (error) {
        return error as { code?: string; name?: string };
      }
      throw new Error('no error');
    };
    // @ts-expect-error: capacity must be a number
    const t = errorOf(() => new TokenBucket({ capacity: '5', refillPerSecond: 1 }));
    expect(t).toMatchObject({ name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
    const r = errorOf(() => new TokenBucket({ capacity: 0, refillPerSecond: 1 }));
    expect(r).toMatchObject({ name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    expect(errorOf(() => limiter.tryAcquire('k', 6))).toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
    // @ts-expect-error: a key is a string or a number
    expect(errorOf(() => limiter.tryAcquire({}))).toMatchObject({ code: 'ERR_INVALID_ARG_TYPE' });
  });

  it('keys longer than 4096 bytes of UTF-8 are a RangeError; 4096 bytes are fine', () => {
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    expect(limiter.tryAcquire('a'.repeat(4096))).toBe(true);
    expect(limiter.tryAcquire('é'.repeat(2048))).toBe(true); // 4096 bytes
    expect(() => limiter.tryAcquire('a'.repeat(4097))).toThrow(/at most 4096 bytes/);
    expect(() => limiter.tryAcquire('é'.repeat(2049))).toThrow(RangeError);
    expect(() => limiter.consume('x'.repeat(100_000_000))).toThrow(RangeError);
  });

  it('stats() still reads after close(); the calls that take or give permits throw', () => {
    const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1 });
    limiter.tryAcquire('k', 2);
    limiter.close();
    expect(limiter.stats('k')).toMatchObject({ available: 3, admitted: 2 });
    expect(() => limiter.tryAcquire('k')).toThrow(/closed/);
    expect(() => limiter.refund('k')).toThrow(/closed/);
    expect(() => limiter.reset('k')).toThrow(/closed/);
  });
});
