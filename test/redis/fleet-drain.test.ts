import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Blocks } from '../../src/redis/fleet/blocks.js';

// Fleet mode's blocks are shared by the threads of a process: one thread drains a block
// (the sweep giving aged-out permits back, a slot taken over) while another lands a lease
// of a later window in it. A drained block is given back to Redis with its taking time, so
// the permits and the time drain() returns must be one lease's: old permits carrying a
// later lease's time would be credited to a window that never counted them.

const SOURCE = new URL('../../src/redis/fleet/blocks.ts', import.meta.url).pathname;
let dir: string;
let bundle: string;

beforeAll(async () => {
  // The worker thread runs the same Blocks code, bundled from the source for it.
  dir = mkdtempSync(join(tmpdir(), 'atomic-limiter-blocks-'));
  bundle = join(dir, 'blocks.mjs');
  await build({
    entryPoints: [SOURCE],
    bundle: true,
    format: 'esm',
    platform: 'node',
    outfile: bundle,
    logLevel: 'error',
  });
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * Lease i of the writer, from when it says it is ready until told to stop: i permits, taken
 * at i × 10 µs, counted in window i.
 */
const WRITER = `
import { workerData, parentPort } from 'node:worker_threads';
const { Blocks } = await import(workerData.bundle);
const blocks = new Blocks(workerData.handle);
const stop = new Int32Array(workerData.stop);
parentPort.postMessage('ready');
let i = 0;
while (Atomics.load(stop, 0) === 0) {
  i++;
  blocks.add(0, i, i * 10, i, Number.MAX_SAFE_INTEGER, blocks.epoch(0));
}
parentPort.postMessage(i);
`;

/** Drains that found permits, each of them raced by the writer's next lease… */
const DRAINS = 200_000;
/** …or drain() calls, at most: the test ends on a busy machine too. */
const ATTEMPTS = 50_000_000;

/** The worker's next message (or its error). */
function message(worker: Worker): Promise<unknown> {
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

describe('fleet blocks: drain() beside a lease landing', () => {
  it('returns permits with their own lease’s taking time while another thread lands later windows’ leases', async () => {
    const blocks = new Blocks(4);
    const stop = new SharedArrayBuffer(4);
    const writer = new Worker(WRITER, {
      eval: true,
      workerData: { bundle, handle: blocks.handle, stop },
    });
    expect(await message(writer)).toBe('ready');
    const landed = message(writer);
    let drained = 0;
    const mixed: { permits: number; takenUs: number }[] = [];
    for (let n = 0; n < ATTEMPTS && drained < DRAINS; n++) {
      const d = blocks.drain(0);
      if (d === undefined) continue;
      drained++;
      if (d.takenUs !== d.permits * 10 && mixed.length < 5) {
        mixed.push({ permits: d.permits, takenUs: d.takenUs });
      }
    }
    Atomics.store(new Int32Array(stop), 0, 1);
    const leases = (await landed) as number;
    await writer.terminate();
    expect(mixed).toEqual([]);
    // Every drain took a lease's permits: the writer landed at least as many.
    expect(drained).toBeGreaterThan(0);
    expect(leases).toBeGreaterThanOrEqual(drained);
  }, 120_000);
});
