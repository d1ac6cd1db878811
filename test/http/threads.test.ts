import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
// dist/, as the worker threads load it: one package, one handle format.
import { ManualClock, SlidingLog } from '../../dist/index.js';
import { request, watchWarnings } from '../helpers/http.js';
import { scenarioWorker } from '../helpers/threads.js';

watchWarnings();

describe('rateLimit across worker threads', () => {
  it('two threads, each serving HTTP on its own port, admit the shared limit once in total', async () => {
    const LIMIT = 10;
    const limiter = new SlidingLog({ limit: LIMIT, windowMs: 60_000, clock: new ManualClock() });
    const workers = [0, 1].map((index) =>
      scenarioWorker('http:server', { workerData: { handle: limiter.handle, index } }),
    );
    try {
      const ports = await Promise.all(
        workers.map(async (w) => ((await once(w, 'message'))[0] as { port: number }).port),
      );
      expect(new Set(ports).size).toBe(2);
      // 40 requests at once, 20 to each thread's port.
      const replies = await Promise.all(
        Array.from({ length: 40 }, (_, i) => request(ports[i % 2]!)),
      );
      const ok = replies.filter((r) => r.status === 200);
      expect(ok).toHaveLength(LIMIT);
      expect(replies.filter((r) => r.status === 429)).toHaveLength(40 - LIMIT);
      const reports = await Promise.all(
        workers.map(async (w) => {
          w.postMessage('close');
          return (await once(w, 'message'))[0] as { allowed: number; refused: number };
        }),
      );
      // Each thread answered its 20, and together they admitted the limit exactly once.
      expect(reports.map((r) => r.allowed + r.refused)).toEqual([20, 20]);
      expect(reports[0]!.allowed + reports[1]!.allowed).toBe(LIMIT);
      expect(limiter.stats('shared').admitted).toBe(LIMIT);
    } finally {
      await Promise.all(workers.map((w) => w.terminate()));
    }
  });
});
