import type { Decision } from '../options.js';
import { rangeError, show, typeError } from '../validate.js';

/**
 * The rate-limit header fields, from the limiter's public properties and each decision:
 *
 * - 'draft-6': `RateLimit-Policy: 100;w=10`, `RateLimit-Limit`, `RateLimit-Remaining`,
 *   `RateLimit-Reset` (seconds);
 * - 'draft-7': `RateLimit-Policy: 100;w=10`, `RateLimit: limit=100, remaining=99, reset=1`;
 * - 'draft-8': `RateLimit-Policy: "100-in-10s";q=100;w=10`, `RateLimit: "100-in-10s";r=99;t=1`
 *   (structured-field lists: one member per limiter of a chain, appended to what an earlier
 *   middleware wrote);
 * - 'legacy': `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds).
 *
 * Reset and `t` are `resetAfterMs` in whole seconds, rounded up; they are left out while the
 * reset is unbounded (a Concurrency key whose permits are held). `w` is the window in whole
 * seconds, rounded up: a window's `windowMs`, a bucket's `capacity / rate` (a WarmingBucket's
 * `limit / ratePerSecond`); a Concurrency policy has no window.
 */

export type HeaderFormat = 'draft-8' | 'draft-7' | 'draft-6' | 'legacy';
export const HEADER_FORMATS: readonly HeaderFormat[] = ['draft-8', 'draft-7', 'draft-6', 'legacy'];

/** A header field this package writes: its name as sent, and in lower case (the table key). */
export interface Field {
  readonly name: string;
  readonly lower: string;
}

const field = (name: string): Field => ({ name, lower: name.toLowerCase() });
export const RATELIMIT = field('RateLimit');
export const RATELIMIT_POLICY = field('RateLimit-Policy');
const RATELIMIT_LIMIT = field('RateLimit-Limit');
const RATELIMIT_REMAINING = field('RateLimit-Remaining');
const RATELIMIT_RESET = field('RateLimit-Reset');
const X_LIMIT = field('X-RateLimit-Limit');
const X_REMAINING = field('X-RateLimit-Remaining');
const X_RESET = field('X-RateLimit-Reset');
export const RETRY_AFTER = field('Retry-After');

/**
 * Where header fields are written: Node's header table of a response, a ServerResponse
 * through setHeader, or a Fastify reply. `getHeader` reads a field back (undefined if
 * absent).
 */
export interface HeaderSink<Target> {
  setHeader(target: Target, field: Field, value: string): void;
  getHeader(target: Target, field: Field): unknown;
}

/** What the headers say about one limiter. */
export interface Policy {
  readonly name: string;
  /** The name as a structured-field string. */
  readonly quoted: string;
  readonly quota: number;
  /** Whole seconds, rounded up; undefined when the limiter has no window (Concurrency). */
  readonly windowSeconds: number | undefined;
  /** `q;w=…` (drafts 6 and 7). */
  readonly plain: string;
  /** `"name";q=…;w=…` (draft 8). */
  readonly structured: string;
}

/** The duck-typed face of a limiter: the public properties every limiter of this package has (docs/api.md). */
export interface LimiterFace {
  readonly algorithm?: string;
  readonly limit?: number;
  readonly windowMs?: number;
  readonly capacity?: number;
  readonly refillPerSecond?: number;
  readonly ratePerSecond?: number;
  readonly limiters?: readonly unknown[];
  /** An in-memory limiter's: changes with every reconfigure(), so the policy is read again. */
  readonly optionsVersion?: number;
  /** An in-memory limiter's: 'newest-first' evicts the oldest waiter (see Engine.waitFor). */
  readonly queueOrder?: string;
}

/** A chain: an object with `limiters`; its decisions carry one `decisions[i]` per member. */
export function isChain(limiter: unknown): limiter is LimiterFace & { limiters: unknown[] } {
  return Array.isArray((limiter as LimiterFace).limiters);
}

/** The limiters a headers list describes: a chain's members, nested chains flattened. */
export function flattenLimiters(limiter: unknown, out: LimiterFace[] = []): LimiterFace[] {
  if (isChain(limiter)) for (const m of limiter.limiters) flattenLimiters(m, out);
  else out.push(limiter as LimiterFace);
  return out;
}

/** A chain decision's member decisions in the order of flattenLimiters (a prefix on refusal). */
export function flattenDecisions(
  limiter: unknown,
  decision: Decision,
  out: (Decision | undefined)[] = [],
): (Decision | undefined)[] {
  if (!isChain(limiter)) {
    out.push(decision);
    return out;
  }
  const ds = (decision as { decisions?: readonly Decision[] }).decisions;
  const members = limiter.limiters;
  for (let i = 0; i < members.length; i++) {
    const d = ds?.[i];
    if (d === undefined) {
      // Not asked (the chain stopped at an earlier refusal): as many holes as it has members.
      const n = flattenLimiters(members[i]).length;
      for (let j = 0; j < n; j++) out.push(undefined);
    } else flattenDecisions(members[i], d, out);
  }
  return out;
}

/**
 * The largest integer a structured field may hold (15 digits). Every integer written is
 * clamped to it: a wide bucket (capacity ÷ rate past 10^15 s) would otherwise write 16
 * digits or more, and a parser rejects the whole field, not just the member.
 */
export const MAX_SF_INTEGER = 999_999_999_999_999;
const seconds = (ms: number) => Math.min(MAX_SF_INTEGER, Math.ceil(ms / 1000));
const count = (n: number) => (n > 0 ? Math.min(MAX_SF_INTEGER, Math.floor(n)) : 0);

/** Quota and window from the limiter's algorithm; undefined while it is unknown (cluster). */
function shape(l: LimiterFace): { quota: number; windowMs: number | undefined } | undefined {
  switch (l.algorithm) {
    case 'TokenBucket':
      return bucket(l.capacity, l.refillPerSecond);
    case 'LeakyBucket':
      return bucket(l.capacity, l.ratePerSecond);
    case 'WarmingBucket':
      // Its limit is the most permits it stores: its capacity, refilled at its stable rate.
      return bucket(l.limit, l.ratePerSecond);
    case 'FixedWindow':
    case 'SlidingWindow':
    case 'SlidingLog':
      return isCount(l.limit) && isCount(l.windowMs)
        ? { quota: l.limit, windowMs: l.windowMs }
        : undefined;
    case 'Concurrency':
      return isCount(l.limit) ? { quota: l.limit, windowMs: undefined } : undefined;
    default:
      return undefined;
  }
}

function bucket(capacity: unknown, ratePerSecond: unknown) {
  return isCount(capacity) && isCount(ratePerSecond)
    ? { quota: capacity, windowMs: (capacity / ratePerSecond) * 1000 }
    : undefined;
}

function isCount(x: unknown): x is number {
  return typeof x === 'number' && x > 0 && Number.isFinite(x);
}

/**
 * "100-in-10s", "5-in-1500ms", "3-in-250us", "10-concurrent": the window in the largest
 * unit that states it whole, else in milliseconds with as many decimals as it takes. Never
 * rounded to a coarser unit: no window is named as 0, and different windows have different
 * names.
 */
function defaultName(l: LimiterFace, quota: number, windowMs: number | undefined): string {
  const q = count(quota);
  if (windowMs === undefined) return l.algorithm === 'Concurrency' ? `${q}-concurrent` : `${q}`;
  if (Number.isInteger(windowMs / 1000)) return `${q}-in-${decimal(windowMs / 1000)}s`;
  if (Number.isInteger(windowMs)) return `${q}-in-${decimal(windowMs)}ms`;
  // capacity ÷ rate × 1000 may miss a whole number of µs by the last bit of the double.
  const us = Math.round(windowMs * 1000);
  if (us >= 1 && Math.abs(us - windowMs * 1000) <= us * 1e-12) {
    return `${q}-in-${us}us`;
  }
  return `${q}-in-${decimal(windowMs)}ms`;
}

/** A positive number in plain decimal notation (no exponent), exact to the double. */
function decimal(x: number): string {
  const s = String(x);
  if (!s.includes('e')) return s;
  return x >= 1 ? BigInt(Math.round(x)).toString() : x.toFixed(20).replace(/0+$/, '');
}

function makePolicy(name: string, limit: number, windowMs: number | undefined): Policy {
  const quota = count(limit);
  const windowSeconds = windowMs === undefined ? undefined : seconds(windowMs);
  const w = windowSeconds === undefined ? '' : `;w=${windowSeconds}`;
  const quoted = sfString(name);
  return {
    name,
    quoted,
    quota,
    windowSeconds,
    plain: `${quota}${w}`,
    structured: `${quoted};q=${quota}${w}`,
  };
}

/** A structured-field string: printable ASCII, `"` and `\` escaped. */
function sfString(s: string): string {
  return `"${s.replace(/[\\"]/g, '\\$&')}"`;
}

/** Checks `policyName`: a string (one limiter) or one string per limiter of a chain. */
export function policyNamesOption(
  owner: string,
  value: unknown,
  members: number,
): readonly (string | undefined)[] | undefined {
  if (value === undefined) return undefined;
  const names = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(names)) {
    throw typeError(
      `${owner}: option "policyName" must be a string, or an array with one name per limiter of the chain, got ${show(value)}`,
    );
  }
  if (names.length !== members) {
    throw rangeError(
      `${owner}: option "policyName" must name each of the ${members} limiter(s) (nested chains flattened), got ${names.length} name(s)`,
    );
  }
  for (const n of names) {
    // Printable ASCII: what a structured-field string may hold.
    if (typeof n !== 'string' || n === '' || !/^[\x20-\x7e]+$/.test(n)) {
      throw typeError(
        `${owner}: option "policyName" must be non-empty printable ASCII, got ${show(n)}`,
      );
    }
  }
  // A client tells the draft-8 list's members apart by name alone.
  if (new Set(names).size !== names.length) {
    throw rangeError(
      `${owner}: option "policyName" must name each limiter differently, got ${show(names)}`,
    );
  }
  return names;
}

export function headersOption(owner: string, value: unknown): readonly HeaderFormat[] {
  if (value === undefined) return ['draft-8'];
  if (value === false) return [];
  const list = Array.isArray(value) ? value : [value];
  for (const f of list) {
    if (!HEADER_FORMATS.includes(f)) {
      throw typeError(
        `${owner}: option "headers" must be ${HEADER_FORMATS.map((x) => `"${x}"`).join(', ')}, false, or an array of them, got ${show(f)}`,
      );
    }
  }
  const set = new Set(list as HeaderFormat[]);
  if (set.size !== list.length) {
    throw rangeError(`${owner}: option "headers" names a format twice: ${JSON.stringify(list)}`);
  }
  const drafts = [...set].filter((f) => f !== 'legacy');
  if (drafts.length > 1) {
    // They write the same field names with different syntaxes.
    throw rangeError(
      `${owner}: option "headers" may hold one of "draft-6", "draft-7", "draft-8" (they share field names), got ${JSON.stringify(list)}`,
    );
  }
  return [...set];
}

/**
 * Writes the header fields of one decision. Built once per middleware; policies are
 * computed once each limiter's algorithm is known (a cluster client learns it from its
 * first answer) and reused.
 */
export class HeaderWriter {
  private readonly members: LimiterFace[];
  private readonly policies: (Policy | undefined)[];
  /** Each member's optionsVersion when its policy was cached. */
  private readonly versions: (number | undefined)[];
  private readonly states: StateValues[];
  private readonly draft: HeaderFormat | undefined;
  private readonly legacy: boolean;
  readonly chained: boolean;

  constructor(
    private readonly limiter: unknown,
    formats: readonly HeaderFormat[],
    private readonly names: readonly (string | undefined)[] | undefined,
  ) {
    this.members = flattenLimiters(limiter);
    this.policies = this.members.map(() => undefined);
    this.versions = this.members.map(() => undefined);
    this.states = this.members.map(() => new StateValues());
    this.chained = isChain(limiter);
    this.draft = formats.find((f) => f !== 'legacy');
    this.legacy = formats.includes('legacy');
  }

  /** Whether a decision allowed gets any field (`headers: false`: none, only Retry-After on refusals). */
  get enabled(): boolean {
    return this.draft !== undefined || this.legacy;
  }

  private policy(i: number, d: Decision): Policy {
    const l = this.members[i]!;
    const cached = this.policies[i];
    if (cached !== undefined && l.optionsVersion === this.versions[i]) return cached;
    this.policies[i] = undefined;
    const s = shape(l);
    const quota = s?.quota ?? (isCount(l.limit) ? l.limit : d.limit);
    let name = this.names?.[i] ?? defaultName(l, quota, s?.windowMs);
    if (this.names === undefined && this.members.length > 1) {
      // Two members with the same figures still need distinct names in one list.
      if (this.policies.some((p) => p?.name === name)) name = `${name}-${i + 1}`;
    }
    const p = makePolicy(name, quota, s?.windowMs);
    if (s !== undefined) {
      // Known until the limiter is reconfigured: cache it.
      this.policies[i] = p;
      this.versions[i] = l.optionsVersion;
    }
    return p;
  }

  /**
   * Writes the fields for `d` (every member's for draft 8, the tightest one's otherwise),
   * and `Retry-After` when `retryAfter` is given, whatever the formats.
   */
  write<T>(sink: HeaderSink<T>, target: T, d: Decision, retryAfter: string | undefined): void {
    if (!this.chained) this.writeOne(sink, target, this.policy(0, d), d);
    else this.writeChain(sink, target, d);
    if (retryAfter !== undefined) sink.setHeader(target, RETRY_AFTER, retryAfter);
  }

  private writeChain<T>(sink: HeaderSink<T>, target: T, d: Decision): void {
    const ds = flattenDecisions(this.limiter, d);
    let tight = -1;
    for (let i = 0; i < ds.length; i++) {
      const x = ds[i];
      if (x === undefined) continue;
      if (!x.allowed) {
        tight = i; // the refusing member explains the refusal
        break;
      }
      const t = tight < 0 ? undefined : ds[tight]!;
      if (
        t === undefined ||
        x.remaining < t.remaining ||
        (x.remaining === t.remaining && x.resetAfterMs > t.resetAfterMs)
      ) {
        tight = i;
      }
    }
    if (tight < 0) {
      // A chain without per-member decisions: its own figures.
      this.writeOne(sink, target, this.policy(0, d), d);
      return;
    }
    if (this.draft === 'draft-8') {
      let policy = '';
      let state = '';
      for (let i = 0; i < ds.length; i++) {
        const x = ds[i];
        if (x === undefined) continue;
        const p = this.policy(i, x);
        policy = policy === '' ? p.structured : `${policy}, ${p.structured}`;
        const m = this.states[i]!.member8(p, x);
        state = state === '' ? m : `${state}, ${m}`;
      }
      append(sink, target, RATELIMIT_POLICY, policy);
      append(sink, target, RATELIMIT, state);
    } else if (this.draft !== undefined) {
      this.writeDraft(sink, target, this.policy(tight, ds[tight]!), ds[tight]!, tight);
    }
    if (this.legacy) writeLegacy(sink, target, this.policy(tight, ds[tight]!), ds[tight]!);
  }

  private writeOne<T>(sink: HeaderSink<T>, target: T, p: Policy, d: Decision): void {
    if (this.draft === 'draft-8') {
      append(sink, target, RATELIMIT_POLICY, p.structured);
      append(sink, target, RATELIMIT, this.states[0]!.member8(p, d));
    } else if (this.draft !== undefined) this.writeDraft(sink, target, p, d, 0);
    if (this.legacy) writeLegacy(sink, target, p, d);
  }

  private writeDraft<T>(sink: HeaderSink<T>, target: T, p: Policy, d: Decision, i: number): void {
    sink.setHeader(target, RATELIMIT_POLICY, p.plain);
    if (this.draft === 'draft-7') {
      sink.setHeader(target, RATELIMIT, this.states[i]!.draft7(p, d));
    } else {
      sink.setHeader(target, RATELIMIT_LIMIT, String(p.quota));
      sink.setHeader(target, RATELIMIT_REMAINING, String(count(d.remaining)));
      if (d.resetAfterMs !== Number.POSITIVE_INFINITY) {
        sink.setHeader(target, RATELIMIT_RESET, String(seconds(d.resetAfterMs)));
      }
    }
  }
}

const STATE_SLOTS = 256;

/**
 * One policy's state values (draft 8's member, draft 7's `RateLimit`) by (remaining, reset
 * seconds), in a direct-mapped table of 256. Building a value costs little, but it is a
 * concatenation, which Node's value check and the head's serialization flatten on every
 * response; a value from here was flattened once, in
 * place, when first sent. Most responses repeat a few pairs: a key's bucket full or
 * nearly, its window ending in the same second.
 */
class StateValues {
  // What the values were made of: a policy may be rebuilt on every request until the
  // limiter's algorithm is known (a cluster client before its first answer).
  private quoted = '';
  private quota = 0;
  private readonly remaining = new Float64Array(STATE_SLOTS).fill(-1);
  private readonly reset = new Float64Array(STATE_SLOTS);
  private readonly values: string[] = new Array<string>(STATE_SLOTS).fill('');
  private kind = 0; // 8 or 7: one writer writes one draft

  member8(p: Policy, d: Decision): string {
    return this.value(p, d, 8);
  }

  draft7(p: Policy, d: Decision): string {
    return this.value(p, d, 7);
  }

  private value(p: Policy, d: Decision, kind: number): string {
    const r = count(d.remaining);
    const t = d.resetAfterMs === Number.POSITIVE_INFINITY ? -1 : seconds(d.resetAfterMs);
    if (p.quoted !== this.quoted || p.quota !== this.quota || kind !== this.kind) {
      this.quoted = p.quoted;
      this.quota = p.quota;
      this.kind = kind;
      this.remaining.fill(-1);
    }
    const i = (r ^ Math.imul(t, 0x9e3779b1)) & (STATE_SLOTS - 1);
    if (this.remaining[i] === r && this.reset[i] === t) return this.values[i]!;
    const v =
      kind === 8
        ? `${p.quoted};r=${r}${t < 0 ? '' : `;t=${t}`}`
        : `limit=${p.quota}, remaining=${r}${t < 0 ? '' : `, reset=${t}`}`;
    this.remaining[i] = r;
    this.reset[i] = t;
    this.values[i] = v;
    return v;
  }
}

/**
 * Draft 8's fields are structured-field lists, which may be split over field lines: a
 * member list already on the response (another middleware of this package, or any other
 * draft-8 writer; one value or several, as `res.append()` leaves them) is kept, and this
 * one's members follow it on the same line. A value that is no such list (draft 7's
 * `limit=…, remaining=…` under the same name) cannot share the field: it is replaced.
 */
function append<T>(sink: HeaderSink<T>, target: T, f: Field, value: string): void {
  const before = memberList(sink.getHeader(target, f));
  sink.setHeader(target, f, before === '' ? value : `${before}, ${value}`);
}

/** A field's value as one draft-8 member list ('' when it holds none). */
function memberList(value: unknown): string {
  if (typeof value === 'string') return isMemberList(value) ? value : '';
  if (!Array.isArray(value)) return '';
  let out = '';
  for (const v of value) {
    if (typeof v === 'string' && isMemberList(v)) out = out === '' ? v : `${out}, ${v}`;
  }
  return out;
}

/** Draft 8's members are structured-field strings: a list of them starts with a quote. */
function isMemberList(value: string): boolean {
  return value.trimStart().startsWith('"');
}

function writeLegacy<T>(sink: HeaderSink<T>, target: T, p: Policy, d: Decision): void {
  sink.setHeader(target, X_LIMIT, String(p.quota));
  sink.setHeader(target, X_REMAINING, String(count(d.remaining)));
  if (d.resetAfterMs !== Number.POSITIVE_INFINITY) {
    sink.setHeader(target, X_RESET, String(seconds(Date.now() + d.resetAfterMs)));
  }
}

/** `Retry-After` in whole seconds, rounded up; undefined when only a release can help. */
export function retryAfterSeconds(d: Decision): string | undefined {
  return d.retryAfterMs === Number.POSITIVE_INFINITY ? undefined : String(seconds(d.retryAfterMs));
}

/**
 * `Retry-After` for a refusal given after waiting `waitedMs`: what the decision said less
 * the time since, in whole seconds rounded up, and at least 1: 0 would send the client
 * straight back to the queue it just timed out in.
 */
export function retryAfterWaited(d: Decision, waitedMs: number): string | undefined {
  if (d.retryAfterMs === Number.POSITIVE_INFINITY) return undefined;
  return String(Math.max(1, seconds(d.retryAfterMs - waitedMs)));
}
