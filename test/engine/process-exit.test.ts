import { describe, expect, it } from 'vitest';
import { DIST, runChild as runChildFor } from '../helpers/child.js';
import { WORKER } from '../helpers/threads.js';

// A limiter with nothing pending must not keep a process alive: a process that is done
// with its work exits by itself. Each case runs a child `node` on the built package.
// Far above the ~0.1 s such a child needs; a child still alive by then is held open.
const KILL_AFTER_MS = 20_000;

const runChild = (script: string) => runChildFor(script, KILL_AFTER_MS);

describe('process liveness', () => {
  it('lets a process exit by itself after its worker attached, took permits and ended', async () => {
    const script = `
      import { Worker } from 'node:worker_threads';
      import { TokenBucket } from ${JSON.stringify(DIST)};
      const limiter = new TokenBucket({ capacity: 8, refillPerSecond: 1e-3 });
      const worker = new Worker(new URL(${JSON.stringify(WORKER.href)}), {
        workerData: { limiter: limiter.handle, scenario: 'threads:attach-and-end' },
        // Not this child's --input-type flag, which a worker started from a file rejects.
        execArgv: [],
      });
      const fromWorker = await new Promise((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      let fromMain = 0;
      for (let i = 0; i < 5; i++) if (limiter.tryAcquire('k')) fromMain++;
      console.log(JSON.stringify({ fromWorker, fromMain }));
    `;
    const outcome = await runChild(script);
    expect(outcome).toMatchObject({ killed: false, code: 0, stderr: '' });
    // The worker took 5 of the 8 tokens, the main thread the 3 left.
    expect(JSON.parse(outcome.stdout)).toEqual({ fromWorker: 5, fromMain: 3 });
  });

  it('lets a process that used every kind of limiter on its main thread alone exit by itself', async () => {
    const script = `
      import * as lib from ${JSON.stringify(DIST)};
      const clock = new lib.ManualClock();
      // Real clock, but rates and windows slow enough that nothing refills meanwhile.
      const hour = 3_600_000;
      const limiters = [
        new lib.TokenBucket({ capacity: 2, refillPerSecond: 1e-3 }),
        new lib.LeakyBucket({ capacity: 2, ratePerSecond: 1e-3 }),
        new lib.FixedWindow({ limit: 2, windowMs: hour }),
        new lib.SlidingWindow({ limit: 2, windowMs: hour }),
        new lib.SlidingLog({ limit: 2, windowMs: hour }),
        new lib.Concurrency({ limit: 2 }),
        new lib.TokenBucket({ capacity: 2, refillPerSecond: 1, clock }),
      ];
      const admitted = limiters.map((l) => {
        let n = 0;
        for (let i = 0; i < 3; i++) if (l.tryAcquire('k')) n++;
        return n;
      });
      clock.advance(1000);
      console.log(JSON.stringify(admitted));
    `;
    const outcome = await runChild(script);
    expect(outcome).toMatchObject({ killed: false, code: 0, stderr: '' });
    expect(JSON.parse(outcome.stdout)).toEqual([2, 1, 2, 2, 2, 2, 2]);
  });
});
