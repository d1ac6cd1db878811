import { execFile } from 'node:child_process';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

// The published types (dist/*.d.ts, from `npm run build`), type-checked by the real tsc in
// a project of their own, without skipLibCheck: what an application sees.

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '../..');
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A project with atomic-limiter's types installed, `deps` linked from ours, and `app.ts`. */
function project(deps: string[], app: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'atomic-limiter-types-'));
  made.push(dir);
  const pkg = join(dir, 'node_modules', 'atomic-limiter');
  mkdirSync(join(pkg, 'dist'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  for (const f of readdirSync(join(ROOT, 'dist'))) {
    if (f.endsWith('.d.ts') || f.endsWith('.d.cts'))
      cpSync(join(ROOT, 'dist', f), join(pkg, 'dist', f));
  }
  for (const d of deps) {
    mkdirSync(join(dir, 'node_modules', d, '..'), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules', d), join(dir, 'node_modules', d), 'dir');
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        noEmit: true,
        skipLibCheck: false,
        types: ['node'],
      },
      files: ['app.ts'],
    }),
  );
  writeFileSync(join(dir, 'app.ts'), app);
  return dir;
}

async function tsc(dir: string): Promise<string> {
  try {
    await run(process.execPath, [TSC, '-p', dir], { cwd: dir });
    return '';
  } catch (error) {
    return String((error as { stdout?: string }).stdout ?? error);
  }
}

describe('the types of atomic-limiter/http', () => {
  it('an Express app without fastify installed type-checks without skipLibCheck', async () => {
    const dir = project(
      [
        '@types/node',
        '@types/express',
        '@types/express-serve-static-core',
        '@types/body-parser',
        '@types/serve-static',
        '@types/send',
        '@types/qs',
        '@types/range-parser',
        '@types/http-errors',
        '@types/connect',
        '@types/mime',
      ].filter((d) => {
        try {
          readdirSync(join(ROOT, 'node_modules', d));
          return true;
        } catch {
          return false;
        }
      }),
      `import type { Request } from 'express';
import { FixedWindow } from 'atomic-limiter';
import { clientKey, rateLimit } from 'atomic-limiter/http';
export const limit = rateLimit<Request>({
  limiter: new FixedWindow({ limit: 5, windowMs: 1000 }),
  key: (req) => req.get('x-api-key') ?? clientKey(req),
  refundWhen: (_req, res) => res.statusCode < 400,
});
`,
    );
    expect(await tsc(dir)).toBe('');
  }, 60_000);

  it('a Fastify app types the options with its own FastifyRequest, beside @fastify/rate-limit', async () => {
    const dir = project(
      ['@types/node', 'fastify', '@fastify/rate-limit'],
      `import Fastify, { type FastifyRequest } from 'fastify';
import '@fastify/rate-limit';
import { FixedWindow } from 'atomic-limiter';
import { fastifyRateLimit } from 'atomic-limiter/http';
const app = Fastify();
await app.register(fastifyRateLimit, {
  limiter: new FixedWindow({ limit: 5, windowMs: 1000 }),
  key: (request: FastifyRequest) => request.ip,
  skip: (request) => request.is404,
  refundWhen: (_request, reply) => reply.statusCode < 400,
});
`,
    );
    expect(await tsc(dir)).toBe('');
  }, 60_000);
  it("types a route's config.rateLimit once the app opts in, and refuses an option of the wrong type", async () => {
    const app = (route: string) => `import Fastify from 'fastify';
import type {} from 'atomic-limiter/http/fastify-config';
import { FixedWindow } from 'atomic-limiter';
import { fastifyRateLimit } from 'atomic-limiter/http';
const app = Fastify();
await app.register(fastifyRateLimit, { limiter: new FixedWindow({ limit: 5, windowMs: 1000 }) });
app.get('/health', { config: { rateLimit: false } }, async () => 'ok');
${route}
`;
    const good = project(
      ['@types/node', 'fastify'],
      app(
        `app.post('/upload', { config: { rateLimit: { statusCode: 503, skip: (r) => r.is404 } } }, async () => 'ok');`,
      ),
    );
    expect(await tsc(good)).toBe('');
    const mistyped = project(
      ['@types/node', 'fastify'],
      app(
        `app.post('/upload', { config: { rateLimit: { statusCode: '503' } } }, async () => 'ok');`,
      ),
    );
    expect(await tsc(mistyped)).toMatch(/app\.ts\(\d+,\d+\): error TS2\d+/);
  }, 60_000);
});

describe('the types of atomic-limiter', () => {
  it("show each limiter's API, with no engine internals, and every entry type-checks alone", async () => {
    const dir = project(
      ['@types/node', '@opentelemetry/api'],
      `import {
  Concurrency, FixedWindow, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket, WarmingBucket,
  ManualClock, attach, chain, type Decision,
} from 'atomic-limiter';
import { connectCluster, serveCluster } from 'atomic-limiter/cluster';
import { hostMemory, removeHostMemory } from 'atomic-limiter/host';
import { observeLimiters } from 'atomic-limiter/metrics';
import * as redis from 'atomic-limiter/redis';

type Limiters =
  | Concurrency | FixedWindow | LeakyBucket | SlidingLog | SlidingWindow | TokenBucket | WarmingBucket;
// The user's methods are there …
type UserApi = 'tryAcquire' | 'consume' | 'acquire' | 'refund' | 'stats' | 'reset' | 'close' | 'handle';
const api: UserApi extends keyof Limiters ? true : false = true;
// … and the engine's hooks are not.
type Engine = 'isIdle' | 'initSlot' | 'rebuilding' | 'refundTaken' | 'giveLeaseBack' | 'tableFull';
const none: [Extract<Engine, keyof Limiters>] extends [never] ? true : false = true;
type RedisLimiters = redis.TokenBucket | redis.FixedWindow | redis.Concurrency | redis.WarmingBucket;
const redisApi: UserApi extends keyof RedisLimiters ? true : false = true;
type RedisEngine = 'runner' | 'adapter' | 'parse' | 'call' | 'fallback' | 'giveBack';
const redisNone: [Extract<RedisEngine, keyof RedisLimiters>] extends [never] ? true : false = true;

const clock = new ManualClock();
const bucket = new TokenBucket({ capacity: 2, refillPerSecond: 1, clock });
const d: Decision = chain(bucket, new Concurrency({ limit: 1 })).consume('k');
attach<TokenBucket>(bucket.handle).tryAcquire('k');
export { api, none, redisApi, redisNone, d, connectCluster, serveCluster, hostMemory, removeHostMemory, observeLimiters };
`,
    );
    expect(await tsc(dir)).toBe('');
  }, 60_000);
});
