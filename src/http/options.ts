import type { Key } from '../limiter.js';
import type { Decision, Lease } from '../options.js';
import { checkOptionsObject, integerOption, rangeError, show, typeError } from '../validate.js';
import {
  AddressKeys,
  compileTrustProxy,
  ipv6SubnetOption,
  type TrustFn,
  type TrustProxy,
} from './address.js';
import {
  flattenLimiters,
  type HeaderFormat,
  HeaderWriter,
  headersOption,
  policyNamesOption,
} from './headers.js';

/**
 * Any limiter of this package, seen by its methods (duck-typed): in memory (decides
 * synchronously), a `connectCluster` client, a Redis limiter, a `chain()` of any of them
 * (return promises). `acquire` is needed for `wait`; `release` for Concurrency.
 */
export interface HttpLimiter {
  consume(key?: Key, permits?: number): Decision | PromiseLike<Decision>;
  acquire?(
    key?: Key,
    permits?: number,
    options?: { signal?: AbortSignal; timeoutMs?: number },
  ): PromiseLike<Lease>;
  release?(key?: Key, permits?: number): unknown;
  /** Needed for `refundWhen`. */
  refund?(key?: Key, permits?: number): unknown;
  readonly limit?: number;
  readonly algorithm?: string;
  readonly queueLimit?: number;
}

/** A response body: a string (text/plain) or a value sent as JSON. */
export type Message = string | Record<string, unknown> | readonly unknown[];

/** Options of `rateLimit()` and `fastifyRateLimit`. `Req`/`Res` are the framework's. */
export interface RateLimitOptions<Req, Res> {
  /** The limiter deciding each request. Required. */
  limiter: HttpLimiter;
  /**
   * What a request is counted under (a string or a finite number; may return a promise).
   * Default: the client address, IPv6 grouped by `ipv6Subnet`.
   */
  key?: (req: Req) => Key | PromiseLike<Key>;
  /** Prefix length IPv6 clients are grouped by (default 56), 32…64, or false for none. */
  ipv6Subnet?: number | false;
  /** Permits a request costs: an integer from 1 to the limiter's limit, or a function of it. */
  permits?: number | ((req: Req) => number);
  /** Header formats (default 'draft-8'); false for none; `Retry-After` is always sent. */
  headers?: HeaderFormat | false | readonly HeaderFormat[];
  /** The draft-8 policy name (one per limiter of a chain). Default from the limiter. */
  policyName?: string | readonly string[];
  /** Status of a refusal, 400…599 (default 429). */
  statusCode?: number;
  /** Body of a refusal (default 'Too Many Requests'): a string, JSON, or a function. */
  message?: Message | ((req: Req, decision: Decision) => Message | PromiseLike<Message>);
  /** Answers a refusal yourself (instead of `statusCode` and `message`). */
  onRejected?: (req: Req, res: Res, decision: Decision) => unknown;
  /**
   * Called when the limiter fails (its backend unreachable under `whenUnavailable:
   * 'throw'`), instead of the default answer (503 with `Retry-After`). It may answer the
   * request itself, return (or resolve) `true` to let the request go on unlimited, or
   * throw (reject) to hand the error to the framework's error handler. If it does none of
   * these, the default answer is sent.
   */
  onError?: (error: Error, req: Req, res: Res) => unknown;
  /**
   * Asked when the response has finished: true gives the request's permits back (a login
   * route that counts failed attempts only: `(req, res) => res.statusCode < 400`). A
   * response that never finishes (its client went away) stays counted.
   */
  refundWhen?: (req: Req, res: Res) => boolean;
  /** Requests to let through without asking the limiter. */
  skip?: (req: Req) => boolean;
  /** Wait in the limiter's FIFO queue (`acquire()`) instead of refusing at once. */
  wait?: boolean | { timeoutMs?: number };
  /** node:http (and Connect): which proxies to believe about X-Forwarded-For. */
  trustProxy?: TrustProxy;
}

/** Validated options, as the engine uses them. */
export interface Config<Req, Res> {
  readonly limiter: HttpLimiter;
  readonly key: ((req: Req) => unknown) | undefined;
  readonly addresses: AddressKeys;
  readonly trust: TrustFn | undefined;
  readonly permits: number;
  readonly permitsFn: ((req: Req) => unknown) | undefined;
  /** The largest permits a request may ask for, where the limiter tells it. */
  readonly maxPermits: number;
  readonly headers: HeaderWriter;
  readonly statusCode: number;
  readonly message: unknown;
  readonly onRejected: ((req: Req, res: Res, decision: Decision) => unknown) | undefined;
  readonly onError: ((error: Error, req: Req, res: Res) => unknown) | undefined;
  readonly refundWhen: ((req: Req, res: Res) => unknown) | undefined;
  readonly skip: ((req: Req) => unknown) | undefined;
  readonly wait: false | { readonly timeoutMs: number | undefined };
}

export const OPTION_NAMES = [
  'limiter',
  'key',
  'ipv6Subnet',
  'permits',
  'headers',
  'policyName',
  'statusCode',
  'message',
  'onRejected',
  'onError',
  'refundWhen',
  'skip',
  'wait',
  'trustProxy',
] as const;

const MAX_TIMEOUT_MS = 2 ** 31 - 1;

function fnOption(owner: string, name: string, value: unknown) {
  if (value !== undefined && typeof value !== 'function') {
    throw typeError(`${owner}: option "${name}" must be a function, got ${show(value)}`);
  }
  return value as ((...args: never[]) => unknown) | undefined;
}

function refundWhenOption(owner: string, limiter: HttpLimiter, value: unknown) {
  const f = fnOption(owner, 'refundWhen', value);
  if (f !== undefined && typeof limiter.refund !== 'function') {
    throw typeError(`${owner}: option "refundWhen" needs a limiter with refund()`);
  }
  return f;
}

/** Checks every option; a bad one is a TypeError or RangeError naming it. */
export function readOptions<Req, Res>(
  owner: string,
  options: unknown,
  known: readonly string[] = OPTION_NAMES,
): Config<Req, Res> {
  const o = checkOptionsObject(owner, options, known);
  const limiter = o.limiter as HttpLimiter;
  if (typeof limiter !== 'object' || limiter === null || typeof limiter.consume !== 'function') {
    throw typeError(
      `${owner}: option "limiter" must be a limiter (an object with consume(), e.g. a TokenBucket, a connectCluster client, a Redis limiter or a chain()), got ${show(limiter)}`,
    );
  }
  const maxPermits =
    typeof limiter.limit === 'number' && limiter.limit >= 1 ? limiter.limit : 2 ** 31 - 1;

  let permits = 1;
  let permitsFn: ((req: Req) => unknown) | undefined;
  if (typeof o.permits === 'function') permitsFn = o.permits as (req: Req) => unknown;
  else if (o.permits !== undefined) {
    if (typeof o.permits !== 'number') {
      throw typeError(
        `${owner}: option "permits" must be an integer or a function, got ${show(o.permits)}`,
      );
    }
    permits = integerOption(owner, 'permits', o.permits, 1, maxPermits);
  }

  const statusCode = integerOption(owner, 'statusCode', o.statusCode, 400, 599, 429);
  const message = o.message ?? 'Too Many Requests';
  if (
    typeof message !== 'string' &&
    typeof message !== 'function' &&
    (typeof message !== 'object' || message === null)
  ) {
    throw typeError(
      `${owner}: option "message" must be a string, an object (sent as JSON) or a function, got ${show(message)}`,
    );
  }

  let wait: Config<Req, Res>['wait'] = false;
  if (o.wait !== undefined && o.wait !== false) {
    let timeoutMs: number | undefined;
    if (o.wait !== true) {
      const w = checkOptionsObject(`${owner}: option "wait"`, o.wait, ['timeoutMs']);
      if (w.timeoutMs !== undefined) {
        timeoutMs = integerOption(owner, 'wait.timeoutMs', w.timeoutMs, 0, MAX_TIMEOUT_MS);
      }
    }
    if (typeof limiter.acquire !== 'function') {
      throw typeError(`${owner}: option "wait" needs a limiter with acquire()`);
    }
    if (limiter.queueLimit === 0) {
      throw rangeError(
        `${owner}: option "wait" needs a limiter whose queueLimit is above 0 (this one never queues)`,
      );
    }
    wait = { timeoutMs };
  }

  const headerFormats = headersOption(owner, o.headers);
  const names = policyNamesOption(owner, o.policyName, flattenLimiters(limiter).length);
  return {
    limiter,
    key: fnOption(owner, 'key', o.key) as Config<Req, Res>['key'],
    addresses: new AddressKeys(ipv6SubnetOption(owner, o.ipv6Subnet)),
    trust: compileTrustProxy(owner, o.trustProxy),
    permits,
    permitsFn,
    maxPermits,
    headers: new HeaderWriter(limiter, headerFormats, names),
    statusCode,
    message,
    onRejected: fnOption(owner, 'onRejected', o.onRejected) as Config<Req, Res>['onRejected'],
    onError: fnOption(owner, 'onError', o.onError) as Config<Req, Res>['onError'],
    refundWhen: refundWhenOption(owner, limiter, o.refundWhen) as Config<Req, Res>['refundWhen'],
    skip: fnOption(owner, 'skip', o.skip) as Config<Req, Res>['skip'],
    wait,
  };
}
