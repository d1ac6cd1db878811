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
 * seconds, rounded up: a window's `windowMs`, a bucket's `capacity / rate`; a Concurrency
 * policy has no window.
 */

export type HeaderFormat = 'draft-8' | 'draft-7' | 'draft-6' | 'legacy';
export const HEADER_FORMATS: readonly HeaderFormat[] = ['draft-8', 'draft-7', 'draft-6', 'legacy'];

/** Where header fields are written: a node ServerResponse or a Fastify reply. */
export interface HeaderSink<Res> {
  setHeader(res: Res, name: string, value: string): void;
  getHeader(res: Res, name: string): unknown;
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

/** The duck-typed face of a limiter: the public properties contracts.md §1 lists. */
export interface LimiterFace {
  readonly algorithm?: string;
  readonly limit?: number;
  readonly windowMs?: number;
  readonly capacity?: number;
  readonly refillPerSecond?: number;
  readonly ratePerSecond?: number;
  readonly limiters?: readonly unknown[];
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

/** Quota and window from the limiter's algorithm; undefined while it is unknown (cluster). */
function shape(l: LimiterFace): { quota: number; windowMs: number | undefined } | undefined {
  switch (l.algorithm) {
    case 'TokenBucket':
      return bucket(l.capacity, l.refillPerSecond);
    case 'LeakyBucket':
      return bucket(l.capacity, l.ratePerSecond);
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

/** "100-in-10s", "5-in-1500ms", "10-concurrent". */
function defaultName(l: LimiterFace, quota: number, windowMs: number | undefined): string {
  if (windowMs === undefined)
    return l.algorithm === 'Concurrency' ? `${quota}-concurrent` : `${quota}`;
  const s = windowMs / 1000;
  return Number.isInteger(s) ? `${quota}-in-${s}s` : `${quota}-in-${Math.round(windowMs)}ms`;
}

function makePolicy(name: string, quota: number, windowMs: number | undefined): Policy {
  const windowSeconds = windowMs === undefined ? undefined : Math.ceil(windowMs / 1000);
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

const seconds = (ms: number) => Math.ceil(ms / 1000);
const count = (n: number) => (n > 0 ? Math.floor(n) : 0);

/**
 * Writes the header fields of one decision. Built once per middleware; policies are
 * computed once each limiter's algorithm is known (a cluster client learns it from its
 * first answer) and reused.
 */
export class HeaderWriter {
  private readonly members: LimiterFace[];
  private readonly policies: (Policy | undefined)[];
  private readonly draft: HeaderFormat | undefined;
  private readonly legacy: boolean;
  private alone = false;
  readonly chained: boolean;

  constructor(
    private readonly limiter: unknown,
    formats: readonly HeaderFormat[],
    private readonly names: readonly (string | undefined)[] | undefined,
  ) {
    this.members = flattenLimiters(limiter);
    this.policies = this.members.map(() => undefined);
    this.chained = isChain(limiter);
    this.draft = formats.find((f) => f !== 'legacy');
    this.legacy = formats.includes('legacy');
  }

  get enabled(): boolean {
    return this.draft !== undefined || this.legacy;
  }

  private policy(i: number, d: Decision): Policy {
    const cached = this.policies[i];
    if (cached !== undefined) return cached;
    const l = this.members[i]!;
    const s = shape(l);
    const quota = s?.quota ?? (isCount(l.limit) ? l.limit : d.limit);
    let name = this.names?.[i] ?? defaultName(l, quota, s?.windowMs);
    if (this.names === undefined && this.members.length > 1) {
      // Two members with the same figures still need distinct names in one list.
      if (this.policies.some((p) => p?.name === name)) name = `${name}-${i + 1}`;
    }
    const p = makePolicy(name, quota, s?.windowMs);
    if (s !== undefined) this.policies[i] = p; // known for good: cache it
    return p;
  }

  /** Writes the fields for `d`: every member's for draft 8, the tightest one's otherwise. */
  write<Res>(sink: HeaderSink<Res>, res: Res, d: Decision, alone: boolean): void {
    // `alone`: no other middleware of this package saw the request, so there is nothing
    // to append to (saves reading two fields back on every request).
    this.alone = alone;
    if (!this.chained) {
      this.writeOne(sink, res, this.policy(0, d), d);
      return;
    }
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
      this.writeOne(sink, res, this.policy(0, d), d);
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
        const m = member8(p, x);
        state = state === '' ? m : `${state}, ${m}`;
      }
      this.append(sink, res, 'RateLimit-Policy', policy);
      this.append(sink, res, 'RateLimit', state);
    } else if (this.draft !== undefined) {
      this.writeDraft(sink, res, this.policy(tight, ds[tight]!), ds[tight]!);
    }
    if (this.legacy) writeLegacy(sink, res, this.policy(tight, ds[tight]!), ds[tight]!);
  }

  /** Structured-field lists may be split over field lines; one line joined by ", " is the same. */
  private append<Res>(sink: HeaderSink<Res>, res: Res, name: string, value: string): void {
    const before = this.alone ? undefined : sink.getHeader(res, name);
    sink.setHeader(
      res,
      name,
      typeof before === 'string' && before !== '' ? `${before}, ${value}` : value,
    );
  }

  private writeOne<Res>(sink: HeaderSink<Res>, res: Res, p: Policy, d: Decision): void {
    if (this.draft === 'draft-8') {
      this.append(sink, res, 'RateLimit-Policy', p.structured);
      this.append(sink, res, 'RateLimit', member8(p, d));
    } else if (this.draft !== undefined) this.writeDraft(sink, res, p, d);
    if (this.legacy) writeLegacy(sink, res, p, d);
  }

  private writeDraft<Res>(sink: HeaderSink<Res>, res: Res, p: Policy, d: Decision): void {
    const finite = d.resetAfterMs !== Number.POSITIVE_INFINITY;
    sink.setHeader(res, 'RateLimit-Policy', p.plain);
    if (this.draft === 'draft-7') {
      const reset = finite ? `, reset=${seconds(d.resetAfterMs)}` : '';
      sink.setHeader(res, 'RateLimit', `limit=${p.quota}, remaining=${count(d.remaining)}${reset}`);
    } else {
      sink.setHeader(res, 'RateLimit-Limit', String(p.quota));
      sink.setHeader(res, 'RateLimit-Remaining', String(count(d.remaining)));
      if (finite) sink.setHeader(res, 'RateLimit-Reset', String(seconds(d.resetAfterMs)));
    }
  }
}

function member8(p: Policy, d: Decision): string {
  const t = d.resetAfterMs === Number.POSITIVE_INFINITY ? '' : `;t=${seconds(d.resetAfterMs)}`;
  return `${p.quoted};r=${count(d.remaining)}${t}`;
}

function writeLegacy<Res>(sink: HeaderSink<Res>, res: Res, p: Policy, d: Decision): void {
  sink.setHeader(res, 'X-RateLimit-Limit', String(p.quota));
  sink.setHeader(res, 'X-RateLimit-Remaining', String(count(d.remaining)));
  if (d.resetAfterMs !== Number.POSITIVE_INFINITY) {
    sink.setHeader(res, 'X-RateLimit-Reset', String(seconds(Date.now() + d.resetAfterMs)));
  }
}

/** `Retry-After` in whole seconds, rounded up; undefined when only a release can help. */
export function retryAfterSeconds(d: Decision): string | undefined {
  return d.retryAfterMs === Number.POSITIVE_INFINITY ? undefined : String(seconds(d.retryAfterMs));
}
