/**
 * Error classes with a stable `code`. `instanceof` works across two copies of the
 * package (for example an ESM and a CJS copy loaded by one process) because each class
 * recognises instances by a registered symbol, not by prototype identity alone.
 */

const kCode = Symbol.for('atomic-limiter.error-code');

abstract class LimiterError extends Error {
  abstract readonly code: string;

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (typeof value !== 'object' || value === null) return false;
    // `this` is the class on the right of `instanceof`; compare stable codes so that a
    // copy of this class from another bundle still matches.
    const own = (LimiterError as unknown as { prototype: { [kCode]?: string } }).prototype[kCode];
    const theirs = (value as { [kCode]?: string })[kCode];
    if (own === undefined) return theirs !== undefined; // LimiterError itself
    return theirs === own;
  }
}

function defineCode(cls: { prototype: object }, code: string): void {
  Object.defineProperty(cls.prototype, kCode, { value: code });
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

export { LimiterError };
