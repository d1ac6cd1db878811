import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { type RateLimitOptions, rateLimit } from '../../src/http/index.js';
import {
  Concurrency,
  FixedWindow,
  LeakyBucket,
  ManualClock,
  SlidingWindow,
  TokenBucket,
} from '../../src/index.js';
import {
  listen,
  type Reply,
  rateFields,
  request,
  sequence,
  until,
  watchWarnings,
} from '../helpers/http.js';

const warnings = watchWarnings();

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

type Options = RateLimitOptions<IncomingMessage, ServerResponse>;

/** Plain node:http: `if (!(await limit(req, res))) return;`, then the handler. */
async function serve(
  options: Options,
  handler: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end('ok'),
) {
  const limit = rateLimit(options);
  const outcomes: boolean[] = [];
  const server = http.createServer(async (req, res) => {
    const go = await limit(req, res);
    outcomes.push(go);
    if (go) handler(req, res);
  });
  const { port, close } = await listen(server);
  closers.push(close);
  return { port, outcomes };
}

const xff = (address: string) => ({ headers: { 'x-forwarded-for': address } });

describe('rateLimit on plain node:http', () => {
  it('await limit(req, res): 5 × true and 200, then false with a 429 it has answered', async () => {
    const clock = new ManualClock();
    const { port, outcomes } = await serve({
      limiter: new SlidingWindow({ limit: 5, windowMs: 1000, clock }),
    });
    const replies = await sequence(port, 7);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);
    expect(outcomes).toEqual([true, true, true, true, true, false, false]);
    // The weighted estimate 5 × (1 − elapsed/1000) + 0 drops to 4 at 1 200 ms: 2 s, rounded up.
    expect(replies[5]!.headers['retry-after']).toBe('2');
    expect(replies[5]!.body).toBe('Too Many Requests');
  });

  it('Connect-style (req, res, next): next() to go on, next(err) on errors', async () => {
    const clock = new ManualClock();
    const limit = rateLimit({ limiter: new FixedWindow({ limit: 2, windowMs: 1000, clock }) });
    const broken = rateLimit({
      limiter: new FixedWindow({ limit: 2, windowMs: 1000, clock }),
      key: () => {
        throw new Error('bad key');
      },
    });
    const nexts: unknown[] = [];
    const server = http.createServer((req, res) => {
      const mw = req.url === '/broken' ? broken : limit;
      mw(req, res, (err?: unknown) => {
        nexts.push(err);
        res.statusCode = err ? 500 : 200;
        res.end(err ? 'error' : 'ok');
      });
    });
    const { port, close } = await listen(server);
    closers.push(close);
    const replies = await sequence(port, 3);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(nexts).toEqual([undefined, undefined]); // a refusal never calls next
    expect((await request(port, { path: '/broken' })).status).toBe(500);
    expect((nexts[2] as Error).message).toBe('bad key');
  });

  it('a failing limiter answers 503, a failing option function 500; the promise never rejects', async () => {
    const down = await serve({
      limiter: { limit: 1, consume: () => Promise.reject(new Error('redis down')) },
    });
    const r = await request(down.port);
    expect([r.status, r.body, r.headers['retry-after']]).toEqual([503, 'Service Unavailable', '1']);
    expect(down.outcomes).toEqual([false]);
    const bad = await serve({
      limiter: new FixedWindow({ limit: 1, windowMs: 1000 }),
      permits: () => 2,
    });
    const b = await request(bad.port);
    expect([b.status, b.body]).toEqual([500, 'Internal Server Error']);
    expect(bad.outcomes).toEqual([false]);
    expect(warnings.expected('ATOMIC_LIMITER_HTTP_ERROR').map((w) => w.message)).toEqual([
      'rateLimit: answered 503: redis down',
      `rateLimit: answered 500: rateLimit: option "permits" must return an integer from 1 to 1 (the limiter's limit), got 2`,
    ]);
  });

  it('trustProxy: X-Forwarded-For only from trusted proxies, parsed by proxy-addr', async () => {
    const clock = new ManualClock();
    const opts = (trustProxy?: Options['trustProxy']) => ({
      limiter: new FixedWindow({ limit: 1, windowMs: 1000, clock }),
      trustProxy,
    });
    // Not trusted: every "client" is the loopback peer, one bucket.
    const none = await serve(opts());
    expect((await request(none.port, xff('203.0.113.1'))).status).toBe(200);
    expect((await request(none.port, xff('203.0.113.2'))).status).toBe(429);
    // Trusted by hop count, by CIDR, and all: each forwarded address its own bucket.
    for (const trust of [1, '127.0.0.0/8', ['loopback'], true] as const) {
      const s = await serve(opts(trust as Options['trustProxy']));
      const a1 = await request(s.port, xff('203.0.113.1'));
      const b1 = await request(s.port, xff('203.0.113.2'));
      const a2 = await request(s.port, xff('203.0.113.1'));
      expect([a1.status, b1.status, a2.status], String(trust)).toEqual([200, 200, 429]);
    }
    // A socket peer outside the trusted range: its header is ignored.
    const other = await serve(opts('10.0.0.0/8'));
    expect((await request(other.port, xff('203.0.113.1'))).status).toBe(200);
    expect((await request(other.port, xff('203.0.113.9'))).status).toBe(429);
    // Hop count 1 believes only the last hop: a client-forged first entry does not help.
    const hop = await serve(opts(1));
    expect((await request(hop.port, xff('198.51.100.1, 203.0.113.5'))).status).toBe(200);
    expect((await request(hop.port, xff('198.51.100.2, 203.0.113.5'))).status).toBe(429);
    // Misconfigurations, reported once per middleware with a code and a docs anchor: the
    // header arriving untrusted (the first server), and trusting any client (`true`).
    expect(warnings.expected('ATOMIC_LIMITER_FORWARDED_IGNORED').map((w) => w.message)).toEqual([
      `rateLimit: a request came with X-Forwarded-For, but it is not trusted (option "trustProxy" is off): every client behind that proxy is counted under the proxy's address, as one (see docs/http.md#atomic_limiter_forwarded_ignored)`,
    ]);
    expect(warnings.expected('ATOMIC_LIMITER_PERMISSIVE_TRUST_PROXY')).toHaveLength(1);
  });

  it('IPv6 clients are grouped by ipv6Subnet; IPv4-mapped IPv6 counts as IPv4', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    const s56 = await serve({ limiter, trustProxy: true });
    await request(s56.port, xff('2001:db8:1:2300::1'));
    await request(s56.port, xff('2001:db8:1:23ff:aaaa::2'));
    await request(s56.port, xff('2001:db8:1:2400::1'));
    await request(s56.port, xff('::ffff:203.0.113.7'));
    await request(s56.port, xff('203.0.113.7'));
    expect(limiter.stats('2001:db8:1:2300::/56').admitted).toBe(2);
    expect(limiter.stats('2001:db8:1:2400::/56').admitted).toBe(1);
    expect(limiter.stats('203.0.113.7').admitted).toBe(2);

    const by64 = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    const s64 = await serve({ limiter: by64, trustProxy: true, ipv6Subnet: 64 });
    await request(s64.port, xff('2001:db8:1:2300::1'));
    await request(s64.port, xff('2001:db8:1:2300:ffff::1'));
    await request(s64.port, xff('2001:db8:1:23ff::2'));
    expect(by64.stats('2001:db8:1:2300::/64').admitted).toBe(2);
    expect(by64.stats('2001:db8:1:23ff::/64').admitted).toBe(1);

    const alone = new FixedWindow({ limit: 5, windowMs: 1000, clock });
    const sOff = await serve({ limiter: alone, trustProxy: true, ipv6Subnet: false });
    await request(sOff.port, xff('2001:0db8:0001:2300:0000:0000:0000:0001'));
    await request(sOff.port, xff('2001:db8:1:2300::2'));
    expect(alone.stats('2001:db8:1:2300::1').admitted).toBe(1);
    expect(alone.stats('2001:db8:1:2300::2').admitted).toBe(1);
    expect(warnings.expected('ATOMIC_LIMITER_PERMISSIVE_TRUST_PROXY')).toHaveLength(3);
  });

  it('no usable client address is an error for that request, never a shared bucket', async () => {
    const limiter = new FixedWindow({ limit: 100, windowMs: 1000 });
    const limit = rateLimit({ limiter });
    const errors: unknown[] = [];
    const server = http.createServer((req, res) => {
      // As a framework would report it, e.g. a misconfigured proxy header.
      (req as IncomingMessage & { ip?: string }).ip = 'not-an-address';
      limit(req, res, (err?: unknown) => {
        errors.push(err);
        res.statusCode = err ? 500 : 200;
        res.end();
      });
    });
    const { port, close } = await listen(server);
    closers.push(close);
    const replies = await sequence(port, 2);
    // Reported once as a warning; each request still takes the error path.
    expect(warnings.expected('ERR_NO_CLIENT_ADDRESS')).toHaveLength(1);
    expect(replies.map((r) => r.status)).toEqual([500, 500]);
    expect(errors).toHaveLength(2);
    expect((errors[0] as { code: string }).code).toBe('ERR_NO_CLIENT_ADDRESS');
    expect((errors[0] as Error).message).toMatch(/not an IP address: "not-an-address".*"key"/);
    expect(limiter.stats('not-an-address').admitted + limiter.stats().admitted).toBe(0);
  });

  it('wait: queued requests are served in arrival order at the limiter pace; a full queue gets 429', async () => {
    const clock = new ManualClock();
    // One request per second; at most 3 permits wait.
    const limiter = new LeakyBucket({ capacity: 3, ratePerSecond: 1, clock });
    const served: number[] = [];
    const { port } = await serve({ limiter, wait: true, key: () => 'k' }, (req, res) => {
      served.push(Number(req.headers['x-n']));
      res.end(req.headers['x-n']);
    });
    const n = (i: number) => ({ headers: { 'x-n': String(i) } });
    const done: Reply[] = [];
    const first = await request(port, n(0)); // the bucket is drained: at once
    expect(first.status).toBe(200);
    expect(first.headers.ratelimit).toBe('"3-in-3s";r=0;t=1');
    const pending: Promise<Reply>[] = [];
    for (let i = 1; i <= 3; i++) {
      pending.push(
        request(port, n(i)).then((r) => {
          done.push(r);
          return r;
        }),
      );
      await until(() => limiter.stats('k').queued === i, `request ${i} queued`);
    }
    const full = await request(port, n(4));
    expect(full.status).toBe(429);
    // Behind the three waiters, due at 1, 2 and 3 s: a retry is next at 4 s.
    expect(full.headers['retry-after']).toBe('4');
    for (let i = 1; i <= 3; i++) {
      expect(served).toEqual([0, ...Array.from({ length: i - 1 }, (_, j) => j + 1)]);
      clock.advance(1000);
      await until(() => done.length === i, `request ${i} served after ${i} s`);
    }
    expect(done.map((r) => [r.status, r.body])).toEqual([
      [200, '1'],
      [200, '2'],
      [200, '3'],
    ]);
    await Promise.all(pending);
    expect(served).toEqual([0, 1, 2, 3]);
  });

  it('wait: a client that disconnects leaves the queue; the one behind it is not skipped', async () => {
    const clock = new ManualClock();
    const limiter = new TokenBucket({ capacity: 1, refillPerSecond: 1, queueLimit: 5, clock });
    const served: string[] = [];
    const { port, outcomes } = await serve(
      { limiter, wait: { timeoutMs: 60_000 }, key: () => 'k' },
      (req, res) => {
        served.push(String(req.headers['x-n']));
        res.end();
      },
    );
    const n = (name: string, signal?: AbortSignal) => ({ headers: { 'x-n': name }, signal });
    await request(port, n('a'));
    const leaving = new AbortController();
    const b = request(port, n('b', leaving.signal)).catch((e: Error) => e.name);
    await until(() => limiter.stats('k').queued === 1, 'b queued');
    const c = request(port, n('c'));
    await until(() => limiter.stats('k').queued === 2, 'c queued');
    leaving.abort();
    expect(await b).toBe('AbortError');
    await until(() => limiter.stats('k').queued === 1, 'b left the queue');
    clock.advance(1000);
    expect((await c).status).toBe(200);
    expect(served).toEqual(['a', 'c']);
    expect(outcomes).toEqual([true, false, true]); // b: resolved false, nothing answered
  });

  it('wait: a request that times out gets no RateLimit fields and a Retry-After less the time it waited', async () => {
    // The clock never moves: a refusal says 2 s per permit, the queued one's included. The
    // wait times out in real time.
    const clock = new ManualClock();
    const limiter = new TokenBucket({ capacity: 1, refillPerSecond: 0.5, queueLimit: 1, clock });
    const { port, outcomes } = await serve({
      limiter,
      wait: { timeoutMs: 1200 },
      key: () => 'k',
    });
    expect((await request(port)).status).toBe(200);
    const waiting = request(port);
    await until(() => limiter.stats('k').queued === 1, 'the second request queued');
    // The queue is full: refused at once, with the figures of its refusal (next after the
    // waiter: in 4 s).
    const full = await request(port);
    expect(full.status).toBe(429);
    expect(rateFields(full.headers)).toEqual({
      'ratelimit-policy': '"1-in-2s";q=1;w=2',
      ratelimit: '"1-in-2s";r=0;t=2',
      'retry-after': '4',
    });
    // Refused after waiting 1.2 s of the 2 s its refusal said: 0.8 s, rounded up.
    const timedOut = await waiting;
    expect(timedOut.status).toBe(429);
    expect(timedOut.body).toBe('Too Many Requests');
    expect(rateFields(timedOut.headers)).toEqual({ 'retry-after': '1' });
    expect(outcomes).toEqual([true, false, false]);
  });

  it('wait: a waiter evicted by a newer one (newest-first) is refused as one that waited, without RateLimit fields', async () => {
    // The clock never moves: a refusal says 2 s per permit.
    const clock = new ManualClock();
    const limiter = new TokenBucket({
      capacity: 1,
      refillPerSecond: 0.5,
      queueLimit: 1,
      queueOrder: 'newest-first',
      clock,
    });
    const { port, outcomes } = await serve({ limiter, wait: true, key: () => 'k' });
    expect((await request(port)).status).toBe(200);
    const evicted = request(port);
    await until(() => limiter.stats('k').queued === 1, 'the second request queued');
    const newer = request(port);
    // The figures from before its wait are stale: Retry-After alone, less the time waited.
    const r = await evicted;
    expect(r.status).toBe(429);
    expect(rateFields(r.headers)).toEqual({ 'retry-after': '2' });
    expect(limiter.stats('k').queued).toBe(1); // the newer one waits in its place
    limiter.refund('k');
    expect((await newer).status).toBe(200);
    expect(outcomes).toEqual([true, false, true]);
  });

  it('wait with Concurrency: the lease is held for the response and released on close', async () => {
    const limiter = new Concurrency({ limit: 1, queueLimit: 4 });
    const gates: (() => void)[] = [];
    const { port } = await serve({ limiter, wait: true, key: () => 'c' }, (_req, res) => {
      gates.push(() => res.end('done'));
    });
    const replies = Array.from({ length: 3 }, () => request(port));
    for (let i = 1; i <= 3; i++) {
      await until(() => gates.length === 1, `request ${i} in the handler`);
      expect(limiter.stats('c').available).toBe(0);
      gates.shift()!();
    }
    expect((await Promise.all(replies)).map((r) => r.status)).toEqual([200, 200, 200]);
    await until(() => limiter.stats('c').available === 1, 'released');
    const last = request(port);
    await until(() => gates.length === 1, 'the last request in the handler');
    gates.shift()!();
    expect(rateFields((await last).headers)).toEqual({
      'ratelimit-policy': '"1-concurrent";q=1',
      ratelimit: '"1-concurrent";r=0',
    });
  });
});

describe('rateLimit edge cases on node:http', () => {
  it('a request it skips, or lets through without fields, leaves the response as it was', async () => {
    // Node writes `writeHead(status, [name, value, …])` differently once a response has a
    // field table: each pair goes through setHeader, and a repeated Set-Cookie keeps its
    // last value only. So nothing may make that table for a request that writes no field.
    const limiter = new FixedWindow({ limit: 100, windowMs: 1000, clock: new ManualClock() });
    const limits = [
      rateLimit({ limiter, skip: () => true }),
      rateLimit({ limiter, headers: false, key: () => 'k' }),
    ];
    const server = http.createServer(async (req, res) => {
      const limit = limits[Number(req.headers['x-which'])]!;
      if (!(await limit(req, res))) return;
      res.writeHead(200, ['Set-Cookie', 'a=1', 'Set-Cookie', 'b=2']);
      res.end('ok');
    });
    const { port, close } = await listen(server);
    closers.push(close);
    for (const which of ['0', '1']) {
      const r = await request(port, { headers: { 'x-which': which } });
      expect([r.status, r.headers['set-cookie']]).toEqual([200, ['a=1', 'b=2']]);
      expect(rateFields(r.headers)).toEqual({});
    }
    expect(limiter.stats('k').admitted).toBe(1);
  });

  it('mounted twice, counts a request once when a field table appears between the two', async () => {
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() });
    const limit = rateLimit({ limiter, key: () => 'k' });
    const quiet = rateLimit({ limiter, key: () => 'k', headers: false });
    for (const first of [quiet, limit]) {
      limiter.reset('k');
      const server = http.createServer(async (req, res) => {
        if (!(await first(req, res))) return;
        res.setHeader('X-Between', '1'); // the response's field table exists from here
        if (!(await first(req, res))) return;
        res.end('ok');
      });
      const { port, close } = await listen(server);
      await sequence(port, 2);
      await close();
      expect(limiter.stats('k').admitted).toBe(2);
    }
  });

  it('writes no field once the response has started; a refusal then takes the error path', async () => {
    const limit = rateLimit({
      limiter: new FixedWindow({ limit: 1, windowMs: 1000, clock: new ManualClock() }),
    });
    const nexts: unknown[] = [];
    const server = http.createServer((req, res) => {
      res.writeHead(200, { 'x-early': 'yes' });
      res.flushHeaders(); // an earlier middleware started the response
      limit(req, res, (err?: unknown) => {
        nexts.push(err);
        res.end(err ? 'error' : 'ok');
      });
    });
    const { port, close } = await listen(server);
    closers.push(close);
    const first = await request(port);
    expect([first.status, first.body, first.headers['x-early']]).toEqual([200, 'ok', 'yes']);
    expect(rateFields(first.headers)).toEqual({});
    const second = await request(port);
    expect([second.status, second.body]).toEqual([200, 'error']);
    expect(rateFields(second.headers)).toEqual({});
    expect(nexts[0]).toBeUndefined();
    expect((nexts[1] as { code: string }).code).toBe('ERR_HTTP_HEADERS_SENT');
  });

  it('await limit() on a response its handler started: a refusal closes it, never leaves it hanging', async () => {
    const limit = rateLimit({
      limiter: new FixedWindow({ limit: 1, windowMs: 1000, clock: new ManualClock() }),
      key: () => 'k',
    });
    const outcomes: boolean[] = [];
    const server = http.createServer(async (req, res) => {
      res.writeHead(200); // a streaming handler, started before it asked
      res.write('start ');
      const go = await limit(req, res);
      outcomes.push(go);
      if (go) res.end('done');
    });
    const { port, close } = await listen(server);
    closers.push(close);
    const first = await request(port);
    expect([first.status, first.body]).toEqual([200, 'start done']);
    // No 429 can be sent on a started response: the connection closes mid-body.
    const second = await request(port).then(
      (r) => r.body,
      (e: { code?: string }) => e.code,
    );
    expect(second).toBe('ECONNRESET');
    expect(outcomes).toEqual([true, false]);
    expect(warnings.expected('ATOMIC_LIMITER_HTTP_ERROR').map((w) => w.message)).toEqual([
      'rateLimit: closed a response already started: Cannot set headers after they are sent to the client',
    ]);
  });

  it('a Concurrency table held full refuses a new key with no Retry-After: no time frees a slot', async () => {
    const limiter = new Concurrency({ limit: 1, keys: 1, maxKeys: 1 });
    let held = 0;
    for (let i = 0; i < 10_000; i++) if (limiter.tryAcquire(`k${i}`)) held++;
    expect(held).toBe(32);
    const { port } = await serve({ limiter, key: () => 'new' });
    const refused = await request(port);
    expect(refused.status).toBe(429);
    expect(rateFields(refused.headers)).toEqual({
      'ratelimit-policy': '"1-concurrent";q=1',
      ratelimit: '"1-concurrent";r=0;t=0',
    });
  });

  it('a Concurrency request let through without a slot (whenFull: allow) gives nothing back when it ends', async () => {
    const limiter = new Concurrency({ limit: 1, keys: 64, maxKeys: 64, whenFull: 'allow' });
    const gates = new Map<string, () => void>();
    const { port } = await serve(
      { limiter, key: (req) => String(req.headers['x-k']) },
      (req, res) => {
        gates.set(String(req.headers['x-id']), () => res.end('ok'));
      },
    );
    // Nothing to give back, so no failed give-back either: watchWarnings() sees none.
    // Other clients hold permits until none of the slots key x could use is free.
    const others: string[] = [];
    for (let i = 0; limiter.consume('x').reason !== 'table-full'; i++) {
      limiter.release('x');
      if (i > 10_000) throw new Error('the table never filled');
      const other = `other${i}`;
      // Let through with no slot (its own stripes full), it holds nothing.
      const d = limiter.consume(other);
      if (d.allowed && d.reason === undefined) others.push(other);
    }
    const as = (id: string) => ({ headers: { 'x-k': 'x', 'x-id': id } });
    const x1 = request(port, as('x1')); // no slot: let through, holding nothing
    await until(() => gates.has('x1'), 'x1 in its handler');
    for (const other of others) limiter.release(other); // slots free again
    const x2 = request(port, as('x2')); // the key's only permit
    await until(() => gates.has('x2'), 'x2 in its handler');
    gates.get('x1')!();
    expect((await x1).status).toBe(200);
    // x1's end gave nothing back: x2 still holds the only permit.
    expect(limiter.stats('x').available).toBe(0);
    expect((await request(port, as('x3'))).status).toBe(429);
    gates.get('x2')!();
    expect((await x2).status).toBe(200);
    await until(() => limiter.stats('x').available === 1, 'x2 released');
  });

  it('an async Concurrency limiter: released after the response; a failed release is a warning', async () => {
    const inner = new Concurrency({ limit: 2 });
    let failNext = false;
    const remote = {
      limit: 2,
      algorithm: 'Concurrency',
      consume: async (key?: string | number, permits?: number) => inner.consume(key, permits),
      release: async (key?: string | number, permits?: number) => {
        if (failNext) {
          failNext = false;
          throw new Error('primary gone');
        }
        inner.release(key, permits);
      },
    };
    const { port } = await serve({ limiter: remote, key: () => 'r' });
    expect((await sequence(port, 3)).map((r) => r.status)).toEqual([200, 200, 200]);
    await until(() => inner.stats('r').available === 2, 'released after each response');
    failNext = true;
    expect((await request(port)).status).toBe(200);
    const failed = () => warnings.expected('ATOMIC_LIMITER_RELEASE_FAILED');
    await until(() => failed().length === 1, 'the failed release reported');
    expect(failed()[0]!.message).toMatch(/permits could not be given back: primary gone/);
    expect(failed()[0]!.detail).toMatch(/^Error: primary gone\n\s+at /);
  });

  it('a release that keeps failing is reported once per middleware, not once a request', async () => {
    const inner = new Concurrency({ limit: 2 });
    let releases = 0;
    const remote = {
      limit: 2,
      algorithm: 'Concurrency',
      consume: async (key?: string | number, permits?: number) => inner.consume(key, permits),
      release: async () => {
        releases++;
        throw new Error('primary gone');
      },
    };
    const { port } = await serve({ limiter: remote, key: () => 'r' });
    const other = await serve({ limiter: remote, key: () => 'r' });
    expect((await request(port)).status).toBe(200);
    await until(() => releases === 1, 'the first release tried');
    inner.release('r');
    expect((await request(port)).status).toBe(200);
    await until(() => releases === 2, 'the second release tried');
    inner.release('r');
    expect((await request(other.port)).status).toBe(200);
    await until(() => releases === 3, 'the third release tried');
    await new Promise((r) => setImmediate(r));
    const failed = warnings.expected('ATOMIC_LIMITER_RELEASE_FAILED');
    expect(failed.map((w) => w.message)).toEqual([
      'rateLimit: permits could not be given back: primary gone',
      'rateLimit: permits could not be given back: primary gone',
    ]);
  });
});
