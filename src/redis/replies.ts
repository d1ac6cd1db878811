import type { Decision } from '../options.js';

/*
 * Reading the scripts' replies (compose.lua.ts): figures come as integers or '%.17g' strings
 * ('inf' for Infinity); anything else is an error naming the script, never a guess.
 */

/** A refusal or grant as the scripts report it. */
export interface Reply {
  allowed: boolean;
  remaining: number;
  retryAfterUs: number;
  untilFreshUs: number;
  nowUs: number;
  /** Concurrency: µs until the earliest lease expires (−1: none). A lease ('b'): permits granted. */
  hintUs: number;
  /** A lease ('b'): µs its permits keep counting where they were counted (LeaseReply). */
  countedUs: number;
}

/** An error naming the script for a reply that is not what it returns. */
export function badReply(script: string, reply: unknown): Error {
  let text: string;
  try {
    text = JSON.stringify(reply) ?? String(reply);
  } catch {
    text = String(reply);
  }
  return new Error(
    `atomic-limiter/redis: script ${script} returned an unexpected reply: ${text.slice(0, 200)}`,
  );
}

/** The number at `reply[i]`. */
export function replyNumber(script: string, reply: unknown, i: number): number {
  if (!Array.isArray(reply) || reply.length <= i) throw badReply(script, reply);
  const v = reply[i];
  if (typeof v === 'number') return v;
  if (typeof v === 'string') {
    if (v === 'inf') return Number.POSITIVE_INFINITY;
    const n = Number(v);
    if (v !== '' && !Number.isNaN(n)) return n;
  }
  throw badReply(script, reply);
}

/** A decision's reply: {allowed, remaining, retry µs, fresh µs, now µs[, hint[, counted]]}. */
export function parseReply(script: string, reply: unknown): Reply {
  if (!Array.isArray(reply) || reply.length < 5) throw badReply(script, reply);
  const flag = replyNumber(script, reply, 0);
  if (flag !== 0 && flag !== 1) throw badReply(script, reply);
  return {
    allowed: flag === 1,
    remaining: replyNumber(script, reply, 1),
    retryAfterUs: replyNumber(script, reply, 2),
    untilFreshUs: replyNumber(script, reply, 3),
    nowUs: replyNumber(script, reply, 4),
    hintUs: reply.length > 5 ? replyNumber(script, reply, 5) : 0,
    countedUs: reply.length > 6 ? replyNumber(script, reply, 6) : Number.POSITIVE_INFINITY,
  };
}

/** The same object, field for field, as the in-memory consume(). */
export function decisionOf(r: Reply, limit: number): Decision {
  const d: Decision = {
    allowed: r.allowed,
    remaining: r.remaining,
    limit,
    retryAfterMs: r.allowed ? 0 : r.retryAfterUs / 1000,
    resetAfterMs: r.untilFreshUs / 1000,
  };
  return r.allowed ? d : { ...d, reason: 'limited' };
}

/**
 * decisionOf(parseReply()) without the Reply between, for consume(): a plain grant's
 * {avail, fresh}, or a reply of numbers (what the scripts send but for Infinity and
 * fractions) read in place; any other goes the long way, which reads strings and names the
 * script for a bad reply.
 */
export function decisionOfReply(script: string, reply: unknown, limit: number): Decision {
  if (Array.isArray(reply) && reply.length === 2) {
    // A plain grant of the single-call form: avail, fresh.
    const remaining = replyNumber(script, reply, 0);
    const fresh = replyNumber(script, reply, 1);
    return { allowed: true, remaining, limit, retryAfterMs: 0, resetAfterMs: fresh / 1000 };
  }
  if (Array.isArray(reply) && reply.length >= 5 && reply.length <= 7) {
    // Read by index: destructuring would go through the array's iterator.
    const flag = reply[0];
    const remaining = reply[1];
    const retry = reply[2];
    const fresh = reply[3];
    const now = reply[4];
    const hint = reply[5];
    const counted = reply[6];
    if (
      typeof remaining === 'number' &&
      typeof retry === 'number' &&
      typeof fresh === 'number' &&
      typeof now === 'number' &&
      (hint === undefined || typeof hint === 'number') &&
      (counted === undefined || typeof counted === 'number')
    ) {
      if (flag === 1) {
        return { allowed: true, remaining, limit, retryAfterMs: 0, resetAfterMs: fresh / 1000 };
      }
      if (flag === 0) {
        return {
          allowed: false,
          remaining,
          limit,
          retryAfterMs: retry / 1000,
          resetAfterMs: fresh / 1000,
          reason: 'limited',
        };
      }
    }
  }
  return decisionOf(parseReply(script, reply), limit);
}
