import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

// Runs as its users would (`node examples/metrics-prometheus.mjs`, importing the package by
// its own name, i.e. dist/: npm run build first); its last line is JSON.
it('metrics-prometheus: one scrape shows the decisions and waits the example made', () => {
  const r = spawnSync(process.execPath, ['examples/metrics-prometheus.mjs'], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    encoding: 'utf8',
    timeout: 30_000,
  });
  expect(r.status, r.stderr).toBe(0);
  const summary = JSON.parse(r.stdout.trim().split('\n').pop()!);
  // 3 users × 10 at once, then 5 waiters; the backend's 20 acquire() calls, 19 of them waiting.
  expect(summary).toEqual({
    admitted: 35,
    refused: 30,
    backendAdmitted: 20,
    waits: 5,
    backendWaits: 19,
  });
});
