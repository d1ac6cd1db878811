import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';

const run = promisify(execFile);

/** Whether redis-server and redis-cli are on the PATH. */
const HAVE_REDIS =
  spawnSync('redis-server', ['--version']).status === 0 &&
  spawnSync('redis-cli', ['--version']).status === 0;

/**
 * The Redis tests run against real servers and never skip themselves: without the binaries
 * they fail, saying what to install (the README names it).
 */
function requireRedis(): void {
  if (!HAVE_REDIS) {
    throw new Error(
      'the Redis tests need redis-server and redis-cli on the PATH (Debian/Ubuntu: apt-get install redis-server)',
    );
  }
}

/** A free TCP port on loopback (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args]);
  return stdout.trim();
}

async function waitFor(check: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** One redis-server on a free loopback port, in a temporary directory. */
export class RedisServer {
  private child: ChildProcess | undefined;
  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly extra: readonly string[],
  ) {}

  static async start(extra: readonly string[] = []): Promise<RedisServer> {
    requireRedis();
    const dir = mkdtempSync(join(tmpdir(), 'al-redis-'));
    const server = new RedisServer(await freePort(), dir, extra);
    await server.up();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts the process (again, on the same port, after stop()). */
  async up(): Promise<void> {
    this.child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        this.dir,
        ...this.extra,
      ],
      { stdio: 'ignore' },
    );
    await waitFor(async () => (await cli(this.port, 'PING')) === 'PONG', `redis on ${this.port}`);
  }

  /** Kills the process (SIGKILL: as a crash) and waits until it is gone. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  }

  async close(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * A redis-server and an ioredis client of it for the tests of the enclosing file or describe
 * block: started before them (`use` receives both), stopped after them.
 */
export function withRedisServer(use: (server: RedisServer, redis: Redis) => void): void {
  let server: RedisServer | undefined;
  let redis: Redis | undefined;
  beforeAll(async () => {
    server = await RedisServer.start();
    redis = new Redis(server.port, '127.0.0.1', { autoResendUnfulfilledCommands: false });
    use(server, redis);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.close();
  });
}

/** A real three-master Redis Cluster on free loopback ports. */
export class RedisCluster {
  private constructor(readonly nodes: readonly RedisServer[]) {}

  static async start(): Promise<RedisCluster> {
    requireRedis();
    const nodes: RedisServer[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        // The config file lands in each server's own temporary --dir.
        nodes.push(
          await RedisServer.start([
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            'nodes.conf',
            '--cluster-node-timeout',
            '2000',
          ]),
        );
      }
      await run('redis-cli', [
        '--cluster',
        'create',
        ...nodes.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ]);
      for (const n of nodes) {
        await waitFor(
          async () => (await cli(n.port, 'CLUSTER', 'INFO')).includes('cluster_state:ok'),
          `cluster state ok on ${n.port}`,
        );
      }
    } catch (error) {
      for (const n of nodes) await n.close();
      throw error;
    }
    return new RedisCluster(nodes);
  }

  get ports(): number[] {
    return this.nodes.map((n) => n.port);
  }

  async close(): Promise<void> {
    for (const n of this.nodes) await n.close();
  }
}
