/**
 * The wire between a cluster worker and the primary. A round trip costs tens of µs, and
 * Node's default IPC serialization is JSON, whose cost grows with every object and array
 * in a message (an object or array per call costs JSON work per call). So a batch of calls
 * is one flat array of numbers and strings, and its answers are another, in the order of
 * the calls: no ids, no per-call objects. Only `acquire()`, whose answer may come much
 * later, carries an id.
 *
 * Worker → primary
 *   { mark, t: 'hello' }                          which names do you serve?
 *   { mark, t: 'c', s, c: [record, …] }           batch number s; records below
 * Primary → worker
 *   { mark, t: 'ready', served: { name: Description } }   on hello, when servers change and
 *                                                 when a served limiter was reconfigured
 *   { mark, t: 'r', s, v: [answer, …], e? }       answers of batch s, in call order; `e`: the
 *                                                 calls past the last answer were not run
 *   { mark, t: 'r', s, v: [], e, g: [k, answer, …] }  batch s refused whole (back-pressure),
 *                                                 but its give-backs ran: call k's answer
 *   { mark, t: 'a', v: [id, ok, value, …] }       acquire() outcomes: lease id or error
 *
 * Records (a key is null for the default key, else a string or a finite number):
 *   NAME name                  the limiter the next records address
 *   TRY key permits            → 1 | 0
 *   CONSUME key permits        → a Decision (DECISION_SIZE values)
 *   TAKE key min max           → granted (0 or min…max), the Decision of the grant, the
 *                                time it was taken (the limiter's clock, µs) and until when
 *                                its permits count where they were counted (µs; −1: always)
 *   REFUND key permits         → 0
 *   GIVE key permits takenUs   → 0 (a block's unspent permits, back to where they were taken)
 *   RELEASE key permits        → 0
 *   STATS key                  → available, queued, admitted, rejected
 *   RESET key                  → 0
 *   ACQUIRE id key permits timeoutMs(-1: none)   (answered later in an 'a' message)
 *   ABORT id                   (no answer)
 *   DROP leaseId               (no answer)
 * Any answer may instead be one error object { name, code?, message }. A refusal's `g` numbers
 * the calls from 0 in batch order, counting every record but NAME, ACQUIRE, ABORT and DROP;
 * its give-backs are REFUND, GIVE and RELEASE (DROP and ABORT run too, answered by nothing).
 */
import {
  ClusterTimeoutError,
  ClusterUnavailableError,
  LimiterClosedError,
  QueueFullError,
} from '../errors.js';
import type { Key } from '../limiter.js';
import type { AlgorithmName, Decision, Stats } from '../options.js';

// Every message carries MARK, so the user's own IPC messages pass through untouched; the
// version changes with the protocol.
export const MARK = 'atomic-limiter/cluster@3';

export const NAME = 0;
export const TRY = 1;
export const CONSUME = 2;
export const TAKE = 3;
export const REFUND = 4;
export const RELEASE = 5;
export const STATS = 6;
export const RESET = 7;
export const ACQUIRE = 8;
export const ABORT = 9;
export const DROP = 10;
export const GIVE = 11;

/** Values per call record, by op (NAME, ABORT and DROP are two: the op and its value). */
export const CALL_WIDTHS: Readonly<Record<number, number>> = {
  [TRY]: 3,
  [CONSUME]: 3,
  [TAKE]: 4,
  [REFUND]: 3,
  [GIVE]: 4,
  [RELEASE]: 3,
  [STATS]: 2,
  [RESET]: 2,
  [ACQUIRE]: 5,
};

/** Values in one answer (allowed, remaining, limit, retryAfterMs, resetAfterMs, reason). */
export const DECISION_SIZE = 6;

/**
 * Bounds on one batch. The primary refuses a batch of more than MAX_RECORD_VALUES values
 * without walking it; a worker's batch holds at most MAX_CALLS_PER_BATCH records of any
 * kind (NAME, ACQUIRE, ABORT and DROP included) and never more values than that bound.
 */
export const MAX_CALLS_PER_BATCH = 4096;
export const MAX_RECORD_VALUES = 6 * MAX_CALLS_PER_BATCH;

export type Value = string | number | null;

/** What a worker learns about a served limiter: its algorithm and public options. */
export interface Description {
  algorithm: AlgorithmName;
  /** The limiter's options version: a reconfigure() changes it (and the figures below). */
  version: number;
  limit: number;
  windowMs?: number;
  capacity?: number;
  refillPerSecond?: number;
  ratePerSecond?: number;
}

export interface WireError {
  name: string;
  code?: string;
  message: string;
}

export type Message =
  | { mark: typeof MARK; t: 'hello' }
  | { mark: typeof MARK; t: 'ready'; served: Record<string, Description> }
  | { mark: typeof MARK; t: 'c'; s: number; c: Value[] }
  | { mark: typeof MARK; t: 'r'; s: number; v: unknown[]; e?: WireError; g?: unknown[] }
  | { mark: typeof MARK; t: 'a'; v: unknown[] };

export function isOurs(msg: unknown): msg is { mark: typeof MARK; t: unknown } {
  return typeof msg === 'object' && msg !== null && (msg as { mark?: unknown }).mark === MARK;
}

export function toWire(error: unknown): WireError {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return {
      name: error.name,
      ...(typeof code === 'string' ? { code } : {}),
      message: error.message,
    };
  }
  return { name: 'Error', message: String(error) };
}

/** Rebuilds an error as the same class, with the same code, as the primary threw. */
export function fromWire(e: WireError): Error {
  switch (e.name) {
    case 'LimiterClosedError':
      return new LimiterClosedError(e.message);
    case 'QueueFullError':
      return new QueueFullError(e.message);
    case 'ClusterUnavailableError':
      return new ClusterUnavailableError(e.message);
    case 'ClusterTimeoutError':
      return new ClusterTimeoutError(e.message);
    case 'TypeError':
      return withCode(new TypeError(e.message), e.code);
    case 'RangeError':
      return withCode(new RangeError(e.message), e.code);
    case 'AbortError':
    case 'TimeoutError':
      return new DOMException(e.message, e.name);
    default:
      return Object.assign(new Error(e.message), { name: e.name, code: e.code });
  }
}

// Node's ERR_INVALID_ARG_TYPE / ERR_OUT_OF_RANGE (validate.ts) travel with the error.
function withCode(error: Error, code: string | undefined): Error {
  if (code !== undefined) {
    Object.defineProperty(error, 'code', { value: code, enumerable: true });
  }
  return error;
}

/** Appends a Decision's values. JSON has no Infinity: −1 stands for it (times are ≥ 0). */
export function pushDecision(out: unknown[], d: Decision): void {
  out.push(
    d.allowed ? 1 : 0,
    d.remaining,
    d.limit,
    d.retryAfterMs === Number.POSITIVE_INFINITY ? -1 : d.retryAfterMs,
    d.resetAfterMs === Number.POSITIVE_INFINITY ? -1 : d.resetAfterMs,
    d.reason ?? 0,
  );
}

export function readDecision(v: readonly unknown[], i: number): Decision {
  const retry = v[i + 3] as number;
  const reset = v[i + 4] as number;
  const d: Decision = {
    allowed: v[i] === 1,
    remaining: v[i + 1] as number,
    limit: v[i + 2] as number,
    retryAfterMs: retry === -1 ? Number.POSITIVE_INFINITY : retry,
    resetAfterMs: reset === -1 ? Number.POSITIVE_INFINITY : reset,
  };
  const reason = v[i + 5];
  if (typeof reason === 'string') (d as { reason?: string }).reason = reason;
  return d;
}

/** Until-times travel as −1 for "always" (JSON has no Infinity). */
export function untilToWire(us: number): number {
  return Number.isFinite(us) ? us : -1;
}
function untilFromWire(v: unknown): number {
  return typeof v === 'number' && v >= 0 ? v : Number.POSITIVE_INFINITY;
}

/** The wire form of a key: null is the default key. */
export function keyFromWire(k: Value): Key | undefined {
  return k === null ? undefined : k;
}

/**
 * What a TAKE answers: the permits granted (0 on a refusal), the Decision, when they were
 * taken and until when they count there (the limiter's clock, µs; Infinity: always).
 */
export interface Grant {
  granted: number;
  decision: Decision;
  takenUs: number;
  untilUs: number;
}

/** Values in the answer to a call of `op` (an error is always one value). */
export function answerWidth(op: number): number {
  if (op === CONSUME) return DECISION_SIZE;
  if (op === TAKE) return 3 + DECISION_SIZE;
  if (op === STATS) return 4;
  return 1;
}

/** The value of the answer at `v[i]` to a call of `op`. */
export function readAnswer(op: number, v: readonly unknown[], i: number): unknown {
  switch (op) {
    case TRY:
      return v[i] === 1;
    case CONSUME:
      return readDecision(v, i);
    case TAKE:
      return {
        granted: v[i] as number,
        decision: readDecision(v, i + 1),
        takenUs: v[i + 1 + DECISION_SIZE] as number,
        untilUs: untilFromWire(v[i + 2 + DECISION_SIZE]),
      } satisfies Grant;
    case STATS:
      return {
        available: v[i] as number,
        queued: v[i + 1] as number,
        admitted: v[i + 2] as number,
        rejected: v[i + 3] as number,
      } satisfies Stats;
    default:
      return undefined;
  }
}
