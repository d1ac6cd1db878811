import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from './helpers/redis.js';

// examples/redis-fleet.mjs run as its users run it (importing 'atomic-limiter/redis' from
// dist/: npm run build first), against a redis-server started here; its last line is JSON.
const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('examples/redis-fleet.mjs', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });

  it('2 processes × 2 threads with block 16 share a limit of 100; nothing is lost', async () => {
    const summary = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const child = spawn(process.execPath, ['examples/redis-fleet.mjs'], {
        cwd: ROOT,
        env: { ...process.env, REDIS_URL: server.url },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (c) => (out += c));
      child.stderr.on('data', (c) => (err += c));
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.once('error', reject);
      child.once('close', (code) => {
        clearTimeout(timer);
        if (code !== 0) return reject(new Error(`exited ${code}:\n${out}\n${err}`));
        resolve(JSON.parse(out.trim().split('\n').pop() as string));
      });
    });
    const total = summary.total as number;
    expect(total).toBeLessThanOrEqual(100);
    // At most processes × (block − 1) sit unspent while the other machine is refused.
    expect(total).toBeGreaterThanOrEqual(100 - 2 * 15);
    // The unspent permits went back on close(): admitted + held = the limit.
    expect(total + (summary.available as number)).toBe(100);
  }, 40_000);
});
