import { describe, expect, it } from 'vitest';
import { DIST, runChild as runChildFor } from '../helpers/child.js';
import { WORKER } from '../helpers/threads.js';

// A pending acquire() must keep its process alive until it settles (a pending
// Atomics.waitAsync alone does not), and a limiter whose waiters have all settled must not
// keep it alive any longer. Each case runs a child `node` on the built package.
// Far above the ~0.3 s such a child needs; a child still alive by then is held open.
const KILL_AFTER_MS = 10_000;

const runChild = (script: string) => runChildFor(script, KILL_AFTER_MS);

describe('process liveness with the wait queue', () => {
  it('keeps a process whose only pending work is an acquire() alive until it resolves, then lets it exit by itself', async () => {
    // The bucket's one token is taken; the next comes 200 ms later (real clock).
    const script = `
      import { TokenBucket } from ${JSON.stringify(DIST)};
      const limiter = new TokenBucket({ capacity: 1, refillPerSecond: 5, queueLimit: 1 });
      const start = performance.now();
      const took = limiter.tryAcquire();
      limiter.acquire().then(() => {
        console.log(JSON.stringify({ took, outcome: 'resolved', waitedMs: performance.now() - start }));
      });
    `;
    const outcome = await runChild(script);
    expect(outcome).toMatchObject({ killed: false, code: 0, stderr: '' });
    const result = JSON.parse(outcome.stdout);
    expect(result).toMatchObject({ took: true, outcome: 'resolved' });
    // Not before the refill (200 ms, less a little for clock rounding).
    expect(result.waitedMs).toBeGreaterThanOrEqual(190);
    expect(result.waitedMs).toBeLessThan(KILL_AFTER_MS);
  });

  it('keeps a process alive while its worker thread waits in acquire(), until the worker is granted', async () => {
    const script = `
      import { Worker } from 'node:worker_threads';
      import { TokenBucket } from ${JSON.stringify(DIST)};
      const limiter = new TokenBucket({ capacity: 1, refillPerSecond: 5, queueLimit: 1 });
      const worker = new Worker(new URL(${JSON.stringify(WORKER.href)}), {
        workerData: { limiter: limiter.handle, scenario: 'queue:wait-alone' },
        // Not this child's --input-type flag, which a worker started from a file rejects.
        execArgv: [],
      });
      worker.once('message', (m) => console.log(JSON.stringify(m)));
      worker.once('error', (e) => console.log(JSON.stringify({ error: String(e) })));
      worker.once('exit', (code) => console.log(JSON.stringify({ exit: code })));
    `;
    const outcome = await runChild(script);
    expect(outcome).toMatchObject({ killed: false, code: 0, stderr: '' });
    const lines = outcome.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ took: true, outcome: 'resolved' });
    expect(lines[0].waitedMs).toBeGreaterThanOrEqual(190);
    // The worker ended by itself once granted.
    expect(lines[1]).toEqual({ exit: 0 });
  });

  it('lets a process exit by itself once every waiter has settled: granted, aborted, timed out, evicted or closed', async () => {
    const script = `
      import { Concurrency, TokenBucket } from ${JSON.stringify(DIST)};
      const name = (p) => p.then(() => 'granted', (e) => e.name);
      const limiter = new Concurrency({ limit: 1, queueLimit: 4 });
      limiter.tryAcquire('k');
      const controller = new AbortController();
      const first = limiter.acquire('k');
      const aborted = name(limiter.acquire('k', 1, { signal: controller.signal }));
      const timedOut = name(limiter.acquire('k', 1, { timeoutMs: 20 }));
      controller.abort();
      limiter.release('k');
      const lease = await first;
      // Held until the third waiter timed out, so that it cannot be granted instead.
      const outcomes = [await aborted, await timedOut];
      lease.release();
      const newest = new TokenBucket({
        capacity: 1, refillPerSecond: 1e-3, queueLimit: 1, queueOrder: 'newest-first',
      });
      newest.tryAcquire();
      const evicted = name(newest.acquire());
      const closed = name(newest.acquire());
      outcomes.push(await evicted);
      newest.close();
      outcomes.push(await closed);
      console.log(JSON.stringify({ outcomes, stats: limiter.stats('k') }));
    `;
    const outcome = await runChild(script);
    expect(outcome).toMatchObject({ killed: false, code: 0, stderr: '' });
    expect(JSON.parse(outcome.stdout)).toEqual({
      outcomes: ['AbortError', 'TimeoutError', 'QueueFullError', 'LimiterClosedError'],
      stats: { available: 1, queued: 0, admitted: 2, rejected: 0 },
    });
  });
});
