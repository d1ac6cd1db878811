/**
 * What an algorithm gives the composer (compose.lua.ts): its rule, written once, as named
 * Lua fragments on plain locals.
 *
 * The locals every fragment may read: NOW (µs), P (permits), EXTRA (a refund's taking time
 * or a lease id; '' when none), OP, SERVER (true when NOW is Redis TIME: only then may a
 * write keep the key's TTL, since every writer sets a TTL from Redis's clock), LEAST (a
 * lease's least), K1 and K2 (the call's keys), SLACK_MS (the TTL slack), adm and rej (the
 * key's counts, declared by `load`), ok and got (the verdict), fresh (µs until the state
 * saved is fresh again), avail (permits a call could take now).
 */

/** A form of one op: tryAcquire() ('t'), consume() ('c') or a fleet lease ('b'). */
export type Single = 't' | 'c' | 'b';

/** One algorithm's rule, as Lua fragments on the locals named above. */
export interface Rule {
  /** Names the script (and its forms) in errors. */
  readonly name: string;
  readonly consts: string;
  /**
   * Lua: reads the key(s) into the state's locals, as seen at NOW; declares adm and rej. K1's
   * string, if read, by `get` (Lua declaring `local v`: the batch's may be prefetched).
   */
  load(get: string): string;
  /** Lua condition: `x` permits may be granted at NOW. */
  fits(x: string): string;
  /** Lua: counts `x` permits granted at NOW into the state. */
  take(x: string): string;
  /** Lua: sets `fresh`, the µs until the state (as it would be saved) is fresh. */
  readonly fresh: string;
  /** Lua: writes the state (or deletes the key when fresh is 0); `ok`: after a grant. */
  readonly save?: string;
  /** Instead of `save`: K1's state as one string, saved by the composer (compose.lua.ts save()). */
  readonly stored?: {
    /** Lua expression: the string. */
    readonly value: string;
    /** Lua condition: the stored state ends no earlier than this one: its TTL is kept. */
    readonly keep: string;
    /** Lua expression: the µs (NOW's clock) its key lives to. */
    readonly until: string;
  };
  /** Lua: sets `avail` (after save: of the state saved). */
  readonly avail: string;
  /**
   * Lua: declares what `fits` reads, derived from the state as loaded, as seen at time `t`
   * (load gives it NOW; the retry search, NOW + r): the retry search is then `fits` at a
   * later time, with no function call on the grant path.
   */
  at?(t: string): string;
  /** Lua: `local guess`, µs from NOW: where the retry search starts (with `at`). */
  readonly guess?: string;
  /**
   * Lua, for a rule without `at`: defines `grants(r)` (P permits would be granted at NOW + r,
   * the state as loaded) and `guess`.
   */
  readonly retry?: string;
  /**
   * Lua expression: µs from NOW that permits just leased keep counting where counted; absent:
   * no end makes that exact (a block is held to blockTtlMs alone).
   */
  readonly counted?: string;
  /** Lua: P permits given back, taken at TAKEN (µs); then saved (`ret`: a reply, returned). */
  give(ret: Ret): string;
  /** Lua: reset(); absent: K1 deleted. */
  readonly drop?: string;
  /** Lua expression: the 6th figure of a refusal (Concurrency: µs to the first expiry). */
  readonly hint?: string;
  /** Lua: release() of a lease (replies itself). */
  release?(ret: Ret): string;
  /**
   * Lua: acquire()'s reservation of a refused call, `retry` known (replies itself); `save`:
   * the state's save, `fresh` declared.
   */
  reserve?(ret: Ret, save: string): string;
  /**
   * Whether a command on the keys other than the first GET may fail (a key of another type
   * for a list or a sorted set): such a script runs inside pcall, whose error carries the
   * call's token. The others read their key with redis.pcall and need none.
   */
  readonly guarded?: boolean;
  /** Lua: after a grant or refusal is saved (Concurrency publishes here). */
  readonly after?: string;
  /**
   * Lua: after `take`, sets again what `load` derives from the state at NOW, as a load of the
   * state just taken would. Given (even empty) only where take, fresh and avail touch
   * nothing but locals, and save's TTL choice holds from the first load to the last take
   * (its `ok`: any of them granted): a batch's run of equal calls on one key then shares one
   * load and one save.
   */
  readonly again?: string;
}

/**
 * Lua: a reply as the form returns it (with its token, or bare): a value `x` (a Lua
 * expression), or a table of the fields `x`.
 */
export type Ret = (x: string | readonly string[]) => string;

/** Lua: the table literal of `x`'s fields, or the value `x`. */
export function luaValue(x: string | readonly string[]): string {
  return typeof x === 'string' ? x : `{${x.join(', ')}}`;
}

/** A number as a Lua literal that reads back as the same double (shortest round-trip form). */
export function luaNumber(x: number): string {
  if (!Number.isFinite(x)) throw new Error(`atomic-limiter/redis: no Lua literal for ${x}`);
  return String(x);
}

/** A Lua string literal of `s`, every byte escaped (a channel name may hold anything). */
export function luaString(s: string): string {
  return `'${[...Buffer.from(s)].map((b) => `\\${b}`).join('')}'`;
}

/** The forms of one limiter's script. */
export interface Composed {
  readonly driver: string;
  readonly batch: string;
  single(op: Single): string;
}

/**
 * What a state's numbers mean: the settings they are counted in (a window's length, a
 * bucket's units), written into the state beside them so that a limiter with other settings
 * on the same prefix (a rolling deploy that changed `windowMs`) never misreads them, nor
 * overwrites them as its own: it refuses the key with an error naming it and both settings.
 * Settings that only bound the count (a limit, a capacity) are not part of it: a limiter
 * reads another limit's count as its own, as `reconfigure()` does in memory.
 */
export interface Geometry {
  /** Lua expressions: this limiter's settings (defined where the state is decoded). */
  readonly values: readonly string[];
  /** Lua: the text naming settings `vals` (Lua expressions) for the error. */
  describe(vals: readonly string[]): string;
}

/**
 * Where a limiter stands among its options' versions (reconfigure()): its own version and,
 * for each earlier one, the settings (Geometry values, as numbers) its states were written
 * with, and when (µs, the limiter's clock) each version from 1 on was made: `times[w - 1]`.
 */
export interface History {
  readonly version: number;
  readonly past: readonly (readonly number[])[];
  readonly times: readonly number[];
}

/** A state packed in K1: what names it, its fields (in stored order), settings and versions. */
export interface Packed {
  readonly what: string;
  readonly fields: readonly string[];
  readonly geo: Geometry;
  readonly history: History;
  /**
   * A field after `fields` that some writers leave out (`written` false): a state without
   * it reads it as nil. It keeps a slow bucket's state at 44 bytes, which Redis stores in
   * one allocation with the key's object.
   */
  readonly spare?: { readonly name: string; readonly written: boolean };
  /**
   * Lua: converts the fields of a state (its first field set) from settings `from` (Lua
   * expressions, an earlier version's) to settings `to` (the next version's), as seen at
   * time `at` (a Lua expression), when that version was made: the in-memory describe() and
   * restate(). A state left with nothing to count sets its first field nil.
   */
  convert(from: readonly string[], to: readonly string[], at: string): string;
}
