import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runScenario } from '../helpers/child.js';

// Real cluster processes (the scenario uses the built package: `npm test` builds first).
const SCENARIO = fileURLToPath(new URL('../fixtures/cluster/reconfigure.mjs', import.meta.url));

interface Attempt {
  allowed?: boolean;
  limit?: number;
  error?: string;
  message?: string;
}

describe('atomic-limiter/cluster: a served limiter reconfigured in the primary', () => {
  it("workers take up the primary's new limit and window: their permits checks, `limit` and HTTP policy fields follow, with or without a call of their own", async () => {
    const r = (await runScenario(SCENARIO, 'figures', 45_000)) as {
      before: { limit: number; policy: string; eight: Attempt };
      raised: {
        eight: Attempt;
        blocked: Attempt;
        limit: number;
        windowMs: number;
        policy: string;
      };
      idle: { limit: number; windowMs: number };
      lowered: { four: Attempt; three: Attempt; limit: number; policy: string };
    };
    expect(r.before.limit).toBe(5);
    expect(r.before.policy).toBe('"5-in-60s";q=5;w=60');
    expect(r.before.eight.error).toBe('RangeError');

    // Raised to 10 per 30 s: 8 permits, above the limit the worker was told first, pass.
    expect(r.raised.eight).toEqual({ allowed: true, limit: 10 });
    expect(r.raised.blocked).toEqual({ allowed: true, limit: 10 }); // through a permit block
    expect(r.raised.limit).toBe(10);
    expect(r.raised.windowMs).toBe(30_000);
    expect(r.raised.policy).toBe('"10-in-30s";q=10;w=30');
    // A worker that made no call learns it from the primary's announcement.
    expect(r.idle).toMatchObject({ limit: 10, windowMs: 30_000 });

    // Lowered to 3: 4 permits, within the limit the worker knew, are refused as in memory.
    expect(r.lowered.four.error).toBe('RangeError');
    expect(r.lowered.four.message).toContain('exceed the limit (3)');
    expect(r.lowered.three).toEqual({ allowed: true, limit: 3 });
    expect(r.lowered.limit).toBe(3);
    expect(r.lowered.policy).toBe('"3-in-30s";q=3;w=30');
  }, 50_000);
});

describe('atomic-limiter/cluster: give-backs under back-pressure', () => {
  it('a Concurrency release in a batch the primary refuses still runs and resolves; the other calls of that batch reject', async () => {
    const r = (await runScenario(SCENARIO, 'release', 45_000)) as {
      held: boolean;
      release: { ok?: null; error?: string };
      other: { ok?: boolean; error?: string };
      ownRefused: number;
      floodRefused: number;
      freeAfter: boolean;
    };
    expect(r.held).toBe(true);
    // The batch holding the release was refused (its answers were piling up unread) …
    expect(r.floodRefused).toBeGreaterThan(0);
    expect(r.ownRefused).toBe(1);
    expect(r.other).toEqual({ error: 'ClusterUnavailableError' });
    // … and the release ran all the same: its call resolved and the permit is free.
    expect(r.release).toEqual({ ok: null });
    expect(r.freeAfter).toBe(true);
  }, 50_000);
});
