import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Key } from '../limiter.js';
import type { Decision, Lease } from '../options.js';
import { isThenable } from '../validate.js';
import { flattenDecisions, flattenLimiters, isChain, type LimiterFace } from './headers.js';
import type { HttpLimiter } from './options.js';
import { isChainOf, isInMemory, type Plan } from './plan.js';

/**
 * Giving a request's permits back: when its response ends or its connection goes
 * (Concurrency), when `refundWhen` says it should not count, or when the client left while
 * the limiter decided. Nobody awaits these: a failure becomes a process warning.
 */

/** The client is gone (or the response ended) when this is true. */
export function closed(res: ServerResponse): boolean {
  return res.destroyed || res.writableEnded;
}

/**
 * Calls `f` once, when response `res` closes (it finished, or its connection went away) or,
 * first, when the connection of request `req` closes; at once if either already has.
 * Returns a function that detaches both listeners. The connection is watched because a
 * response queued behind another on a pipelined connection has no socket until the one
 * ahead finishes, and never emits 'close' when the connection dies first: permits held for
 * it would never come back. (Its listener goes when the response closes: a keep-alive
 * connection serves many.)
 */
export function whenGone(req: IncomingMessage, res: ServerResponse, f: () => void): () => void {
  const socket = req.socket as IncomingMessage['socket'] | null;
  let done = false;
  const detach = (): void => {
    done = true;
    res.off('close', gone);
    if (socket) socketWatchers.get(socket)?.delete(gone);
  };
  function gone(): void {
    if (done) return;
    detach();
    f();
  }
  if (res.closed || socket == null || socket.destroyed) {
    gone();
    return detach;
  }
  res.on('close', gone);
  let watchers = socketWatchers.get(socket);
  if (watchers === undefined) {
    // One listener per connection, however many of its requests are held (a pipelined
    // connection may hold many: a listener each would pass EventEmitter's threshold).
    const set = new Set<() => void>();
    watchers = set;
    socketWatchers.set(socket, set);
    socket.once('close', () => {
      socketWatchers.delete(socket);
      for (const g of set) g();
    });
  }
  watchers.add(gone);
  return detach;
}

/** whenGone()'s callbacks waiting for a connection to close, by connection. */
const socketWatchers = new WeakMap<object, Set<() => void>>();

const NONE: readonly LimiterFace[] = [];

/**
 * The limiters whose permits decision `d` took, to release: a Concurrency limiter, or a
 * chain's Concurrency members, unless allowed without taking anything — with no slot
 * (`whenFull: 'allow'`) or no backend (`whenUnavailable: 'allow'`): releasing those
 * would free permits that other requests hold.
 */
export function tookFrom(plan: Plan, d: Decision): readonly LimiterFace[] {
  const limiter = plan.limiter as LimiterFace;
  if (!isChain(limiter)) return d.reason === undefined ? plan.self : NONE;
  const members = flattenLimiters(limiter);
  const decisions = flattenDecisions(limiter, d);
  return members.filter(
    (m, i) => m.algorithm === 'Concurrency' && decisions[i]?.allowed && !decisions[i]!.reason,
  );
}

export function release(
  key: Key,
  permits: number,
  from: readonly LimiterFace[],
  report: Report,
): void {
  for (const l of from) {
    releaseLate(
      () => (l as { release?(k: Key, p: number): unknown }).release?.(key, permits),
      report,
    );
  }
}

/** Gives a finished request's permits back (see Engine.refundWhenDone). */
export function giveBack(
  limiter: HttpLimiter,
  key: Key,
  permits: number,
  d: Decision | Lease,
  takenUs: number,
  report: Report,
): void {
  if (isChainOf(limiter)) {
    const members = flattenLimiters(limiter);
    const times = limiter.takenTimes(d);
    // A lease (wait) has no member decisions: every member took.
    const decisions = flattenDecisions(limiter, d as Decision);
    members.forEach((m, i) => {
      // Held permits come back at close; a member that took nothing has nothing to give.
      if (m.algorithm === 'Concurrency' || decisions[i]?.reason !== undefined) return;
      refundOne(m, key, permits, times[i]!, report);
    });
    return;
  }
  if (limiter.algorithm !== 'Concurrency') refundOne(limiter, key, permits, takenUs, report);
}

/** Gives permits back to one limiter (not a chain), to the window of `takenUs` in memory. */
function refundOne(l: unknown, key: Key, permits: number, takenUs: number, report: Report): void {
  if (isInMemory(l)) releaseLate(() => l.refundTaken(key, permits, takenUs), report);
  else {
    const r = l as { refund?(k: Key, p: number): unknown };
    if (typeof r.refund === 'function') releaseLate(() => r.refund!(key, permits), report);
  }
}

/**
 * Reports a failure that has no request left to go to (a release after the response): the
 * middleware's, which reports each distinct failure once (a backend that is down fails
 * every give-back alike).
 */
export type Report = (error: unknown) => void;

/**
 * Gives permits back where nobody awaits the result: a release that throws, or answers
 * with a promise that rejects (a Redis lease while Redis is down), becomes a process
 * warning, never an unhandled rejection.
 */
export function releaseLate(release: () => unknown, report: Report): void {
  try {
    const r = release();
    if (isThenable(r)) r.then(undefined, report);
  } catch (error) {
    report(error);
  }
}
