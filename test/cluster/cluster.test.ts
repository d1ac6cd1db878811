import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runScenario } from '../helpers/child.js';

// Real cluster processes: each scenario is a primary that forks workers (the same script)
// and prints its outcome as JSON.
const SCENARIO = fileURLToPath(new URL('../fixtures/cluster/scenario.mjs', import.meta.url));

const run = (scenario: string) => runScenario(SCENARIO, scenario);

describe('atomic-limiter/cluster', () => {
  it('admits exactly the limit across three worker processes that called before the primary served', async () => {
    const r = await run('exact');
    expect(r.admitted).toBe(50);
    expect(r.stats).toEqual({ available: 0, queued: 0, admitted: 50, rejected: 250 });
    expect(r.errors).toEqual([[], [], []]);
  });

  it('delivers errors as the same classes with the same codes, and says at once when a name is not served', async () => {
    const r = await run('errors');
    expect(r.tooMany).toMatchObject({ name: 'RangeError', range: true });
    expect(r.queueFull).toMatchObject({ code: 'ERR_QUEUE_FULL', full: true });
    expect(r.decision).toEqual({ allowed: false, retryIsInfinity: true });
    expect(r.closed).toMatchObject({ code: 'ERR_LIMITER_CLOSED', closed: true });
    expect(r.unknown).toMatchObject({ code: 'ERR_CLUSTER_UNAVAILABLE', timeout: false });
    expect((r.unknown as { message: string }).message).toMatch(
      /does not serve this name.*"sem", "closed"/,
    );
  });

  it('spends permit blocks locally and gives the unspent rest back: exact in total', async () => {
    const r = await run('blocks');
    expect(r.r1).toEqual({ done: true, admitted: 3, available: 47 });
    expect(r.r2).toEqual({ done: true, admitted: 47, available: 0 });
    // The primary counts permits granted into blocks: 8 to the first worker (5 came
    // back), 5 blocks of 8 and a last one of 7 to the second.
    expect(r.stats).toMatchObject({ available: 0, admitted: 8 + 47 });
  });

  it('spends no permit of a block after the window it was taken in', async () => {
    const r = await run('block-window');
    expect(r).toEqual({ took: 3, direct: true, later: 0 });
  });

  it('gives back what a block took in a later window to that window, and nothing to the one that passed', async () => {
    const r = await run('block-give');
    // Window 1: a top-up of 6 and 94 others; the 4 left of window 0 stopped counting.
    expect(r.others).toBe(94);
    expect(r.available).toBe(6);
  });

  it('keeps the leases of two servers in one primary apart', async () => {
    const r = await run('leases');
    expect(r.held).toEqual([0, 0]);
    expect(r.after).toEqual([1, 0]);
  });

  it('gives back a Concurrency permit granted after the worker stopped waiting (timeout)', async () => {
    const r = await run('late');
    expect(r.outcome).toBe('ERR_CLUSTER_TIMEOUT');
    expect(r.seen).toBe(1);
    expect(r.available).toBe(1);
  });

  it('aborts at the primary the acquire() calls of a closed client: none takes permits later', async () => {
    const r = await run('close-acquire');
    expect(r.outcomes).toEqual(['ERR_CLUSTER_UNAVAILABLE', 'ERR_CLUSTER_UNAVAILABLE']);
    expect(r.queued).toEqual([0, 0]);
    expect(r.semAfterRelease).toBe(1);
  });

  it('never runs the calls a client made in the tick it was closed, and runs the others of that batch', async () => {
    const r = await run('close-same-tick');
    expect(r.outcomes).toEqual([
      'true',
      'ERR_CLUSTER_UNAVAILABLE',
      'ERR_CLUSTER_UNAVAILABLE',
      'true',
      'true',
    ]);
    expect(r.api).toBe(2 + 3);
    expect(r.other).toBe(1);
  });

  it('refuses each waiter of a refused block request with the Decision for its own permits', async () => {
    const r = await run('block-retry');
    expect(r.allowed).toEqual([false, false]);
    expect(r.retryAfterMs).toEqual(r.inMemory);
    expect(r.inMemory).toEqual([1000, 5000]);
  });

  it('rejects with ClusterTimeoutError at its own timeoutMs, before a 20 ms timer set with a 5 ms call', async () => {
    const r = await run('timeout-order');
    expect(r.order).toEqual(['ERR_CLUSTER_TIMEOUT', 'timer 20 ms', 'slow answered']);
  });

  it('never frees, when a worker dies, permits another worker released and a third took', async () => {
    const r = await run('cross');
    expect(r).toEqual({ before: 0, afterDeath: 0 });
  });

  it('frees the Concurrency permit of a killed worker at once, and serves the next waiter', async () => {
    const r = await run('death');
    expect(r.before).toEqual({ available: 0, queued: 1, admitted: 1, rejected: 0 });
    expect(r.served).toEqual({ done: true, granted: true });
    expect(r.after).toMatchObject({ queued: 0, admitted: 2 });
  });
});

describe('atomic-limiter/cluster under PM2', () => {
  const PM2_ENV = fileURLToPath(new URL('../fixtures/cluster/pm2-env.mjs', import.meta.url));

  it('connectCluster in a PM2 cluster-mode instance throws at once, pointing to host mode', async () => {
    const r = await runScenario(PM2_ENV, 'cluster_mode');
    expect(r).toMatchObject({ threw: true, code: 'ERR_CLUSTER_UNAVAILABLE' });
    expect(r.message).toMatch(/PM2 cluster-mode instance 3.*atomic-limiter\/host/);
  });

  it("connectCluster in a worker of the application's own cluster under PM2 fork mode works", async () => {
    const r = await runScenario(PM2_ENV, 'fork_mode');
    expect(r).toEqual({ threw: false, allowed: true });
  });
});

describe('atomic-limiter/cluster permit blocks: the options of Redis fleet mode', () => {
  const BLOCKS = fileURLToPath(new URL('../fixtures/cluster/blocks.mjs', import.meta.url));

  it('leases a block only when the last is spent by default, a quarter ahead with leaseAhead, and grows leases up to maxBlock for a key spent faster than a round trip', async () => {
    const r = await runScenario(BLOCKS, 'blocks');
    // block 8: a lease when the block is empty (8, then 8 more).
    expect(r.plainRemaining).toEqual([7, 6, 5, 4, 3, 2, 1, 0, 7]);
    // leaseAhead: with 2 of 8 left the next is asked for, topping the block up to 8 (6).
    expect(r.aheadRemaining).toEqual([7, 6, 5, 4, 3, 2, 1, 0, 5]);
    // block 4, maxBlock 16: calls that found the block dry with a lease out double the
    // next lease: 4, then 8, then 16.
    expect(r.burst).toEqual([3, 2, 1, 0, 7, 6]);
    expect(r.after).toEqual([5, 4, 3, 2, 1, 0, 15]);
    // Exact: what was leased and not spent came back on close().
    expect(r.a).toMatchObject({ available: 1000 - 9, admitted: 16 });
    expect(r.b).toMatchObject({ available: 1000 - 9, admitted: 14 });
    expect(r.g).toMatchObject({ available: 1000 - 13, admitted: 4 + 8 + 16 });
  });
});
