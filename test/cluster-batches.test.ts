import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runScenario } from './helpers/child.js';

// Real cluster processes: each scenario is a primary that forks a worker (the same script,
// which uses the built package: `npm test` builds first) and prints its outcome as JSON.
const BATCHES = fileURLToPath(new URL('./cluster/batches.mjs', import.meta.url));

const run = (scenario: string) => runScenario(BATCHES, scenario);

const REFUSED = 'TypeError ERR_INVALID_ARG_TYPE';

describe('atomic-limiter/cluster batches', () => {
  it('splits a tick of 6000 acquire() calls over two names into batches the primary takes: every one granted once', async () => {
    const r = await run('acquires');
    expect(r.outcomes).toEqual({ ok: 6000 });
    expect(r.admitted).toEqual([3000, 3000]);
  }, 40_000);

  it('delivers 13 000 lease releases made in one tick: every permit comes back', async () => {
    const r = await run('drops');
    expect(r.before).toBe(7000);
    expect(r.after).toBe(20_000);
    expect(r.sem).toMatchObject({ available: 20_000, queued: 0 });
  }, 40_000);

  it('counts NAME and DROP records in a batch: 4000 tryAcquire calls and 3000 releases of another name in one tick', async () => {
    const r = await run('mixed');
    expect(r.outcomes).toEqual({ true: 4000 });
    expect(r.api).toMatchObject({ admitted: 4000, rejected: 0 });
    expect(r.sem).toMatchObject({ available: 5000 });
  }, 40_000);

  it('settles every call of a batch the primary refuses with its error, acquire() calls included', async () => {
    const r = await run('refused');
    expect(r.first).toEqual([REFUSED, REFUSED, REFUSED]);
    expect(r.second).toEqual([REFUSED, REFUSED]);
    // The acquire() placed after a refused call was not run. Those of a batch of acquire()
    // calls only may have run before the record the primary refused: they are aborted there.
    expect(r.aborted).toHaveLength(2);
  }, 40_000);

  it('sends a message per third of the calls in flight, every call once, each loop answered in order', async () => {
    const r = await run('inflight');
    // 64 loops awaiting 40 calls each of a bucket of 1000 that never refills: exactly 1000
    // granted, and a loop that was refused is never granted again (answers in call order).
    const loops = r.loops as boolean[][];
    expect(loops.flat().filter(Boolean)).toHaveLength(1000);
    expect(r.api).toMatchObject({ admitted: 1000, rejected: 1560 });
    for (const seen of loops) {
      const first = seen.indexOf(false);
      expect(first < 0 || seen.slice(first).every((v) => !v)).toBe(true);
    }
    // Each call travelled once; no message held more than a third of the 64 in flight
    // (rounded up): the primary decides one while the worker makes the next.
    const sizes = r.sizes as number[];
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(2560);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(22);
  }, 40_000);

  it("gives back the grants of a bucket answered after close(); a window's and a log's stay counted", async () => {
    const r = await run('late');
    expect(r.outcomes).toEqual(Array(9).fill('ERR_CLUSTER_UNAVAILABLE'));
    // tryAcquire 4, consume 3, acquire 2 on keys t, c, a.
    expect(r.bucket).toEqual([10, 10, 10]);
    // A log's refund would take back its newest entries, not necessarily the late grant's.
    expect(r.log).toEqual([6, 7, 8]);
    expect(r.win).toEqual([6, 7, 8]);
  }, 40_000);
});
