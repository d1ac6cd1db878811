import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExample } from '../helpers/example.js';
import { RedisServer } from '../helpers/redis.js';

// examples/redis-two-machines.mjs run as its users run it (`node examples/…`, importing
// 'atomic-limiter/redis' from dist/: npm run build first), against a redis-server started
// here; its last line is JSON.

describe('examples/redis-two-machines.mjs', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });

  it('two processes share one limit of 20: exactly 20 admitted between them', async () => {
    const summary = await runExample('redis-two-machines.mjs', { REDIS_URL: server.url });
    expect(summary.total).toBe(20);
    const admitted = summary.admitted as Record<string, number>;
    expect(admitted.A! + admitted.B!).toBe(20);
    // A refusal waits for the oldest of the 20 to leave the minute.
    expect(summary.retryAfterMs).toBeGreaterThan(50_000);
    expect(summary.retryAfterMs).toBeLessThanOrEqual(60_000);
  });
});
