import { fileURLToPath } from 'node:url';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { type ClusterLimiter, connectCluster, serveCluster } from '../../src/cluster/index.js';
import { ClusterUnavailableError, Concurrency, chain, TokenBucket } from '../../src/index.js';
import { runScenario } from '../helpers/child.js';

// Real cluster processes: each scenario is a primary that forks workers (the
// same script, which uses the built package: `npm test` builds first) and prints its
// outcome as JSON.
const FAULTS = fileURLToPath(new URL('../fixtures/cluster/faults.mjs', import.meta.url));

const run = (scenario: string) => runScenario(FAULTS, scenario, 50_000);

describe('atomic-limiter/cluster faults', () => {
  it('survives 8 of 10 workers killed mid-traffic, serves the other two, and gets back every permit the dead held', async () => {
    const r = await run('kill');
    expect(r.killed).toEqual(Array(8).fill('SIGKILL'));
    const reports = r.reports as { callsAfterDeaths: number; errors: unknown[] }[];
    expect(reports).toHaveLength(2);
    for (const report of reports) {
      expect(report.errors).toEqual([]);
      expect(report.callsAfterDeaths).toBeGreaterThanOrEqual(200);
    }
    // Every permit of the Concurrency limit is back: none leaked with a dead worker.
    expect(r.sem).toMatchObject({ available: 4, queued: 0 });
  }, 60_000);

  it('answers or drops every malformed message, never throws, and keeps serving the sender and the others', async () => {
    const r = (await run('malformed')) as {
      bad: { after: boolean; answers: Record<string, unknown> };
      good: { calls: number; allowed: number; errors: unknown[] };
      defaultKey: { admitted: number; rejected: number };
      sem: { available: number };
    };
    expect(r.bad.after).toBe(true);
    // Batches that name themselves get an answer; the rest are dropped.
    expect(r.bad.answers).toEqual({
      101: 'batch-error',
      102: 'batch-error',
      103: 'batch-error',
      104: 'batch-error',
      105: 'batch-error',
      106: 'batch-error',
      107: 'batch-error',
      108: ['TypeError'],
      109: ['TypeError'],
      110: ['RangeError'],
      111: ['TypeError'],
      // 112 (an acquire() with a string id) cannot be answered, and holds no other call.
      113: ['RangeError'], // RELEASE of 7 on sem (limit 2)
      114: 'batch-error',
      115: 'batch-error',
      116: ['TypeError'],
      117: ['TypeError', 'ClusterUnavailableError'],
      118: ['TypeError'],
      119: ['TypeError'], // no permit of sem freed (below)
    });
    expect(r.good.errors).toEqual([]);
    expect(r.good.allowed).toBe(r.good.calls);
    // Nothing malformed charged the default key or took a Concurrency permit.
    expect(r.defaultKey).toMatchObject({ admitted: 0, rejected: 0 });
    expect(r.sem.available).toBe(2);
  }, 60_000);

  it('refuses in the client, before sending, exactly the keys and permits the in-memory limiter refuses', async () => {
    const r = (await run('badkeys')) as {
      before: unknown;
      described: unknown[];
      mismatches: unknown[];
      compared: number;
      refusals: number;
      chainResult: unknown;
      readyIsSelf: boolean;
      defaultKey: { admitted: number; rejected: number };
      semDefault: { available: number };
    };
    expect(r.before).toEqual({});
    expect(r.readyIsSelf).toBe(true);
    expect(r.described).toEqual([
      { algorithm: 'TokenBucket', limit: 100, capacity: 100, refillPerSecond: 1 },
      { algorithm: 'Concurrency', limit: 3 },
      { algorithm: 'FixedWindow', limit: 7, windowMs: 60_000 },
    ]);
    expect(r.mismatches).toEqual([]);
    expect(r.chainResult).toEqual({
      allowed: true,
      limit: 7,
      members: [
        [true, 100],
        [true, 7],
      ],
    });
    expect(r.compared).toBe(12 * 6 + 8 * 3 + 8 * 2 + 12 + 12);
    expect(r.refusals).toBe(r.compared); // every one of them is a refusal
    // NaN, ±Infinity and null used to reach the primary as the default key.
    expect(r.defaultKey).toMatchObject({ admitted: 0, rejected: 0 });
    expect(r.semDefault.available).toBe(3);
  }, 60_000);

  it('survives a worker dying with permits of a limiter closed meanwhile (giving them back throws)', async () => {
    const r = await run('closed');
    expect(r).toEqual({ done: true, granted: true, alive: true });
  }, 60_000);

  it('aborts an acquire() waiting at the primary when its signal aborts, and releases a lease once', async () => {
    const r = await run('abort');
    expect(r.outcome).toMatchObject({ name: 'AbortError' });
    expect(r.queuedAfterAbort).toBe(0);
    expect(r.availableAfterRelease).toBe(1);
    expect(r.timedOut).toBe('granted');
    expect(r.after).toMatchObject({ available: 1, queued: 0, admitted: 2 });
  }, 60_000);

  it('hands a block request in flight to the calls waiting for it: exact in total across three workers', async () => {
    const r = (await run('blockrace')) as {
      allowed: number[];
      stats: { available: number; admitted: number };
    };
    const allowed = r.allowed.reduce((a, b) => a + b, 0);
    // Granted into blocks = spent + given back: nothing lost, nothing minted.
    expect(r.stats.available).toBe(50 - allowed);
    // Blocks can leave permits with a worker that no longer needs them, at most one block
    // each; with 120 calls for 50 permits, at least 50 − 3 × 8 are granted.
    expect(allowed).toBeGreaterThanOrEqual(50 - 3 * 8);
    expect(allowed).toBeLessThanOrEqual(50);
  }, 60_000);

  it('answers each call of a worker that loads both the ESM and the CommonJS build with its own answer', async () => {
    const r = await run('dual-copies');
    expect(r.outcomes).toEqual([
      ...Array(3).fill('a true of 3'),
      ...Array(2).fill('a false of 3'),
      ...Array(5).fill('b true of 100'),
    ]);
    expect(r.a).toMatchObject({ admitted: 3, rejected: 2 });
    expect(r.b).toMatchObject({ admitted: 5, rejected: 0 });
  }, 60_000);

  it("leases one block for a worker's first calls, made before the primary described the limiter, not one block per call", async () => {
    const r = await run('early-blocks');
    // The bad count fails alone; the ten others are served from one block of 16.
    expect(r.outcomes).toEqual(['RangeError', ...Array(10).fill('true')]);
    expect(r.api).toMatchObject({ admitted: 16, available: 1000 - 16 });
  }, 60_000);

  it('rejects ready() with ClusterUnavailableError, as the calls, when the worker disconnects before the primary serves', async () => {
    const r = await run('disconnect-ready');
    expect(r.waiting).toEqual(['ClusterUnavailableError', 'ClusterUnavailableError']);
    expect(r.after).toBe('ClusterUnavailableError');
  }, 60_000);

  it('gives back the unspent permits of a block when the worker closes its client and exits or disconnects in the same tick', async () => {
    const r = await run('close-exit');
    // Each worker spent one permit of a block of 8: the other 7 came back before it left.
    expect(r.exit).toMatchObject({ available: 9, admitted: 8 });
    expect(r.disconnect).toMatchObject({ available: 9, admitted: 8 });
  }, 60_000);

  it('a block given back after its window passed is not credited to the next window', async () => {
    const r = (await run('stale-block')) as { first: number; second: number };
    expect(r.first).toBe(100); // window 1 admits its limit…
    expect(r.second).toBe(0); // …and the 59 given back from window 0 do not add to it
  }, 60_000);

  it('spends permit blocks in consume() and acquire() too, exact in total, and says remaining as the local block', async () => {
    const r = await run('blocks');
    expect(r.allowed).toBe(25);
    // Blocks of 10, each leased when the last is spent (no leaseAhead): 10, 10, the last 5.
    expect(r.remainings).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8]);
    expect(r.refused).toEqual({ reason: 'limited', retryFinite: true });
    expect(r.leases).toBe(26);
    expect(r.whileWaiting).toMatchObject({ available: 0, queued: 1, admitted: 25 });
    // Exact: every permit granted went to a decision; none sits in a block after close().
    expect(r.c).toMatchObject({ available: 1, admitted: 25 }); // 1: refilled by the advance
    expect(r.a).toMatchObject({ available: 0, queued: 0, admitted: 26 });
    expect(r.semError).toMatchObject({ name: 'TypeError' });
    expect((r.semError as { message: string }).message).toMatch(/"block" is for rate limiters/);
  }, 60_000);
});

describe('atomic-limiter/cluster misuse', () => {
  const limiter = new TokenBucket({ capacity: 5, refillPerSecond: 1 });

  it('serveCluster refuses what is not an object of limiters, naming the entry', () => {
    expect(() => serveCluster({ api: {} } as never)).toThrow(
      expect.objectContaining({
        name: 'TypeError',
        code: 'ERR_INVALID_ARG_TYPE',
        message:
          'serveCluster: "api" must be a limiter of this package (new TokenBucket(…), attach(handle), …), got an object',
      }),
    );
    expect(() => serveCluster({ api: limiter, other: 5 } as never)).toThrow(/"other" .* got 5$/);
    expect(() => serveCluster([limiter] as never)).toThrow(TypeError);
    expect(() => serveCluster([limiter] as never)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }),
    );
    expect(() => serveCluster([limiter] as never)).toThrow(/got an array/);
    expect(() => serveCluster(null as never)).toThrow(/got null/);
    expect(() => serveCluster({})).toThrow(/at least one named limiter/);
    const server = serveCluster({ api: limiter, sem: new Concurrency({ limit: 1 }) });
    try {
      expect(() => serveCluster({ api: limiter })).toThrow(/"api" is already served/);
    } finally {
      server.close();
    }
    // Closed: the name is free again.
    serveCluster({ api: limiter }).close();
  });

  it('types a ready() client as described, so chain() takes it (checked by tsc)', () => {
    type Ready = Awaited<ReturnType<ClusterLimiter['ready']>>;
    expectTypeOf<Ready['limit']>().toEqualTypeOf<number>();
    expectTypeOf<ClusterLimiter['limit']>().toEqualTypeOf<number | undefined>();
    expectTypeOf(chain<[Ready, Ready]>).toBeFunction();
  });

  it('connectCluster throws ClusterUnavailableError outside a cluster worker (here: a forked test process)', () => {
    let error: unknown;
    try {
      connectCluster('api');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ClusterUnavailableError);
    expect(error).toMatchObject({ code: 'ERR_CLUSTER_UNAVAILABLE' });
    expect(() => connectCluster('' as never)).toThrow(TypeError);
  });

  it('connectCluster refuses bad options first, naming the option', () => {
    expect(() => connectCluster('api', { block: 0 })).toThrow(
      expect.objectContaining({
        name: 'RangeError',
        code: 'ERR_OUT_OF_RANGE',
        message: 'connectCluster: option "block" must be a positive integer, got 0',
      }),
    );
    // The block options of Redis fleet mode, with the same checks.
    expect(() => connectCluster('api', { block: 8, maxBlock: 4 })).toThrow(
      /"maxBlock" must be an integer from "block" \(8\)/,
    );
    expect(() => connectCluster('api', { leaseAhead: true })).toThrow(
      /"leaseAhead" is for permit blocks and needs "block"/,
    );
    expect(() => connectCluster('api', { block: 8, leaseAhead: 1 as never })).toThrow(TypeError);
    expect(() => connectCluster('api', { block: 2.5 })).toThrow(RangeError);
    expect(() => connectCluster('api', { block: '8' as never })).toThrow(TypeError);
    expect(() => connectCluster('api', { timeoutMs: 0 })).toThrow(/"timeoutMs"/);
    expect(() => connectCluster('api', { blockTtlMs: Number.NaN })).toThrow(/"blockTtlMs"/);
    expect(() => connectCluster('api', { maxPending: 0 })).toThrow(/"maxPending"/);
    expect(() => connectCluster('api', { bogus: 1 } as never)).toThrow(/unknown option "bogus"/);
  });
});
