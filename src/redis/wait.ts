import type { ManualClock } from '../clock.js';

/** A cancellable wait: abort, timeout or close() reject `cancelled` with their reason. */
export class Waiter {
  done = false;
  readonly cancelled: Promise<never>;
  private cancel!: (reason: unknown) => void;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private onAbort: (() => void) | undefined;
  /** Set by a release message for this waiter's key (Concurrency). */
  woken = false;
  wake: (() => void) | undefined;
  /** Concurrency: the head's current re-check back-off in ms (0: none yet). */
  recheckMs = 0;
  /**
   * `timeoutMs: 0`: never waits, as in memory — the first answer Redis gives is final (a
   * grant, or a TimeoutError). A timer of 0 ms would fire before any reply could come.
   */
  readonly once: boolean;

  constructor(
    readonly tag: string,
    readonly permits: number,
    private readonly signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
  ) {
    this.cancelled = new Promise<never>((_, reject) => {
      this.cancel = reject;
    });
    this.cancelled.catch(() => {});
    if (signal) {
      this.onAbort = () => this.stop(signal.reason);
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
    this.once = timeoutMs === 0;
    if (timeoutMs !== undefined && timeoutMs > 0) {
      this.timer = setTimeout(() => this.stop(timedOut()), timeoutMs);
    }
  }

  private readonly cleanups: (() => void)[] = [];

  /** Ends the wait with `reason` (the acquire() promise rejects with it). */
  stop(reason: unknown): void {
    if (this.done) return;
    this.finish();
    this.cancel(reason);
  }

  /** Runs `f` when the waiter settles (clears its sleep timers). */
  onFinish(f: () => void): void {
    if (this.done) f();
    else this.cleanups.push(f);
  }

  /** Clears the timer and the abort listener; the waiter is settled. */
  finish(): void {
    if (!this.done) for (const f of this.cleanups.splice(0)) f();
    this.done = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.onAbort) this.signal?.removeEventListener('abort', this.onAbort);
  }

  /** `promise`, unless the wait is cancelled first. */
  race<T>(promise: Promise<T>): Promise<T> {
    return Promise.race([promise, this.cancelled]);
  }
}

/** setTimeout's longest delay, ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The rejection of an acquire() past its `timeoutMs`, as Node reports it. */
export function timedOut(): DOMException {
  return new DOMException('The operation timed out.', 'TimeoutError');
}

/**
 * Resolves once `us` microseconds have passed on `clock` (a ManualClock: when advance()
 * or set() moves it that far), or on the real clock when `clock` is undefined. A pending
 * Atomics.waitAsync keeps no process alive, so only the real timer is cleared when `w`
 * settles.
 */
export function sleepUs(clock: ManualClock | undefined, us: number, w?: Waiter): Promise<void> {
  if (!clock) {
    return new Promise((resolve) => {
      let ms = Math.max(0, Math.ceil(us / 1000));
      let timer: ReturnType<typeof setTimeout>;
      // setTimeout fires at once past 2^31 − 1 ms (a bucket's reservation weeks ahead): a
      // longer sleep goes in steps.
      const next = () => {
        const step = Math.min(ms, MAX_TIMER_MS);
        ms -= step;
        timer = setTimeout(ms > 0 ? next : resolve, step);
      };
      next();
      // A waiter that leaves does not keep the process alive until its sleep ends.
      w?.onFinish(() => clearTimeout(timer));
    });
  }
  const target = clock.nowUs() + us;
  const { words, index } = clock.tickWord;
  return (async () => {
    for (;;) {
      const seen = Atomics.load(words, index);
      if (clock.nowUs() >= target) return;
      const r = Atomics.waitAsync(words, index, seen);
      if (r.async) await r.value;
    }
  })();
}
