import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from './helpers/redis.js';

// examples/redis-two-machines.mjs run as its users run it (`node examples/…`, importing
// 'atomic-limiter/redis' from dist/: npm run build first), against a redis-server started
// here; its last line is JSON.
const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('examples/redis-two-machines.mjs', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.close();
  });

  it('two processes share one limit of 20: exactly 20 admitted between them', async () => {
    const summary = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const child = spawn(process.execPath, ['examples/redis-two-machines.mjs'], {
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
    expect(summary.total).toBe(20);
    const admitted = summary.admitted as Record<string, number>;
    expect(admitted.A! + admitted.B!).toBe(20);
    // A refusal waits for the oldest of the 20 to leave the minute.
    expect(summary.retryAfterMs).toBeGreaterThan(50_000);
    expect(summary.retryAfterMs).toBeLessThanOrEqual(60_000);
  });
});
