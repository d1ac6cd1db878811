/**
 * Error classes with a stable `code`. `instanceof` works across two copies of the
 * package (for example an ESM and a CJS copy loaded by one process): each class
 * recognises instances by the code stored under a registered symbol, not by prototype
 * identity alone.
 */

const kCode = Symbol.for('atomic-limiter.error-code');

function tagged(value: unknown): string | undefined {
  return typeof value === 'object' && value !== null
    ? (value as { [kCode]?: string })[kCode]
    : undefined;
}

/** Base class of every error this package throws on purpose. */
export abstract class LimiterError extends Error {
  abstract readonly code: string;
}
Object.defineProperty(LimiterError, Symbol.hasInstance, {
  value: (value: unknown) => tagged(value) !== undefined,
});

function defineCode(cls: { prototype: object }, code: string): void {
  Object.defineProperty(cls.prototype, kCode, { value: code });
  Object.defineProperty(cls, Symbol.hasInstance, {
    value: (value: unknown) => tagged(value) === code,
  });
}

/** Thrown by every method of a limiter after `close()`, and rejects its pending waiters. */
export class LimiterClosedError extends LimiterError {
  readonly code = 'ERR_LIMITER_CLOSED';
  override readonly name = 'LimiterClosedError';
  constructor(message = 'the limiter is closed') {
    super(message);
  }
}
defineCode(LimiterClosedError, 'ERR_LIMITER_CLOSED');

/** A waiter could not be queued, or was evicted by a newer one (`queueOrder: 'newest-first'`). */
export class QueueFullError extends LimiterError {
  readonly code = 'ERR_QUEUE_FULL';
  override readonly name = 'QueueFullError';
  constructor(message = 'the wait queue is full') {
    super(message);
  }
}
defineCode(QueueFullError, 'ERR_QUEUE_FULL');

/** A cluster worker's call got no answer from the primary within its timeout. */
export class ClusterTimeoutError extends LimiterError {
  readonly code = 'ERR_CLUSTER_TIMEOUT';
  override readonly name = 'ClusterTimeoutError';
}
defineCode(ClusterTimeoutError, 'ERR_CLUSTER_TIMEOUT');

/**
 * A cluster call cannot be made: not in a cluster worker, the IPC channel closed, the
 * client was closed, or too many calls are in flight.
 */
export class ClusterUnavailableError extends LimiterError {
  readonly code = 'ERR_CLUSTER_UNAVAILABLE';
  override readonly name = 'ClusterUnavailableError';
}
defineCode(ClusterUnavailableError, 'ERR_CLUSTER_UNAVAILABLE');

/**
 * A backend (Redis) could not be reached: a connection error, or no answer within the
 * limiter's `timeoutMs`. The underlying error is attached as `cause`.
 */
export class BackendUnavailableError extends LimiterError {
  readonly code = 'ERR_BACKEND_UNAVAILABLE';
  override readonly name = 'BackendUnavailableError';
  constructor(message = 'the backend is unavailable', options?: { cause?: unknown }) {
    super(message, options);
  }
}
defineCode(BackendUnavailableError, 'ERR_BACKEND_UNAVAILABLE');

/**
 * A give-back nobody awaits that failed (a lease released by `Symbol.dispose`, a chain's
 * rollback, the HTTP middleware's release at the response's end, a Redis block returned in
 * the background): a process warning with `code`, never an unhandled rejection. `where`
 * names the part that gave back.
 */
export function warnGiveBackFailed(where: string, code: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  process.emitWarning(`${where}: permits could not be given back: ${message}`, {
    code,
    ...(error instanceof Error && error.stack !== undefined ? { detail: error.stack } : {}),
  });
}
