import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExample } from '../helpers/example.js';
import { RedisServer } from '../helpers/redis.js';

// examples/redis-fleet.mjs run as its users run it (importing 'atomic-limiter/redis' from
// dist/: npm run build first), against a redis-server started here; its last line is JSON.

describe('examples/redis-fleet.mjs', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });

  it('2 processes × 2 threads with block 16 share a limit of 100; nothing is lost', async () => {
    const summary = await runExample('redis-fleet.mjs', { REDIS_URL: server.url });
    const total = summary.total as number;
    expect(total).toBeLessThanOrEqual(100);
    // At most processes × (block − 1) sit unspent while the other machine is refused.
    expect(total).toBeGreaterThanOrEqual(100 - 2 * 15);
    // The unspent permits went back on close(): admitted + held = the limit.
    expect(total + (summary.available as number)).toBe(100);
  }, 40_000);
});
