import type { Decision } from '../options.js';
import type { Algorithm } from './algorithm.js';
import { type Core, stampOf } from './core.js';
import { REJECT, S_STATE } from './layout.js';
import { type Key, NO_SLOT } from './table.js';
import { widePayload } from './wide.js';

/**
 * The longest wait retryAfterUs() computes, 2^52 µs (~143 years; a bucket refilled at
 * 10^-6 per second waits longer): beyond it, a refusal says Infinity.
 */
const MAX_RETRY_US = 2 ** 52;

/** The Decision of a grant (consume()): small, so that each class's consume() inlines it. */
export function granted(remaining: number, limit: number, untilFreshUs: number): Decision {
  return { allowed: true, remaining, limit, retryAfterMs: 0, resetAfterMs: untilFreshUs / 1000 };
}

/**
 * consume()'s Decision on a refusal, or on a key that got no slot (`whenFull` decided),
 * from the last decision's record (`core.last`).
 */
export function explain(
  core: Core,
  algo: Algorithm,
  allowed: boolean,
  key: Key | undefined,
  permits: number,
): Decision {
  const last = core.last;
  const nowUs = last.atUs;
  if (last.word === NO_SLOT) return tableFullDecision(core, algo, allowed, key!);
  const state = last.state;
  const stamp = last.stamp;
  let remaining = algo.available(state, stamp, nowUs);
  // Waiters queued ahead (FIFO) take the permits first, whether they are there or not yet:
  // what is left is what they leave, and the wait is until theirs and then these are due.
  const queued = core.fifo ? core.queues.waitingPermits(last.word) : 0;
  let retryUs: number;
  if (queued > 0) {
    remaining = Math.max(0, remaining - queued);
    retryUs =
      algo.retryBehindUs !== undefined
        ? algo.retryBehindUs(state, stamp, nowUs, queued, permits)
        : retryAfterUs(core, algo, state, stamp, nowUs, Math.min(core.limit, queued + permits));
  } else {
    retryUs = retryAfterUs(core, algo, state, stamp, nowUs, permits);
  }
  return {
    allowed: false,
    remaining,
    limit: core.limit,
    retryAfterMs: retryUs / 1000,
    resetAfterMs: algo.untilFreshUs(state, stamp, nowUs) / 1000,
    reason: 'limited',
  };
}

/** A key with no slot, allowed or refused by `whenFull`. */
function tableFullDecision(core: Core, algo: Algorithm, allowed: boolean, key: Key): Decision {
  return {
    allowed,
    remaining: 0,
    limit: core.limit,
    retryAfterMs: allowed ? 0 : tableFullRetryUs(core, algo, key, core.last.atUs) / 1000,
    resetAfterMs: 0,
    reason: 'table-full',
  };
}

/**
 * When a slot for `key` may be free: the soonest time one of its candidate slots returns
 * to its initial state (and so can be reclaimed). Whole µs, finite.
 */
function tableFullRetryUs(core: Core, algo: Algorithm, key: Key, nowUs: number): number {
  const last = core.last;
  const us = core.table.soonestIdleUs(key, (_state, w) => {
    last.word = w;
    return algo.untilFreshUs(stateAt(core, w), stampOf(core, w, nowUs), nowUs);
  });
  last.word = NO_SLOT;
  // None frees by time alone (Concurrency slots held): only a release can help.
  return Number.isFinite(us) ? Math.max(1, Math.ceil(us)) : Number.POSITIVE_INFINITY;
}

/** What the algorithm reads for slot word `w` now: its state word, or wide payload. */
export function stateAt(core: Core, w: number): number {
  const s = Atomics.load(core.i32, w + S_STATE);
  return core.wide ? widePayload(s, Atomics.load(core.i32, w - 1)) : s;
}

/**
 * The exact wait in whole µs: the step succeeds at now + r and fails at now + r − 1.
 * Infinity past MAX_RETRY_US, where whole µs stop being exact doubles (a search there
 * would not end).
 */
export function retryAfterUs(
  core: Core,
  algo: Algorithm,
  state: number,
  stamp: number,
  nowUs: number,
  permits: number,
): number {
  const guess = algo.retryEstimateUs(state, stamp, nowUs, permits);
  if (!(guess <= MAX_RETRY_US)) return Number.POSITIVE_INFINITY;
  const step = core.wide ? algo.stepWide : algo.step;
  const ok = (r: number) => step.call(algo, state, stamp, nowUs + r, permits) !== REJECT;
  core.last.probing = true;
  try {
    let hi = Math.max(0, Math.ceil(guess));
    let lo = 0;
    if (ok(hi)) {
      if (hi === 0 || !ok(hi - 1)) return hi;
    } else {
      // The estimate was short (rounding): search upwards, doubling.
      let step = 1;
      do {
        lo = hi + 1;
        hi += step;
        step *= 2;
        if (hi > MAX_RETRY_US) return Number.POSITIVE_INFINITY;
      } while (!ok(hi));
    }
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      if (ok(mid)) hi = mid;
      else lo = mid + 1;
    }
    return hi;
  } finally {
    core.last.probing = false;
  }
}
