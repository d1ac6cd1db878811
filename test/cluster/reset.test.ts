import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runScenario } from '../helpers/child.js';

// Real cluster processes: each scenario is a primary that forks workers (the same script,
// which uses the built package: `npm test` builds first) and prints its outcome as JSON.
const RESET = fileURLToPath(new URL('../fixtures/cluster/reset.mjs', import.meta.url));

const run = (scenario: string) => runScenario(RESET, scenario);

describe('atomic-limiter/cluster: reset() of a Concurrency key voids what workers held of it', () => {
  it('a worker that held a permit before the reset gives nothing back when it dies (tryAcquire)', async () => {
    const r = await run('held');
    expect(r.bHeld).toBe(true);
    // B still holds the only permit: A's death freed nothing.
    expect(r.afterA).toMatchObject({ available: 0 });
    expect(r.thirdAdmitted).toBe(false);
    // What B took after the reset is still B's: its death gives it back.
    expect(r.afterB).toMatchObject({ available: 1 });
  });

  it('a worker that held a lease before the reset gives nothing back when it dies (acquire)', async () => {
    const r = await run('lease');
    expect(r.bHeld).toBe(true);
    expect(r.afterA).toMatchObject({ available: 0 });
    expect(r.thirdAdmitted).toBe(false);
    expect(r.afterB).toMatchObject({ available: 1 });
  });

  it('voids a lease granted in the batch that resets its key, though recorded after it', async () => {
    const r = await run('same-batch');
    expect(r.bHeld).toBe(true);
    expect(r.afterA).toMatchObject({ available: 0 });
  });

  it('keeps a lease granted after the reset to a waiter queued before it', async () => {
    const r = await run('waiter');
    expect(r.bHeld).toBe(true);
    // B's permit, taken before the reset: its death frees nothing (A holds the permit)…
    expect(r.afterB).toMatchObject({ available: 0, queued: 0 });
    // …and A's lease, taken after it, comes back when A dies.
    expect(r.afterA).toMatchObject({ available: 1, queued: 0 });
  });
});

describe("atomic-limiter/cluster: a worker's reset() drops its permit block of the key", () => {
  // FixedWindow limit 10, a window that never ends: after the reset, exactly 10.
  it('drops the block it holds, without giving it back', async () => {
    const r = await run('block-held');
    expect(r.before).toBe(1);
    expect(r.admitted).toBe(10);
    expect(r.primary).toMatchObject({ available: 0, admitted: 10 });
  });

  it('a block request sent before the reset lands in nothing; the call waiting for it asks again', async () => {
    const r = await run('block-in-flight');
    expect(r.duringAllowed).toBe(true);
    expect(r.admitted).toBe(9); // and the call made with the reset: 10
    expect(r.primary).toMatchObject({ available: 0, admitted: 10 });
  });

  it('a top-up asked for in the tick of the reset leaves after it, and its permits are spent', async () => {
    const r = await run('block-top-up');
    expect(r.before).toBe(2);
    expect(r.duringAllowed).toBe(true); // from the block, before the reset
    expect(r.admitted).toBe(10);
    expect(r.primary).toMatchObject({ available: 0, admitted: 10 });
  });
});
