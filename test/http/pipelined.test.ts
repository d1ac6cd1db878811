import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { fastifyRateLimit, type RateLimitOptions, rateLimit } from '../../src/http/index.js';
import { Concurrency, ManualClock, TokenBucket } from '../../src/index.js';
import { listen, request, until, watchWarnings } from '../helpers/http.js';

watchWarnings();

// A response queued behind another on a pipelined connection has no socket until the one
// ahead finishes, and never emits 'close' if the connection dies first: permits held for it
// (a Concurrency limiter) and its place in the wait queue must still come back.

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

type Options = RateLimitOptions<IncomingMessage, ServerResponse>;
/** A request the handler received: its response stays open until the test ends it. */
interface Parked {
  req: IncomingMessage;
  res: ServerResponse;
}

/** A server of `framework` limited by `options`, whose handler parks every response. */
async function serve(
  framework: string,
  options: Options,
): Promise<{ port: number; parked: Parked[] }> {
  const parked: Parked[] = [];
  if (framework === 'fastify') {
    const app = Fastify();
    await app.register(fastifyRateLimit, options as never);
    app.get('/', (request, reply) => {
      parked.push({ req: request.raw, res: reply.raw });
      reply.hijack();
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    return { port: (app.server.address() as net.AddressInfo).port, parked };
  }
  let server: http.Server;
  if (framework === 'express') {
    const app = express();
    app.use(rateLimit(options));
    app.get('/', (req, res) => {
      parked.push({ req, res });
    });
    server = http.createServer(app);
  } else {
    const limit = rateLimit(options);
    server = http.createServer(async (req, res) => {
      if (await limit(req, res)) parked.push({ req, res });
    });
  }
  const { port, close } = await listen(server);
  closers.push(close);
  return { port, parked };
}

/** Sends `n` GETs in one write on one connection (HTTP/1.1 pipelining). */
async function pipelined(port: number, n: number): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(n));
  return socket;
}

describe.each(['node:http', 'express', 'fastify'])(
  '%s: a pipelined connection that dies',
  (framework) => {
    it('gives back the permits of every request on it, the queued ones too', async () => {
      const limiter = new Concurrency({ limit: 3 });
      const { port, parked } = await serve(framework, { limiter, key: () => 'all' });
      const socket = await pipelined(port, 2);
      await until(() => parked.length === 2, 'both requests in the handler');
      expect(limiter.stats('all').available).toBe(1);
      // The second response waits for the first: it has no socket of its own yet.
      expect(parked[1]!.res.socket).toBeNull();
      socket.destroy();
      await until(() => limiter.stats('all').available === 3, 'both permits back');
      // Once each: nothing more comes back later.
      await new Promise((r) => setImmediate(r));
      expect(limiter.stats('all').available).toBe(3);
    });

    it('with a dozen requests on it: one listener on the connection, and every permit back', async () => {
      const limiter = new Concurrency({ limit: 20 });
      const { port, parked } = await serve(framework, { limiter, key: () => 'all' });
      // No MaxListenersExceededWarning: watchWarnings() fails a test that emits any.
      const socket = await pipelined(port, 12);
      await until(() => parked.length === 12, 'the twelve requests in the handler');
      expect(limiter.stats('all').available).toBe(8);
      expect(parked[0]!.req.socket.listenerCount('close')).toBeLessThan(10);
      socket.destroy();
      await until(() => limiter.stats('all').available === 20, 'every permit back');
    });

    it('takes its waiting requests out of the queue; the next client is served in their place', async () => {
      const clock = new ManualClock();
      const limiter = new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 5, clock });
      const { port, parked } = await serve(framework, {
        limiter,
        key: () => 'k',
        wait: { timeoutMs: 60_000 },
      });
      const first = request(port); // takes the one permit; its response stays parked
      await until(() => parked.length === 1, 'the first request served');
      const socket = await pipelined(port, 2);
      await until(() => limiter.stats('k').queued === 2, 'both pipelined requests waiting');
      socket.destroy();
      await until(() => limiter.stats('k').queued === 0, 'both left the queue');
      const next = request(port);
      await until(() => limiter.stats('k').queued === 1, 'the next client waiting');
      clock.advance(1000);
      await until(() => parked.length === 2, 'the next client served');
      expect(limiter.stats('k').queued).toBe(0);
      for (const p of parked) p.res.end('ok');
      expect((await first).status).toBe(200);
      expect((await next).status).toBe(200);
    });
  },
);

describe.each(['node:http', 'express', 'fastify'])('%s: a keep-alive connection', (framework) => {
  it('serves many requests without piling up listeners on its socket', async () => {
    const limiter = new Concurrency({ limit: 1 });
    const { port, parked } = await serve(framework, { limiter, key: () => 'all' });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const listeners: number[] = [];
    // No MaxListenersExceededWarning: watchWarnings() fails a test that emits any.
    try {
      for (let i = 0; i < 15; i++) {
        const reply = new Promise<number>((resolve, reject) => {
          http
            .get({ host: '127.0.0.1', port, agent }, (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            })
            .on('error', reject);
        });
        await until(() => parked.length === i + 1, `request ${i} in the handler`);
        const { req, res } = parked[i]!;
        listeners.push(req.socket.listenerCount('close'));
        res.end('ok');
        expect(await reply).toBe(200);
        await until(() => limiter.stats('all').available === 1, `permit ${i} back`);
      }
    } finally {
      agent.destroy();
    }
    // One connection, the same count of 'close' listeners at every request.
    expect(new Set(parked.map((p) => p.req.socket)).size).toBe(1);
    expect(new Set(listeners).size).toBe(1);
  });
});
