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

/**
 * Why a reply is not taken: it is not its command's own. Every command carries a token
 * (compose.lua.ts), which its reply echoes: `{token, reply}`, a single-call tryAcquire()'s
 * token × 2 + verdict, or an error reply whose text holds ` [token]`. A client that
 * matches replies to the wrong commands (node-redis after a connection cut kept commands
 * written to the dying socket in its reply queue) hands a call another command's reply —
 * another key's grant, or an error of its own handshake — and only the token tells.
 */
export const FOREIGN = 'the client handed this call a reply that is not its own';

/** The reply a command's `tokened` reply carries, or FOREIGN if it is not the command's own. */
export function untoken(tokened: unknown, token: string): unknown {
  if (Array.isArray(tokened)) {
    if (tokened[0] !== token) return FOREIGN;
    // {token, reply}, or a single-call decision's flat {token, field, …}: a plain grant's
    // avail and fresh, or five fields or more.
    if (tokened.length === 2) return tokened[1];
    if (tokened.length !== 3 && tokened.length <= 5) return FOREIGN;
    // The reply is this call's alone: its fields are taken in place, not copied.
    tokened.shift();
    return tokened;
  }
  // A single-call tryAcquire(): token × 2 + verdict.
  if (typeof tokened === 'number') {
    const verdict = tokened - 2 * Number(token);
    if (verdict === 0 || verdict === 1) return verdict;
  }
  return FOREIGN;
}

/**
 * Each call's reply in a batch's flat reply ({token, TIME's µs, entries…}: compose.lua.ts),
 * as its own command would have replied: tryAcquire()'s verdict, a table as an array, a
 * decision with its time put back; '!' and the text of a call that failed. Undefined when
 * the reply is not of that form.
 */
export function batchReplies(
  reply: unknown[],
  calls: readonly { readonly head: readonly string[] }[],
): unknown[] | undefined {
  const serverNow = reply[1];
  if (typeof serverNow !== 'number') return undefined;
  const out: unknown[] = new Array(calls.length);
  let at = 2;
  for (let i = 0; i < calls.length; i++) {
    const head = calls[i]!.head;
    const x = reply[at++];
    if (typeof x === 'string') {
      if (!x.startsWith('!')) return undefined;
      out[i] = x;
    } else if (typeof x !== 'number') {
      return undefined;
    } else if (head[0] === 't') {
      out[i] = x;
    } else if (x === -1) {
      // A plain grant: avail and fresh.
      if (at + 2 > reply.length) return undefined;
      const now = head[1] === '' ? serverNow : Number(head[1]);
      out[i] = [1, reply[at], 0, reply[at + 1], now];
      at += 2;
    } else {
      const n = Math.abs(x);
      if (at + n > reply.length) return undefined;
      // A decision: allowed, avail, retry, fresh, then the time of its call, then the rest.
      // Made at its length at once (a copy grown by an insert is garbage twice over).
      const before = x < 0 ? Math.min(4, n) : n;
      const fields: unknown[] = new Array(x < 0 ? n + 1 : n);
      for (let j = 0; j < before; j++) fields[j] = reply[at + j];
      if (x < 0) {
        fields[before] = head[1] === '' ? serverNow : Number(head[1]);
        for (let j = before; j < n; j++) fields[j + 1] = reply[at + j];
      }
      at += n;
      out[i] = fields;
    }
  }
  return at === reply.length ? out : undefined;
}
