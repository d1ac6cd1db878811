import { type ChildProcess, spawn } from 'node:child_process';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Concurrency } from '../../src/redis/index.js';
import { RedisServer } from '../helpers/redis.js';

// Several processes — separate "machines" as far as the limit knows — on one Redis. They
// use the built package (npm run build first; npm test does).

const REDIS_DIST = new URL('../../dist/redis.js', import.meta.url).href;
const IOREDIS = new URL('../../node_modules/ioredis/built/index.js', import.meta.url).href;

// A child clock an hour ahead in every source of time it has: the decisions come from
// Redis TIME, so nothing may change.
const SKEW = `
const H = 3_600_000;
const dateNow = Date.now;
Date.now = () => dateNow() + H;
const perfNow = performance.now.bind(performance);
performance.now = () => perfNow() + H;
const hr = process.hrtime.bigint;
process.hrtime.bigint = () => hr() + BigInt(H) * 1_000_000n;
`;

function child(port: number, id: number, skew: boolean): string {
  return `${skew ? SKEW : ''}
const { Redis } = await import(${JSON.stringify(IOREDIS)});
const { SlidingLog, TokenBucket } = await import(${JSON.stringify(REDIS_DIST)});
const redis = new Redis(${port}, '127.0.0.1', { autoResendUnfulfilledCommands: false });
const gate = new Redis(${port}, '127.0.0.1', { autoResendUnfulfilledCommands: false });
const log = new SlidingLog({ redis, limit: 100, windowMs: 3_600_000, prefix: 'procs' });
const bucket = new TokenBucket({ redis, capacity: 50, refillPerSecond: 1e-6, prefix: 'procs' });
console.log('ready');
await gate.blpop('go-${id}', 0);
const a = await Promise.all(Array.from({ length: 60 }, () => log.tryAcquire('shared')));
const b = await Promise.all(Array.from({ length: 30 }, () => bucket.tryAcquire('shared')));
console.log(JSON.stringify({ log: a.filter(Boolean).length, bucket: b.filter(Boolean).length }));
redis.disconnect();
gate.disconnect();
`;
}

function start(script: string): {
  proc: ChildProcess;
  lines: string[];
  next: () => Promise<string>;
} {
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  let buffer = '';
  proc.stdout!.on('data', (chunk) => {
    buffer += chunk;
    let i = buffer.indexOf('\n');
    while (i >= 0) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 1);
      const w = waiting.shift();
      if (w) w(line);
      else lines.push(line);
      i = buffer.indexOf('\n');
    }
  });
  const next = () =>
    new Promise<string>((resolve, reject) => {
      const line = lines.shift();
      if (line !== undefined) return resolve(line);
      waiting.push(resolve);
      proc.once('exit', (code) => reject(new Error(`child exited (${code}) before a line`)));
    });
  return { proc, lines, next };
}

describe('processes sharing one Redis', () => {
  let server: RedisServer;
  let redis: Redis;
  const children: ChildProcess[] = [];
  beforeAll(async () => {
    server = await RedisServer.start();
    redis = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    redis?.disconnect();
    await server?.close();
  });

  it('four processes hammering one key admit exactly the limit, one of them an hour off', async () => {
    const kids = [0, 1, 2, 3].map((id) => start(child(server.port, id, id === 0)));
    children.push(...kids.map((k) => k.proc));
    for (const k of kids) expect(await k.next()).toBe('ready');
    // Let them go at once.
    await Promise.all([0, 1, 2, 3].map((id) => redis.rpush(`go-${id}`, '1')));
    const results = await Promise.all(kids.map(async (k) => JSON.parse(await k.next())));
    const log = results.reduce((n, r) => n + r.log, 0);
    const bucket = results.reduce((n, r) => n + r.bucket, 0);
    // 240 asked of a log of 100 per hour; 120 asked of a bucket of 50.
    expect(log).toBe(100);
    expect(bucket).toBe(50);
  });

  it('a process killed holding a Concurrency lease frees it at leaseMs', async () => {
    const holder = start(`
const { Redis } = await import(${JSON.stringify(IOREDIS)});
const { Concurrency } = await import(${JSON.stringify(REDIS_DIST)});
const redis = new Redis(${server.port}, '127.0.0.1', { autoResendUnfulfilledCommands: false });
const jobs = new Concurrency({ redis, limit: 1, leaseMs: 700, prefix: 'lease' });
await jobs.acquire('job');
console.log('held');
setInterval(() => {}, 1000);
`);
    children.push(holder.proc);
    expect(await holder.next()).toBe('held');
    holder.proc.kill('SIGKILL');
    const jobs = new Concurrency({ redis, limit: 1, leaseMs: 700, prefix: 'lease', queueLimit: 1 });
    const refused = await jobs.consume('job');
    expect(refused).toMatchObject({ allowed: false, retryAfterMs: Number.POSITIVE_INFINITY });
    // Nobody releases: only the lease's expiry can let this waiter in.
    const lease = await jobs.acquire('job', 1, { timeoutMs: 10_000 });
    expect((await jobs.stats('job')).available).toBe(0);
    await lease.release();
    expect((await jobs.stats('job')).available).toBe(1);
    await jobs.close();
  });

  it('a process whose acquire() waited exits by itself once its own client is closed', async () => {
    const kid = start(`
const { Redis } = await import(${JSON.stringify(IOREDIS)});
const { Concurrency } = await import(${JSON.stringify(REDIS_DIST)});
const redis = new Redis(${server.port}, '127.0.0.1', { autoResendUnfulfilledCommands: false });
const jobs = new Concurrency({ redis, limit: 1, queueLimit: 1, prefix: 'exit' });
const first = await jobs.acquire('job');
const second = jobs.acquire('job'); // waits: subscribes to releases
setTimeout(() => first.release(), 50);
await (await second).release();
redis.disconnect(); // no jobs.close(): the subscriber must not keep the process alive
console.log('done');
`);
    children.push(kid.proc);
    expect(await kid.next()).toBe('done');
    const code = await new Promise((resolve) => {
      if (kid.proc.exitCode !== null) resolve(kid.proc.exitCode);
      else kid.proc.once('exit', resolve);
    });
    expect(code).toBe(0);
  });
});
