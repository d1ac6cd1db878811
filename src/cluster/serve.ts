/**
 * serveCluster(): which limiters the primary serves, under which names, and what it tells
 * workers about each (its description). The answering itself is primary.ts's.
 */
import cluster from 'node:cluster';
import type { AnyLimiter } from '../attach.js';
import { headerAlgo } from '../engine/buffer.js';
import { HEADER_WORDS } from '../engine/layout.js';
import type { AlgorithmName } from '../options.js';
import { show, typeError } from '../validate.js';
import { dispatcher, type Served } from './primary.js';
import type { Description } from './protocol.js';

/** What `serveCluster` returns. */
export interface ClusterServer {
  /**
   * Stops serving these names: workers' later calls on them reject at once with
   * `ClusterUnavailableError` (not served). Permits held through them stay held until
   * released or until the holding worker dies.
   */
  close(): void;
}

// By the id in the buffer's header (attach.ts's table): the buffer, not the object, says
// what it is.
const ALGORITHMS: readonly (AlgorithmName | undefined)[] = [
  undefined,
  'TokenBucket',
  'LeakyBucket',
  'FixedWindow',
  'SlidingWindow',
  'SlidingLog',
  'Concurrency',
  'WarmingBucket',
];
const OPTION_NAMES = ['windowMs', 'capacity', 'refillPerSecond', 'ratePerSecond'] as const;

function describe(name: string, limiter: unknown): Served {
  const l = limiter as Record<string, unknown> | null;
  const handle = l?.handle as { kind?: unknown; buffer?: unknown } | undefined;
  if (
    typeof l !== 'object' ||
    l === null ||
    Array.isArray(l) ||
    handle?.kind !== 'atomic-limiter' ||
    !(handle.buffer instanceof SharedArrayBuffer) ||
    typeof l.tryAcquire !== 'function' ||
    typeof l.limit !== 'number'
  ) {
    throw typeError(
      `serveCluster: "${name}" must be a limiter of this package (new TokenBucket(…), attach(handle), …), got ${show(limiter)}`,
    );
  }
  let algorithm: AlgorithmName | undefined;
  try {
    algorithm = ALGORITHMS[headerAlgo(handle.buffer)];
  } catch (error) {
    throw typeError(`serveCluster: "${name}": ${(error as Error).message}`);
  }
  if (!algorithm) throw typeError(`serveCluster: "${name}" holds an unknown algorithm`);
  const known = algorithm;
  // The limiter's options version first: reading it takes up a reconfigure() made on another
  // thread, so the figures read after it are that version's.
  const figures = (): Description => {
    const version = l.optionsVersion;
    const description: Description = {
      algorithm: known,
      version: typeof version === 'number' ? version : 0,
      limit: l.limit as number,
    };
    for (const option of OPTION_NAMES) {
      const value = l[option];
      if (typeof value === 'number') description[option] = value;
    }
    return description;
  };
  return {
    limiter: limiter as AnyLimiter,
    description: figures(),
    describe: figures,
    header: new Int32Array(handle.buffer, 0, HEADER_WORDS),
    concurrency: algorithm === 'Concurrency',
  };
}

/**
 * In the primary: answers every current and future cluster worker's calls on these
 * limiters, by name. When a worker process dies, the `Concurrency` permits it held and
 * its queued `acquire()` calls are released at once. A name another live server of this
 * process serves is a TypeError.
 */
export function serveCluster(limiters: Record<string, AnyLimiter>): ClusterServer {
  if (!cluster.isPrimary) {
    throw typeError('serveCluster: call it in the cluster primary (cluster.isPrimary)');
  }
  if (typeof limiters !== 'object' || limiters === null || Array.isArray(limiters)) {
    throw typeError(
      `serveCluster: expected an object of named limiters ({ api: limiter }), got ${show(limiters)}`,
    );
  }
  const d = dispatcher();
  const entries = Object.entries(limiters).map(
    ([name, limiter]) => [name, describe(name, limiter)] as [string, Served],
  );
  if (entries.length === 0) {
    throw typeError('serveCluster: expected at least one named limiter, got an empty object');
  }
  for (const [name] of entries) {
    if (d.named.has(name)) throw typeError(`serveCluster: "${name}" is already served`);
  }
  d.add(entries);
  let open = true;
  return {
    close() {
      if (!open) return;
      open = false;
      d.remove(
        entries.map((e) => e[0]),
        entries.map((e) => e[1]),
      );
    },
  };
}
