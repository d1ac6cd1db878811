import { type ChildProcess, spawn } from 'node:child_process';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/index.js';
import { TokenBucket } from '../../src/redis/index.js';
import { cli, RedisServer } from '../helpers/redis.js';

// Real processes × real worker threads in fleet mode (they use dist: npm run build first).
// Each process: a TokenBucket of 100 with block 8 on a ManualClock at the same time, opened
// in two worker threads by attach().

const CHILD = new URL('../fixtures/redis/fleet-child.mjs', import.meta.url).pathname;

let server: RedisServer;
let redis: Redis;
const children = new Set<ChildProcess>();

function run(prefix: string, mode: string, attempts: number) {
  const proc = spawn(
    process.execPath,
    [CHILD, String(server.port), prefix, mode, String(attempts)],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  const first = new Promise<Record<string, number>>((resolve, reject) => {
    let buffer = '';
    proc.stdout!.on('data', (chunk) => {
      buffer += chunk;
      const i = buffer.indexOf('\n');
      if (i >= 0) resolve(JSON.parse(buffer.slice(0, i)));
    });
    proc.once('exit', (code) => reject(new Error(`child exited with ${code} before answering`)));
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
  return { proc, first, exited };
}

function checker(prefix: string): TokenBucket {
  return new TokenBucket({
    redis,
    capacity: 100,
    refillPerSecond: 1e-6,
    clock: new ManualClock(1_000_000),
    prefix,
  });
}

async function evalCalls(): Promise<number> {
  const info = await cli(server.port, 'INFO', 'commandstats');
  return Number(/cmdstat_evalsha:calls=(\d+)/.exec(info)?.[1] ?? 0);
}

beforeAll(async () => {
  server = await RedisServer.start();
  redis = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
});

afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  redis?.disconnect();
  await server?.close();
});

describe('fleet mode across processes and threads', () => {
  it('3 processes × 2 threads never admit more than the limit, and all of it once blocks are back', async () => {
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    const runs = [0, 1, 2].map(() => run('p1', 'hammer', 100));
    const results = await Promise.all(runs.map((r) => r.first));
    await Promise.all(runs.map((r) => r.exited));
    const admitted = results.reduce((a, r) => a + r.admitted!, 0);
    // 600 attempts on a bucket of 100 that does not refill.
    expect(admitted).toBeLessThanOrEqual(100);
    // Every block not spent went back on close(): what was not admitted is still there.
    const available = (await checker('p1').stats('hot')).available;
    expect(admitted + available).toBe(100);
    // At most processes × (block − 1) sat unspent while the others were refused.
    expect(admitted).toBeGreaterThanOrEqual(100 - 3 * 7);
    // Blocks, not decisions, went to Redis: single flight across the threads and calls.
    expect(await evalCalls()).toBeLessThanOrEqual(Math.ceil(100 / 8) + 3 * 4);
  }, 60_000);

  it('a process killed with SIGKILL loses at most its block', async () => {
    await cli(server.port, 'CONFIG', 'RESETSTAT');
    const r = run('p2', 'hold', 1);
    expect((await r.first).holding).toBe(2);
    r.proc.kill('SIGKILL');
    await r.exited;
    // Scripts Redis ran: EVALSHA calls but those that met NOSCRIPT (a call and a failed
    // call), and the EVAL that follows such a one.
    const info = await cli(server.port, 'INFO', 'commandstats');
    const ran = (cmd: string) => {
      const m = new RegExp(`cmdstat_${cmd}:calls=(\\d+),.*?failed_calls=(\\d+)`).exec(info);
      return Number(m?.[1] ?? 0) - Number(m?.[2] ?? 0);
    };
    const leases = ran('evalsha') + ran('eval');
    const available = (await checker('p2').stats('hot')).available;
    // Two threads took one permit each from one shared block of 8: one lease (single
    // flight). (Once, in CI, 91 were left: the counts say how, should it come back.)
    expect({ available, leases }, info).toEqual({ available: 100 - 8, leases: 1 });
  }, 60_000);
});
