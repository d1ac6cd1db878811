import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runScenario } from '../helpers/child.js';

// Real cluster processes: each scenario is a primary that forks a worker (the same script,
// which uses the built package: `npm test` builds first) and prints its outcome as JSON.
const BATCHES = fileURLToPath(new URL('../fixtures/cluster/batches.mjs', import.meta.url));

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

  it('sends a message per third of the calls in flight, every call once, each answer to its own call', async () => {
    const r = await run('inflight');
    // Loop i asks 1 + i % 4 permits a call of its own key, a bucket of 60: its answers are
    // 60 − p, 60 − 2p, … while they last, then refusals. An answer given to another loop's
    // call (another key, other permits) breaks its loop's sequence.
    const loops = r.loops as number[][];
    const admitted = r.admitted as number[];
    loops.forEach((seen, i) => {
      const p = 1 + (i % 4);
      const want = Array.from({ length: 40 }, (_, j) =>
        60 - (j + 1) * p >= 0 ? 60 - (j + 1) * p : -1,
      );
      expect([i, seen]).toEqual([i, want]);
      expect([i, admitted[i]]).toEqual([i, Math.min(40, Math.floor(60 / p)) * p]); // permits
    });
    // Each call travelled once, in messages of a third of the 64 in flight at most
    // (rounded up): the primary decides one while the worker makes the next; and still
    // batched — several calls a message.
    const sizes = r.sizes as number[];
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(2560);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(22);
    expect(sizes.length).toBeLessThanOrEqual(2560 / 4);
  }, 40_000);

  it('sends the give-backs of a closing client in one message: nobody awaits them', async () => {
    const r = await run('give-back');
    // Each key: 4 leased, 1 spent, 3 given back.
    expect(r.available).toEqual(Array(100).fill(999));
    // The 100 give-backs leave in one message when close() returns (the worker may exit
    // right after it); the stats call made after them in the same tick, in the next.
    expect(r.messages).toBe(2);
  }, 40_000);

  it("a closed client's calls taken out of the batch no longer count toward sending it early", async () => {
    const r = await run('close-recount');
    expect(r.outcomes).toEqual([
      ...Array(7).fill('ERR_CLUSTER_UNAVAILABLE'),
      ...Array(5).fill('true'),
    ]);
    expect(r.api).toMatchObject({ admitted: 5 });
    // The 5 calls of the other client: fewer than 8, one message at the tick's end.
    expect(r.messages).toBe(1);
  }, 40_000);

  it("gives back the grants of a bucket (a WarmingBucket too) answered after close(); a window's and a log's stay counted", async () => {
    const r = await run('late');
    expect(r.outcomes).toEqual(Array(12).fill('ERR_CLUSTER_UNAVAILABLE'));
    // tryAcquire 4, consume 3, acquire 2 on keys t, c, a.
    expect(r.bucket).toEqual([10, 10, 10]);
    // A WarmingBucket says all (10) or nothing: its debt went with the refunds.
    expect(r.warm).toEqual([10, 10, 10]);
    // A log's refund would take back its newest entries, not necessarily the late grant's.
    expect(r.log).toEqual([6, 7, 8]);
    expect(r.win).toEqual([6, 7, 8]);
  }, 40_000);
});
