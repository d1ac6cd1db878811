/**
 * A call from a worker's cluster client as the channel keeps it until its answer comes:
 * what client.ts hands over (Caller, Check) and what channel.ts tracks (Pending).
 */
import type { Key } from '../limiter.js';
import type { Description } from './protocol.js';

/** What a client needs of itself here. */
export interface Caller {
  readonly name: string;
  readonly timeoutMs: number;
  readonly maxPending: number;
  /** Whether the served limiter holds permits (Concurrency): late grants are released. */
  readonly concurrency: boolean;
}

/** One call waiting for its answer. */
export interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  caller: Caller;
  op: number;
  key: Key | undefined;
  permits: number;
  /** Extra record value: TAKE's max, GIVE's taking time, ACQUIRE's timeoutMs (−1: none). */
  extra: number;
  /** Answered, timed out, aborted or rejected: a late answer only gives permits back. */
  settled: boolean;
  /** When its wait started (ms); −1: when its batch left. */
  since: number;
  /** ACQUIRE: its id, and its own timeout (the primary waits first). */
  id: number;
  timeoutMs: number;
  /**
   * ACQUIRE: the batch it left in (0: none yet) and the answered calls before it there, to
   * tell whether the primary ran it when it refuses the batch.
   */
  batch: number;
  at: number;
  /** Runs once the description is known, before sending; a throw rejects the call. */
  check: Check | undefined;
}

export type Check = (d: Description, key: Key | undefined, permits: number) => void;
