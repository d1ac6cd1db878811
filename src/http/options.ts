import type { Key } from '../limiter.js';
import type { Decision, Lease } from '../options.js';
import { checkOptionsObject, integerOption, show, typeError } from '../validate.js';
import {
  AddressKeys,
  compileTrustProxy,
  ipv6SubnetOption,
  type TrustFn,
  type TrustProxy,
} from './address.js';
import { type HeaderFormat, headersOption } from './headers.js';
import { makePlan, type Plan, type PlanNeeds } from './plan.js';

/**
 * Any limiter of this package, seen by its methods (duck-typed): in memory (decides
 * synchronously), a `connectCluster` client, a Redis limiter, a `chain()` of any of them
 * (return promises). `acquire` is needed for `wait`; `release` for Concurrency.
 */
export interface HttpLimiter {
  /** Decides for a request (every limiter has it). */
  consume(key?: Key, permits?: number): Decision | PromiseLike<Decision>;
  /** Waits for permits: needed for the `wait` option. */
  acquire?(
    key?: Key,
    permits?: number,
    options?: { signal?: AbortSignal; timeoutMs?: number },
  ): PromiseLike<Lease>;
  /** Concurrency: called when the response ends. */
  release?(key?: Key, permits?: number): unknown;
  /** Needed for `refundWhen`. */
  refund?(key?: Key, permits?: number): unknown;
  /** The policy's limit, for the headers. */
  readonly limit?: number;
  /** Chooses how the headers describe the policy (window, bucket, concurrency). */
  readonly algorithm?: string;
  /** Checked against `wait`: a limiter whose queueLimit is 0 cannot wait. */
  readonly queueLimit?: number;
}

/** A response body: a string (text/plain) or a value sent as JSON. */
export type Message = string | Record<string, unknown> | readonly unknown[];

/**
 * A function option. Its parameters are checked both ways (as methods' are), so that a
 * function annotated with the framework's own, wider request type (Fastify's
 * `FastifyRequest`, an Express `Request` with your additions) is accepted.
 */
export type Fn<A extends unknown[], R> = { bivarianceHack(...args: A): R }['bivarianceHack'];

/** Options of `rateLimit()` and `fastifyRateLimit`. `Req`/`Res` are the framework's. */
export interface RateLimitOptions<Req, Res> {
  /**
   * The limiter deciding each request. Required. Or a function choosing it per request
   * (a plan's limiter: free 100/min, paid 10 000/min), which may return a promise; each
   * limiter it returns has its own policy in the headers.
   */
  limiter: HttpLimiter | Fn<[req: Req], HttpLimiter | PromiseLike<HttpLimiter>>;
  /**
   * What a request is counted under (a string or a finite number; may return a promise).
   * Default: the client address, IPv6 grouped by `ipv6Subnet`.
   */
  key?: Fn<[req: Req], Key | PromiseLike<Key>>;
  /** Prefix length IPv6 clients are grouped by (default 56), 32…64, or false for none. */
  ipv6Subnet?: number | false;
  /** Permits a request costs: an integer from 1 to the limiter's limit, or a function of it. */
  permits?: number | Fn<[req: Req], number>;
  /** Header formats (default 'draft-8'); false for none; `Retry-After` is always sent. */
  headers?: HeaderFormat | false | readonly HeaderFormat[];
  /**
   * The draft-8 policy name (one per limiter of a chain). Default from the limiter. With a
   * `limiter` function: a function of the limiter chosen, asked once per limiter.
   */
  policyName?: string | readonly string[] | ((limiter: HttpLimiter) => string | readonly string[]);
  /** Status of a refusal, 400…599 (default 429). */
  statusCode?: number;
  /** Body of a refusal (default 'Too Many Requests'): a string, JSON, or a function. */
  message?: Message | Fn<[req: Req, decision: Decision], Message | PromiseLike<Message>>;
  /** Answers a refusal yourself (instead of `statusCode` and `message`). */
  onRejected?: Fn<[req: Req, res: Res, decision: Decision], unknown>;
  /**
   * Called when the limiter fails (its backend unreachable under `whenUnavailable:
   * 'throw'`), instead of the default answer (503 with `Retry-After`). It may answer the
   * request itself, return (or resolve) `true` to let the request go on unlimited, or
   * throw (reject) to hand the error to the framework's error handler. If it does none of
   * these, the default answer is sent.
   */
  onError?: Fn<[error: Error, req: Req, res: Res], unknown>;
  /**
   * Asked when the response has finished: true gives the request's permits back (a login
   * route that counts failed attempts only: `(req, res) => res.statusCode < 400`). A
   * response that never finishes (its client went away) stays counted.
   */
  refundWhen?: Fn<[req: Req, res: Res], boolean>;
  /** Requests to let through without asking the limiter. */
  skip?: Fn<[req: Req], boolean>;
  /** Wait in the limiter's FIFO queue (`acquire()`) instead of refusing at once. */
  wait?: boolean | { timeoutMs?: number };
  /** node:http (and Connect): which proxies to believe about X-Forwarded-For. */
  trustProxy?: TrustProxy;
}

/** Validated options, as the engine uses them. */
export interface Config<Req, Res> {
  /** The fixed limiter's plan; undefined when `limiter` is a function (`pick`). */
  readonly plan: Plan | undefined;
  readonly pick: ((req: Req) => unknown) | undefined;
  /** The plan of a limiter `pick` returned (checked, and made once per limiter). */
  readonly planOf: (limiter: unknown) => Plan;
  /** The fixed limiter, or the function choosing one (what stacked middlewares compare). */
  readonly limiterOption: object;
  readonly key: ((req: Req) => unknown) | undefined;
  readonly addresses: AddressKeys;
  readonly trust: TrustFn | undefined;
  /** `trustProxy` as given (for the warnings about it). */
  readonly trustProxy: unknown;
  readonly permits: number;
  readonly permitsFn: ((req: Req) => unknown) | undefined;
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

/** Checks every option; a bad one is a TypeError or RangeError naming it. */
export function readOptions<Req, Res>(
  owner: string,
  options: unknown,
  known: readonly string[] = OPTION_NAMES,
): Config<Req, Res> {
  const o = checkOptionsObject(owner, options, known);
  const pick = typeof o.limiter === 'function' ? (o.limiter as (req: Req) => unknown) : undefined;

  let permits = 1;
  let permitsFn: ((req: Req) => unknown) | undefined;
  if (typeof o.permits === 'function') permitsFn = o.permits as (req: Req) => unknown;
  else if (o.permits !== undefined) {
    if (typeof o.permits !== 'number') {
      throw typeError(
        `${owner}: option "permits" must be an integer or a function, got ${show(o.permits)}`,
      );
    }
    // A limiter chosen per request is checked against it when chosen: makePlan().
    const limit = pick === undefined ? (o.limiter as { limit?: unknown } | null)?.limit : undefined;
    const max = typeof limit === 'number' && limit >= 1 ? limit : 2 ** 31 - 1;
    permits = integerOption(owner, 'permits', o.permits, 1, max);
  }

  const statusCode = integerOption(owner, 'statusCode', o.statusCode, 400, 599, 429);
  // Only a message left out takes the default: null is as bad a body as 42.
  const message = o.message === undefined ? 'Too Many Requests' : o.message;
  if (
    typeof message !== 'string' &&
    typeof message !== 'function' &&
    (typeof message !== 'object' || message === null)
  ) {
    throw typeError(
      `${owner}: option "message" must be a string, an object (sent as JSON) or a function, got ${show(message)}`,
    );
  }
  if (typeof message === 'object') {
    // Sent on every refusal: one that cannot be serialized (a BigInt, a cycle) would fail
    // each of them, not the configuration.
    try {
      JSON.stringify(message);
    } catch (error) {
      throw typeError(
        `${owner}: option "message" must be a value JSON can send: ${(error as Error).message}`,
      );
    }
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
    wait = { timeoutMs };
  }

  const refundWhen = fnOption(owner, 'refundWhen', o.refundWhen);
  const needs: PlanNeeds = {
    formats: headersOption(owner, o.headers),
    permits: permitsFn === undefined ? permits : undefined,
    wait: wait !== false,
    refundWhen: refundWhen !== undefined,
  };
  let plan: Plan | undefined;
  let planOf: (limiter: unknown) => Plan;
  if (pick === undefined) {
    plan = makePlan(owner, o.limiter, needs, o.policyName);
    const fixed = plan;
    planOf = () => fixed;
  } else {
    const names = o.policyName;
    if (names !== undefined && typeof names !== 'function') {
      throw typeError(
        `${owner}: option "policyName" must be a function of the limiter when "limiter" is a function, got ${show(names)}`,
      );
    }
    const plans = new WeakMap<object, Plan>();
    planOf = (limiter) => {
      let p = typeof limiter === 'object' && limiter !== null ? plans.get(limiter) : undefined;
      if (p === undefined) {
        const name = names === undefined ? undefined : (names as (l: unknown) => unknown)(limiter);
        p = makePlan(owner, limiter, needs, name, 'be a function that must');
        plans.set(limiter as object, p);
      }
      return p;
    };
  }
  return {
    plan,
    pick,
    planOf,
    limiterOption: o.limiter as object,
    key: fnOption(owner, 'key', o.key) as Config<Req, Res>['key'],
    addresses: new AddressKeys(ipv6SubnetOption(owner, o.ipv6Subnet)),
    trust: compileTrustProxy(owner, o.trustProxy),
    trustProxy: o.trustProxy,
    permits,
    permitsFn,
    statusCode,
    message,
    onRejected: fnOption(owner, 'onRejected', o.onRejected) as Config<Req, Res>['onRejected'],
    onError: fnOption(owner, 'onError', o.onError) as Config<Req, Res>['onError'],
    refundWhen: refundWhen as Config<Req, Res>['refundWhen'],
    skip: fnOption(owner, 'skip', o.skip) as Config<Req, Res>['skip'],
    wait,
  };
}
