import { describe, expect, it } from 'vitest';
import { rateLimit } from '../../src/http/index.js';
import { Concurrency, chain, FixedWindow, TokenBucket } from '../../src/index.js';
import { watchWarnings } from '../helpers/http.js';

watchWarnings();

const limiter = new FixedWindow({ limit: 10, windowMs: 1000 });

type Options = Parameters<typeof rateLimit>[0];

function bad(options: unknown): unknown {
  try {
    rateLimit(options as Options);
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('rateLimit() checks every option when it is made', () => {
  const cases: [string, unknown, ErrorConstructor, RegExp][] = [
    ['no options', undefined, TypeError, /options must be an object, got undefined/],
    ['unknown option', { limiter, max: 5 }, TypeError, /unknown option "max"/],
    ['no limiter', {}, TypeError, /option "limiter" must be a limiter.*got undefined/],
    ['not a limiter', { limiter: { tryAcquire() {} } }, TypeError, /option "limiter"/],
    ['key', { limiter, key: 'ip' }, TypeError, /option "key" must be a function, got "ip"/],
    ['ipv6Subnet type', { limiter, ipv6Subnet: '56' }, TypeError, /"ipv6Subnet".*got "56"/],
    ['ipv6Subnet low', { limiter, ipv6Subnet: 31 }, RangeError, /"ipv6Subnet".*32 to 64.*got 31/],
    ['ipv6Subnet high', { limiter, ipv6Subnet: 65 }, RangeError, /"ipv6Subnet".*got 65/],
    ['ipv6Subnet true', { limiter, ipv6Subnet: true }, TypeError, /"ipv6Subnet".*got true/],
    [
      'permits 0',
      { limiter, permits: 0 },
      RangeError,
      /option "permits" must be an integer from 1 to 10, got 0/,
    ],
    ['permits > limit', { limiter, permits: 11 }, RangeError, /"permits".*1 to 10, got 11/],
    ['permits 1.5', { limiter, permits: 1.5 }, RangeError, /"permits".*got 1.5/],
    [
      'permits string',
      { limiter, permits: '1' },
      TypeError,
      /"permits" must be an integer or a function/,
    ],
    [
      'headers',
      { limiter, headers: 'draft-9' },
      TypeError,
      /option "headers" must be .*got "draft-9"/,
    ],
    ['headers true', { limiter, headers: true }, TypeError, /option "headers".*got true/],
    [
      'headers twice',
      { limiter, headers: ['legacy', 'legacy'] },
      RangeError,
      /names a format twice/,
    ],
    [
      'headers clash',
      { limiter, headers: ['draft-7', 'draft-8'] },
      RangeError,
      /one of "draft-6", "draft-7", "draft-8"/,
    ],
    ['policyName', { limiter, policyName: 5 }, TypeError, /option "policyName" must be a string/],
    [
      'policyName empty',
      { limiter, policyName: '' },
      TypeError,
      /"policyName" must be non-empty printable ASCII/,
    ],
    ['policyName non-ASCII', { limiter, policyName: 'π' }, TypeError, /printable ASCII, got "π"/],
    [
      'policyName count',
      { limiter: chain(limiter, limiter), policyName: 'one' },
      RangeError,
      /each of the 2 limiter/,
    ],
    [
      'policyName twice the same',
      { limiter: chain(limiter, limiter), policyName: ['a', 'a'] },
      RangeError,
      /"policyName" must name each limiter differently/,
    ],
    [
      'statusCode 200',
      { limiter, statusCode: 200 },
      RangeError,
      /"statusCode" must be an integer from 400 to 599, got 200/,
    ],
    [
      'statusCode string',
      { limiter, statusCode: '429' },
      TypeError,
      /"statusCode" must be an integer, got "429"/,
    ],
    [
      'message',
      { limiter, message: 42 },
      TypeError,
      /option "message" must be a string, an object.*got 42/,
    ],
    [
      'message not serializable',
      { limiter, message: { retry: 1n } },
      TypeError,
      /option "message" must be a value JSON can send.*BigInt/,
    ],
    [
      'message null',
      { limiter, message: null },
      TypeError,
      /option "message" must be a string, an object.*got null/,
    ],
    [
      'onRejected',
      { limiter, onRejected: true },
      TypeError,
      /option "onRejected" must be a function, got true/,
    ],
    [
      'onError',
      { limiter, onError: 503 },
      TypeError,
      /option "onError" must be a function, got 503/,
    ],
    [
      'refundWhen',
      { limiter, refundWhen: 'failed' },
      TypeError,
      /option "refundWhen" must be a function, got "failed"/,
    ],
    [
      'refundWhen without refund()',
      { limiter: { consume: () => limiter.consume() }, refundWhen: () => true },
      TypeError,
      /option "refundWhen" needs a limiter with refund\(\)/,
    ],
    ['skip', { limiter, skip: 'no' }, TypeError, /option "skip" must be a function/],
    ['wait type', { limiter, wait: 'yes' }, TypeError, /option "wait"/],
    [
      'wait unknown',
      {
        limiter: new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 1 }),
        wait: { maxMs: 1 },
      },
      TypeError,
      /unknown option "maxMs"/,
    ],
    [
      'wait timeoutMs',
      {
        limiter: new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 1 }),
        wait: { timeoutMs: -1 },
      },
      RangeError,
      /"wait.timeoutMs".*got -1/,
    ],
    [
      'wait without a queue',
      { limiter: new TokenBucket({ capacity: 1, refillPerSecond: 1 }), wait: true },
      RangeError,
      /"wait" needs a limiter whose queueLimit is above 0/,
    ],
    [
      'wait with a chain member that never queues',
      {
        limiter: chain(
          new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 5 }),
          new FixedWindow({ limit: 10, windowMs: 1000 }),
        ),
        wait: true,
      },
      RangeError,
      /"wait" needs a limiter whose queueLimit is above 0 \(limiter 1 of the chain never queues\)/,
    ],
    [
      'wait with a chain member without acquire',
      {
        limiter: chain(new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 5 }), {
          limit: 1,
          consume: () => ({}) as never,
          refund: () => {},
        }),
        wait: true,
      },
      TypeError,
      /"wait" needs a limiter with acquire\(\) \(limiter 1 of the chain has none\)/,
    ],
    [
      'wait without acquire',
      { limiter: { limit: 1, consume: () => ({}) }, wait: true },
      TypeError,
      /"wait" needs a limiter with acquire\(\)/,
    ],
    [
      'trustProxy type',
      { limiter, trustProxy: {} },
      TypeError,
      /option "trustProxy" must be true, false, a hop count/,
    ],
    [
      'trustProxy hops',
      { limiter, trustProxy: -1 },
      RangeError,
      /"trustProxy" as a hop count.*got -1/,
    ],
    [
      'trustProxy address',
      { limiter, trustProxy: ['10.0.0.0/99'] },
      TypeError,
      /option "trustProxy":.*10\.0\.0\.0\/99/,
    ],
  ];
  for (const [name, options, type, message] of cases) {
    it(`${name}: ${type.name}`, () => {
      const error = bad(options);
      expect(error).toBeInstanceOf(type);
      expect((error as Error).message).toMatch(/^rateLimit/);
      expect((error as Error).message).toMatch(message);
      expect((error as { code: string }).code).toBe(
        type === TypeError ? 'ERR_INVALID_ARG_TYPE' : 'ERR_OUT_OF_RANGE',
      );
    });
  }

  it('accepts every documented form', () => {
    const queued = new TokenBucket({ capacity: 5, refillPerSecond: 1, queueLimit: 10 });
    const forms: Options[] = [
      { limiter },
      { limiter, key: (req) => req.url ?? '', ipv6Subnet: false, permits: 10 },
      { limiter, ipv6Subnet: 32, permits: () => 1, headers: ['draft-6', 'legacy'] },
      { limiter, headers: false, policyName: 'api', statusCode: 503, message: { e: 1 } },
      { limiter, message: () => 'no', onRejected: () => {}, skip: () => false },
      { limiter: queued, wait: true },
      { limiter: queued, wait: { timeoutMs: 0 }, trustProxy: 2 },
      { limiter, trustProxy: ['loopback', '10.0.0.0/8', '::1'] },
      { limiter: chain(limiter, new Concurrency({ limit: 3 })), policyName: ['a', 'b'] },
    ];
    for (const f of forms) expect(typeof rateLimit(f)).toBe('function');
  });
});
