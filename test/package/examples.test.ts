import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// Each example runs as its users would run it (`node examples/<name>.mjs`, importing
// 'atomic-limiter' by the package's own name, i.e. dist/) and prints its summary as a last
// JSON line, which these tests check.
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function runExample(name: string, timeoutMs = 30_000): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [`examples/${name}.mjs`], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    // Killing a cluster primary disconnects its workers, which then exit too.
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) {
        reject(new Error(`${name} exited ${code ?? signal}:\n${out}\n${err}`));
        return;
      }
      resolve(JSON.parse(out.trim().split('\n').pop() as string));
    });
  });
}

interface ClientCount {
  200: number;
  429: number;
  other: number;
  retryAfter: number[];
  allowedBy: Record<string, number>;
  limitedBy: Record<string, number>;
  firstLimitedHeaders: Record<string, string>;
  skipped?: string;
}

describe('examples', () => {
  it('cluster-http: exactly the per-IP limit gets 200 across both worker processes, the rest 429 with Retry-After', async () => {
    const r = await runExample('cluster-http');
    const limit = r.limit as number;
    const requests = r.requests as number;
    const byClient = r.byClient as Record<string, ClientCount>;
    const first = byClient['127.0.0.1'] as ClientCount;
    expect(first[200]).toBe(limit);
    expect(first[429]).toBe(requests - limit);
    expect(first.other).toBe(0);
    expect(first.retryAfter).toHaveLength(requests - limit);
    for (const s of first.retryAfter) {
      expect(Number.isInteger(s)).toBe(true);
      expect(s).toBeGreaterThanOrEqual(1);
      expect(s).toBeLessThanOrEqual((r.windowMs as number) / 1000);
    }
    // Written by atomic-limiter/http from the cluster client's decision: remaining 0.
    expect(first.firstLimitedHeaders['retry-after']).toBe(String(first.retryAfter[0]));
    expect(first.firstLimitedHeaders['ratelimit-policy']).toMatch(new RegExp(`;q=${limit}(;|$)`));
    expect(first.firstLimitedHeaders.ratelimit).toMatch(/^"[^"]+";r=0;t=\d+$/);
    // Each worker answered some of them: the limit held across processes, not per process.
    const answered = { ...first.allowedBy };
    for (const [w, n] of Object.entries(first.limitedBy)) answered[w] = (answered[w] ?? 0) + n;
    expect(Object.values(answered).reduce((a, b) => a + b, 0)).toBe(requests);
    // A second loopback address, where the host has one, has a limit of its own.
    const second = byClient['127.0.0.2'] as ClientCount;
    if (!second.skipped) {
      expect(second[200]).toBe(limit);
      expect(second[429]).toBe(requests - limit);
    }
  });

  it('express: per-IP and per-API-key limits, a chain listing both policies, a per-route cost', async () => {
    const r = await runExample('express');
    expect(r.alpha).toEqual([200, 200, 429]); // 5 + 5 permits, then the second is full
    // The chain asks its day member too (and gives its permits back): every member listed.
    const refused = r.alphaRefused as { retryAfter: string; ratelimit: string; body: unknown };
    expect(refused.retryAfter).toBe('1');
    expect(refused.body).toEqual({ error: 'rate limited' });
    expect(refused.ratelimit).toMatch(
      /^"30-in-60s";r=27;t=60, "per-second";r=0;t=1, "per-day";r=990;t=\d+$/,
    );
    const first = r.firstAllowed as { ratelimit: string; policy: string };
    expect(first.policy).toBe(
      '"30-in-60s";q=30;w=60, "per-second";q=10;w=1, "per-day";q=1000;w=86400',
    );
    expect(first.ratelimit).toMatch(
      /^"30-in-60s";r=29;t=60, "per-second";r=5;t=1, "per-day";r=995;t=\d+$/,
    );
    expect(r.beta).toEqual({ 200: 10, 429: 2 });
  });

  it('fastify: the plugin on every route, an exempt route, a Concurrency route that waits', async () => {
    const r = await runExample('fastify');
    expect(r.hello).toEqual([200, 200, 200, 200, 200, 429, 429]);
    expect(r.retryAfter).toBe('10');
    expect(r.firstRateLimit).toBe('"5-in-10s";r=4;t=10');
    expect(r.health).toEqual([200, 200, 200]);
    expect(r.healthHasRateLimit).toBe(false);
    expect(r.uploads).toEqual([200, 200, 200, 200, 200, 200]);
    expect(r.uploadsServed).toBe(6);
    expect(r.maxInFlight).toBe(2);
  });

  it('piscina-batch: every request done, FIFO grants, the configured rate within wide bounds', async () => {
    const r = await runExample('piscina-batch');
    const rate = r.ratePerSecond as number;
    const burst = r.burst as number;
    expect(r.done).toBe(r.requests);
    expect(r.serviceRejected).toBe(0);
    expect(r.fifo).toBe(true);
    expect(r.overtakes).toBe(0);
    expect(r.orderedPairs as number).toBeGreaterThan(1000); // most pairs had an order to check
    expect(r.threadsUsed).toBeGreaterThan(1);
    // Durations, so wide bounds: never faster than the bucket allows, not far slower.
    expect(r.achievedPerSecond as number).toBeLessThanOrEqual(rate * 1.05);
    expect(r.achievedPerSecond as number).toBeGreaterThan(rate * 0.5);
    // The whole run cannot beat the bucket: requests − burst need (requests − burst) / rate s.
    const minSpanMs = (((r.requests as number) - burst) / rate) * 1000;
    expect(r.grantSpanMs as number).toBeGreaterThanOrEqual(minSpanMs / 1.05);
    expect(r.maxInAnySecond as number).toBeLessThanOrEqual(r.quotaPerSecond as number);
  });

  it('threads-per-user: each user gets exactly its limit across the main thread and 3 workers', async () => {
    const r = await runExample('threads-per-user');
    const limit = r.limit as number;
    const perUser = r.perUser as Record<
      string,
      { byThread: number[]; total: number; attempts: number; stats: { admitted: number } }
    >;
    expect(Object.keys(perUser)).toHaveLength(5);
    for (const u of Object.values(perUser)) {
      expect(u.byThread).toHaveLength(4);
      expect(u.total).toBe(limit);
      expect(u.stats.admitted).toBe(limit);
    }
    expect(r.exact).toBe(true);
  });
});
