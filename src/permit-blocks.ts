/**
 * Permit blocks: what the cluster client (`connectCluster`) and Redis fleet mode share. A
 * block is permits taken from the authority (the cluster primary, Redis) in one round trip
 * and spent locally at in-memory cost; the options, their defaults and the rules of when to
 * lease and how much are the same for both, and written here once. Where the blocks live
 * differs: in a worker process's own memory (cluster/client.ts), in a SharedArrayBuffer
 * spent by every thread of the process (redis/fleet/blocks.ts).
 */
import { integerOption, rangeError, show, typeError } from './validate.js';

/** The permit-block options, as both transports take them. */
export interface BlockOptions {
  /**
   * Permits taken per round trip and spent locally (default: off, every call is a round
   * trip). At most `block − 1` permits per key then sit unspent in a process (without
   * `leaseAhead` or `maxBlock`), unavailable to others until spent, given back after
   * `blockTtlMs` or on `close()`. An integer from 1 to the limit. Rate limiters only.
   */
  block?: number;
  /** How long a block may be spent before its unspent permits go back, ms (default 1000). */
  blockTtlMs?: number;
  /**
   * The largest lease, from `block` to the limit (default `block`: every lease is one
   * block). A key spent faster than a round trip brings permits gets leases doubling up to
   * this, back to one block once its block ages out: more decisions per round trip, more
   * permits held unspent (`maxBlock − 1`).
   */
  maxBlock?: number;
  /**
   * Whether the next lease is taken in the background once a quarter of the last one is
   * left (default false: only when the block cannot serve a call). True: a busy key's calls
   * need not wait for a round trip each time a block runs out, and a process may hold up
   * to `2 × L + L / 4` of a key (L: the lease size).
   */
  leaseAhead?: boolean;
}

/** The checked block options (`block` 0: off). */
export interface BlockSettings {
  readonly block: number;
  readonly blockTtlMs: number;
  /** ≥ block; = block when leases do not grow. */
  readonly maxBlock: number;
  readonly leaseAhead: boolean;
}

export const DEFAULT_BLOCK_TTL_MS = 1000;
const MAX = 2 ** 31 - 1;

/**
 * Checks the block options of `opts` for `owner` (the limit is checked later, once known).
 * `mode` names what they are for in errors ('fleet mode', 'permit blocks'); `others` are
 * further options of the transport's that need `block` too.
 */
export function blockSettings(
  owner: string,
  opts: Readonly<Record<string, unknown>>,
  mode: string,
  others: readonly string[] = [],
): BlockSettings {
  const block = opts.block;
  if (block !== undefined) {
    if (typeof block !== 'number') {
      throw typeError(`${owner}: option "block" must be a positive integer, got ${show(block)}`);
    }
    if (!Number.isInteger(block) || block < 1 || block > MAX) {
      throw rangeError(`${owner}: option "block" must be a positive integer, got ${show(block)}`);
    }
  }
  const blockTtlMs = integerOption(
    owner,
    'blockTtlMs',
    opts.blockTtlMs,
    1,
    MAX,
    DEFAULT_BLOCK_TTL_MS,
  );
  const maxBlock = integerOption(owner, 'maxBlock', opts.maxBlock, 1, MAX, 0);
  if (opts.maxBlock !== undefined && (block === undefined || maxBlock < (block as number))) {
    throw rangeError(
      `${owner}: option "maxBlock" must be an integer from "block" (${show(block)}) to the limit, got ${show(opts.maxBlock)}`,
    );
  }
  if (opts.leaseAhead !== undefined && typeof opts.leaseAhead !== 'boolean') {
    throw typeError(
      `${owner}: option "leaseAhead" must be a boolean, got ${show(opts.leaseAhead)}`,
    );
  }
  // The other options mean nothing without blocks: a forgotten "block" is not passed over
  // in silence.
  for (const name of ['blockTtlMs', 'leaseAhead', ...others]) {
    if (opts[name] !== undefined && block === undefined) {
      throw rangeError(
        `${owner}: option "${name}" is for ${mode} and needs "block", got ${show(opts[name])} without "block"`,
      );
    }
  }
  const b = (block as number | undefined) ?? 0;
  return { block: b, blockTtlMs, maxBlock: maxBlock || b, leaseAhead: opts.leaseAhead === true };
}

/**
 * Whether a lease ahead is due (`leaseAhead`) with `left` permits in hand of leases of
 * `size`: at a quarter of one left with none out; at an eighth with one out (a key spent
 * faster than a round trip brings a lease). Blocks too small to split never lease ahead.
 */
export function leaseAheadDue(left: number, size: number, out: boolean): boolean {
  return out ? size >= 8 && left <= size >> 3 : size >= 4 && left <= size >> 2;
}

/**
 * The next lease size of a key that ran dry while a lease was out (spent faster than a
 * round trip brings `size` permits): doubled, up to `most` (maxBlock). Back to `block`
 * once the key's block ages out.
 */
export function grownLease(size: number, most: number): number {
  return size < most ? Math.min(2 * size, most) : size;
}
