import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
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

/**
 * A TCP proxy in front of a Redis port that can cut the network: refuse and drop every
 * connection (partition), let commands through but lose their replies with the connection
 * (cutReplyOf), swallow everything without answering (hang), or drop the connections of
 * the moment and let the client reconnect (cut).
 */
export class RedisProxy {
  private down = false;
  private hung = false;
  private cutAfter: string | undefined;
  private replace: { text: string; reply: Buffer } | undefined;
  private readonly sockets = new Set<Socket>();
  private readonly clients = new Set<Socket>();
  /** Client connections accepted so far. */
  connections = 0;

  private constructor(
    readonly port: number,
    private readonly server: Server,
  ) {}

  static async start(target: number): Promise<RedisProxy> {
    const port = await freePort();
    let self: RedisProxy | undefined;
    const server = createServer((client) => self!.accept(client, target));
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    self = new RedisProxy(port, server);
    return self;
  }

  private accept(client: Socket, target: number): void {
    this.connections++;
    this.sockets.add(client);
    client.on('error', () => {});
    client.on('close', () => this.sockets.delete(client));
    if (this.down) {
      client.destroy();
      return;
    }
    const upstream = connect(target, '127.0.0.1');
    this.sockets.add(upstream);
    upstream.on('error', () => {});
    upstream.on('close', () => this.sockets.delete(upstream));
    let cutting = false;
    let replacing: Buffer | undefined;
    this.clients.add(client);
    client.on('close', () => this.clients.delete(client));
    if (this.hung) client.pause();
    client.on('data', (d) => {
      // The command goes to Redis; its reply never comes back: the connection drops.
      if (this.cutAfter !== undefined && d.toString('latin1').includes(this.cutAfter)) {
        this.cutAfter = undefined;
        cutting = true;
      }
      if (this.replace && d.toString('latin1').includes(this.replace.text)) {
        replacing = this.replace.reply;
        this.replace = undefined;
      }
      upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (cutting) {
        client.destroy();
        upstream.destroy();
        return;
      }
      if (replacing) {
        client.write(replacing);
        replacing = undefined;
        return;
      }
      client.write(d);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  }

  /** Drops every connection and refuses new ones until heal(). */
  partition(): void {
    this.down = true;
    this.cut();
  }

  /** Connections stay up, but what clients send waits (unread) until heal(). */
  hang(): void {
    this.hung = true;
    for (const c of this.clients) c.pause();
  }

  heal(): void {
    this.down = false;
    this.hung = false;
    for (const c of this.clients) c.resume();
  }

  /** Drops the connections of the moment; new ones are accepted. */
  cut(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  /** The next command whose bytes hold `text` runs, and its reply is lost with its connection. */
  cutReplyOf(text: string): void {
    this.cutAfter = text;
  }

  /**
   * The next command whose bytes hold `text` runs, and the client gets `reply` (RESP) in
   * place of its reply: a reply that is not its own. For one command in flight alone (its
   * reply then comes in one read).
   */
  replaceReplyOf(text: string, reply: string): void {
    this.replace = { text, reply: Buffer.from(reply, 'latin1') };
  }

  close(): void {
    this.cut();
    this.server.close();
  }
}

/**
 * Holds back Node's printing of process warnings (its own 'warning' listener, and any other
 * but `keep`) until the returned function is called: for a test that expects a warning and
 * checks it through `keep`, so that a passing run prints nothing that looks like a failure.
 */
export function holdWarnings(keep: (w: Error) => void): () => void {
  const others = process.listeners('warning').filter((l) => l !== keep);
  for (const l of others) process.off('warning', l);
  return () => {
    for (const l of others) process.on('warning', l);
  };
}
