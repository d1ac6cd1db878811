/**
 * Deadlines of calls in flight, for the transports that wait for answers (the cluster
 * channel, the Redis runner): one timer for all of them, armed for the earliest, instead of
 * one per call. A call that settles does not disarm it (one call at a time would otherwise
 * make and clear a timer per call): it may fire for nothing, and then arms itself for the
 * next deadline its owner reports.
 */
import { performance } from 'node:perf_hooks';

/** setTimeout's longest delay; a later deadline is reached in more than one step. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export class DeadlineTimer {
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** The deadline the timer is armed for (Infinity: none). */
  private at = Number.POSITIVE_INFINITY;

  /**
   * @param expire runs when the timer fires, with performance.now(): fails the calls whose
   *   deadline has passed (due()) and returns the earliest deadline left (Infinity: none).
   */
  constructor(private readonly expire: (now: number) => number) {}

  /**
   * Arms the timer for `deadline` (performance.now() ms) unless it is armed for an earlier
   * one. Unref'd: the calls themselves keep what must stay alive alive.
   */
  armFor(deadline: number): void {
    if (deadline >= this.at) return;
    if (this.timer) clearTimeout(this.timer);
    this.at = deadline;
    // Rounded up, at least 1 ms, at most setTimeout's longest: a timer that fires before
    // the deadline (a far one, or the loop's cached time behind the clock) arms itself again.
    const ms = Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(deadline - performance.now())));
    this.timer = setTimeout(this.fire, ms);
    this.timer.unref?.();
  }

  /** Disarms the timer (its owner shut down). */
  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.at = Number.POSITIVE_INFINITY;
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    this.at = Number.POSITIVE_INFINITY;
    const next = this.expire(performance.now());
    if (next !== Number.POSITIVE_INFINITY) this.armFor(next);
  };
}

/** Whether a call with `deadline` is past it at `now` (both performance.now() ms). */
export function due(deadline: number, now: number): boolean {
  return deadline <= now;
}
