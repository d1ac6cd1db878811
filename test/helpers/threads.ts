import { Worker, type WorkerOptions } from 'node:worker_threads';

/** test/fixtures/worker.mjs: every worker thread of the tests runs a named scenario there. */
export const WORKER = new URL('../fixtures/worker.mjs', import.meta.url);

/**
 * A worker thread running `scenario` ("<module>:<name>", a function of
 * test/fixtures/scenarios/<module>.mjs) with `options.workerData` plus the scenario's name.
 */
export function scenarioWorker(scenario: string, options: WorkerOptions = {}): Worker {
  const data = options.workerData as Record<string, unknown> | undefined;
  return new Worker(WORKER, { ...options, workerData: { ...data, scenario } });
}

/** What every worker started here finds in `workerData`, besides the caller's data. */
export interface ThreadContext {
  /** 0 … count − 1. */
  readonly index: number;
  /** How many workers share the barrier. */
  readonly count: number;
  /** Word 0 counts arrivals; `arrive()` in test/fixtures/scenarios/lib.mjs waits for all `count`. */
  readonly barrier: SharedArrayBuffer;
}

/** A group of running workers. */
export interface WorkerGroup<R> {
  readonly workers: readonly Worker[];
  /** Arrivals at the start barrier so far. */
  readonly arrivals: Int32Array;
  /**
   * One result per worker, in index order: the first message each posted, once every
   * worker has exited with code 0. Rejects on the first error, on a non-zero exit, or on a
   * worker exiting without a message; the other workers are then terminated.
   */
  readonly results: Promise<R[]>;
  /** Terminates every worker still running and waits for all of them to exit. */
  terminate(): Promise<void>;
}

/**
 * Starts `count` workers running `scenario` (see scenarioWorker) with workerData
 * `{ ...data, index, count, barrier }`. Workers call `arrive()`
 * (test/fixtures/scenarios/lib.mjs) to start together.
 */
export function startWorkers<R = unknown>(
  scenario: string,
  count: number,
  data: Record<string, unknown> = {},
): WorkerGroup<R> {
  const barrier = new SharedArrayBuffer(4);
  const workers: Worker[] = [];
  const exits: Promise<number>[] = [];
  const settled: Promise<R>[] = [];
  for (let index = 0; index < count; index++) {
    const context: ThreadContext = { index, count, barrier };
    const worker = scenarioWorker(scenario, { workerData: { ...data, ...context } });
    workers.push(worker);
    exits.push(new Promise((resolve) => worker.once('exit', resolve)));
    settled.push(
      new Promise<R>((resolve, reject) => {
        let result: { value: R } | undefined;
        worker.once('message', (value: R) => {
          result = { value };
        });
        worker.once('error', reject);
        worker.once('exit', (code) => {
          if (code !== 0) reject(new Error(`worker ${index} exited with code ${code}`));
          else if (!result) reject(new Error(`worker ${index} exited without a result`));
          else resolve(result.value);
        });
      }),
    );
  }
  const terminate = async () => {
    await Promise.all(workers.map((w) => w.terminate()));
    await Promise.all(exits);
  };
  const results = Promise.all(settled).catch(async (error: unknown) => {
    await terminate();
    throw error;
  });
  // A caller that ends the workers on purpose (terminate()) need not await the results.
  results.catch(() => {});
  return { workers, arrivals: new Int32Array(barrier), results, terminate };
}

/**
 * Runs `count` workers on `scenario` to completion (see startWorkers) and returns one
 * result per worker, in index order. Every worker has exited when this settles.
 */
export async function runWorkers<R = unknown>(
  scenario: string,
  count: number,
  data: Record<string, unknown> = {},
): Promise<R[]> {
  const group = startWorkers<R>(scenario, count, data);
  try {
    return await group.results;
  } finally {
    await group.terminate();
  }
}

// Atomics.waitAsync is in Node 20 but in TypeScript's ES2024 lib, not the ES2022 one used here.
const waitAsync = (
  Atomics as unknown as {
    waitAsync(words: Int32Array, index: number, value: number): { value: unknown };
  }
).waitAsync;

/** Resolves once `Atomics.load(words, index) >= target`, without blocking this thread. */
export async function waitForCount(words: Int32Array, index: number, target: number) {
  for (;;) {
    const seen = Atomics.load(words, index);
    if (seen >= target) return;
    await waitAsync(words, index, seen).value;
  }
}
