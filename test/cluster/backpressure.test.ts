import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runScenario } from '../helpers/child.js';

// Real cluster processes (the scenario uses the built package: `npm test` builds first).
const SCENARIO = fileURLToPath(new URL('../fixtures/cluster/backpressure.mjs', import.meta.url));

describe('atomic-limiter/cluster back-pressure', () => {
  it('a worker that never reads its answers gets its batches refused; the primary queues a bounded amount for it and serves the others', async () => {
    const r = (await runScenario(SCENARIO, 'flood', 60_000)) as {
      batches: number;
      flood: { answered: number; refused: number };
      good: { calls: number; allowed: number; errors: string[] };
      maxQueuedMessages: number;
      maxQueuedBytes: number;
    };
    // 200 batches of 4 096 consume() calls, about 36 MB of answers had they all been run:
    // the first few are, the rest are refused with one small answer each.
    expect(r.flood.answered + r.flood.refused).toBe(r.batches);
    expect(r.flood.answered).toBeGreaterThanOrEqual(4);
    expect(r.flood.refused).toBeGreaterThan(0);
    expect(r.maxQueuedBytes).toBeLessThan(2 * 1024 * 1024);
    expect(r.maxQueuedMessages).toBeLessThanOrEqual(r.batches);
    // The other worker was served throughout, every call answered.
    expect(r.good.errors).toEqual([]);
    expect(r.good.allowed).toBe(r.good.calls);
  }, 70_000);
});
