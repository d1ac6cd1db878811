import http, { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { HeaderWriter, type LimiterFace } from '../../src/http/headers.js';
import { rateLimit } from '../../src/http/index.js';
import { headerTable, PRIVATE_FAST_PATH, tableSink } from '../../src/http/out-headers.js';
import { FixedWindow, ManualClock, TokenBucket, WarmingBucket } from '../../src/index.js';
import type { Decision } from '../../src/options.js';
import { listen, rateFields, request, sequence, watchWarnings } from '../helpers/http.js';

watchWarnings();

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

async function serve(app: express.Express) {
  const { port, close } = await listen(http.createServer(app));
  closers.push(close);
  return port;
}

const blank = () => new ServerResponse(new IncomingMessage(new Socket()));

describe.runIf(PRIVATE_FAST_PATH)("Node's header table, written directly", () => {
  it('is used on Node and Express responses, not where setHeader was wrapped', async () => {
    // The suite runs on the Node versions the package supports: there the probe must find
    // the table, or every other test here would exercise only the setHeader path.
    expect(headerTable(blank())).toBeDefined();
    const wrapped = blank();
    const original = wrapped.setHeader;
    wrapped.setHeader = function (this: ServerResponse, name, value) {
      return original.call(this, name, value);
    };
    expect(headerTable(wrapped)).toBeUndefined();

    const direct: boolean[] = [];
    const app = express();
    app.get('/', (_req, res) => {
      direct.push(headerTable(res) !== undefined);
      res.send('ok');
    });
    await request(await serve(app));
    expect(direct).toEqual([true]);
  });

  it("holds entries Node's own methods read, list, remove and send", async () => {
    const res = blank();
    const table = headerTable(res)!;
    tableSink.setHeader(table, { name: 'RateLimit', lower: 'ratelimit' }, '"a";r=1');
    expect(res.getHeader('ratelimit')).toBe('"a";r=1');
    expect(res.hasHeader('RateLimit')).toBe(true);
    expect(res.getHeaderNames()).toEqual(['ratelimit']);
    expect(tableSink.getHeader(table, { name: 'RateLimit', lower: 'ratelimit' })).toBe('"a";r=1');
    res.removeHeader('RateLimit');
    expect(tableSink.getHeader(table, { name: 'RateLimit', lower: 'ratelimit' })).toBeUndefined();
  });

  it("the middleware's fields are ordinary fields to the handler; its mark is not a field", async () => {
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() });
    const seen: unknown[] = [];
    const app = express();
    app.use(rateLimit({ limiter }));
    app.get('/', (_req, res) => {
      seen.push(res.getHeaderNames(), res.getHeader('RateLimit'), res.hasHeader('ratelimit'));
      seen.push(Object.keys(res.getHeaders()));
      res.removeHeader('RateLimit-Policy');
      res.send('ok');
    });
    const r = await request(await serve(app));
    expect(r.status).toBe(200);
    expect(seen).toEqual([
      ['x-powered-by', 'ratelimit-policy', 'ratelimit'],
      '"5-in-1s";r=4;t=1',
      true,
      ['x-powered-by', 'ratelimit-policy', 'ratelimit'],
    ]);
    expect(rateFields(r.headers)).toEqual({ ratelimit: '"5-in-1s";r=4;t=1' });
  });

  it('a wrapped setHeader gets every field, and a request is still counted once', async () => {
    const limiter = new FixedWindow({ limit: 2, windowMs: 1000, clock: new ManualClock() });
    const limit = rateLimit({ limiter, headers: ['draft-6', 'legacy'] });
    const names: string[][] = [];
    const app = express();
    app.use((_req, res, next) => {
      const mine: string[] = [];
      names.push(mine);
      const original = res.setHeader;
      res.setHeader = function (this: ServerResponse, name, value) {
        mine.push(name);
        return original.call(this, name, value);
      };
      next();
    });
    app.use(limit);
    app.use(limit); // the same middleware twice: one decision, one set of fields
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    const replies = await sequence(await serve(app), 3);
    expect(replies.map((r) => r.status)).toEqual([200, 200, 429]);
    expect(limiter.stats('127.0.0.1').admitted).toBe(2);
    const fields = [
      'RateLimit-Policy',
      'RateLimit-Limit',
      'RateLimit-Remaining',
      'RateLimit-Reset',
      'X-RateLimit-Limit',
      'X-RateLimit-Remaining',
      'X-RateLimit-Reset',
    ];
    expect(names[0]!.filter((n) => /ratelimit/i.test(n))).toEqual(fields);
    expect(names[2]!.filter((n) => /ratelimit|retry/i.test(n))).toEqual([...fields, 'Retry-After']);
    expect(replies[0]!.headers['ratelimit-remaining']).toBe('1');
    expect(replies[2]!.headers['retry-after']).toBe('1');
  });

  it('draft 8 appends its members to RateLimit fields the application set before it', async () => {
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() });
    const app = express();
    app.use((_req, res, next) => {
      res.setHeader('RateLimit-Policy', '"upstream";q=50;w=60');
      res.setHeader('RateLimit', '"upstream";r=7;t=30');
      next();
    });
    app.use(rateLimit({ limiter }));
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    const r = await request(await serve(app));
    expect(rateFields(r.headers)).toEqual({
      'ratelimit-policy': '"upstream";q=50;w=60, "5-in-1s";q=5;w=1',
      ratelimit: '"upstream";r=7;t=30, "5-in-1s";r=4;t=1',
    });
  });

  it('draft 8 keeps every member of a field set as several values, and replaces a draft-7 value', async () => {
    const limiter = new FixedWindow({ limit: 5, windowMs: 1000, clock: new ManualClock() });
    const app = express();
    app.use((_req, res, next) => {
      // Two earlier writers: res.append() keeps the values apart (an array).
      res.append('RateLimit', '"edge";r=3;t=10');
      res.append('RateLimit', '"cdn";r=9;t=20');
      // Draft 7's dictionary under the same name: no draft-8 list can extend it.
      res.setHeader('RateLimit-Policy', '50;w=60');
      next();
    });
    app.use(rateLimit({ limiter }));
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    const r = await request(await serve(app));
    expect(rateFields(r.headers)).toEqual({
      'ratelimit-policy': '"5-in-1s";q=5;w=1',
      ratelimit: '"edge";r=3;t=10, "cdn";r=9;t=20, "5-in-1s";r=4;t=1',
    });
  });
});

/** A sink that records fields by name, as a response would hold them. */
function recorder() {
  const fields = new Map<string, string>();
  return {
    fields,
    sink: {
      setHeader: (_: unknown, f: { name: string }, v: string) => void fields.set(f.name, v),
      getHeader: (_: unknown, f: { name: string }) => fields.get(f.name),
    },
  };
}

const decision = (remaining: number, resetAfterMs: number): Decision => ({
  allowed: true,
  remaining,
  limit: 5000,
  retryAfterMs: 0,
  resetAfterMs,
});

describe('state values remembered per (remaining, reset)', () => {
  it('every value is exact across thousands of pairs (slots of the table reused)', () => {
    const limiter: LimiterFace = { algorithm: 'FixedWindow', limit: 5000, windowMs: 60_000 };
    const eight = new HeaderWriter(limiter, ['draft-8'], undefined);
    const seven = new HeaderWriter(limiter, ['draft-7'], undefined);
    const a = recorder();
    const b = recorder();
    let checked = 0;
    for (let pass = 0; pass < 2; pass++) {
      for (let r = 0; r <= 1200; r += 3) {
        for (const ms of [1, 999, 1000, 1001, 59_000, Number.POSITIVE_INFINITY]) {
          eight.write(a.sink, null, decision(r, ms), undefined);
          seven.write(b.sink, null, decision(r, ms), undefined);
          const t = ms === Number.POSITIVE_INFINITY ? undefined : Math.ceil(ms / 1000);
          expect(a.fields.get('RateLimit')).toBe(
            `"5000-in-60s";r=${r}${t === undefined ? '' : `;t=${t}`}`,
          );
          expect(b.fields.get('RateLimit')).toBe(
            `limit=5000, remaining=${r}${t === undefined ? '' : `, reset=${t}`}`,
          );
          a.fields.clear(); // nothing to append to: one response per decision
          checked++;
        }
      }
    }
    expect(checked).toBe(2 * 401 * 6);
  });

  it('a policy learned later (a cluster client after its first answer) replaces the values', () => {
    const face: { algorithm?: string; limit: number; windowMs: number } = {
      limit: 10,
      windowMs: 2000,
    };
    const writer = new HeaderWriter(face, ['draft-8'], undefined);
    const { sink, fields } = recorder();
    writer.write(sink, null, decision(4, 1500), undefined);
    expect(fields.get('RateLimit')).toBe('"10";r=4;t=2');
    fields.clear();
    face.algorithm = 'FixedWindow';
    writer.write(sink, null, decision(4, 1500), undefined);
    expect(fields.get('RateLimit')).toBe('"10-in-2s";r=4;t=2');
    expect(fields.get('RateLimit-Policy')).toBe('"10-in-2s";q=10;w=2');
  });
});

describe('header values stay valid structured fields', () => {
  it('integers past 15 digits (a bucket of 10^9 refilled at 10^-6/s) are clamped to 999999999999999', async () => {
    const limiter = new TokenBucket({
      capacity: 1e9,
      refillPerSecond: 1e-6,
      clock: new ManualClock(),
    });
    const port = await serveNode(rateLimit({ limiter, key: () => 'k', permits: 1e9 }));
    const [a, b] = await sequence(port, 2);
    const max = '999999999999999';
    expect(rateFields(a!.headers)).toEqual({
      'ratelimit-policy': `"1000000000-in-1000000000000000s";q=1000000000;w=${max}`,
      ratelimit: `"1000000000-in-1000000000000000s";r=0;t=${max}`,
    });
    expect(b!.status).toBe(429);
    // 10^9 permits take 10^15 s to come back: past the longest wait a limiter computes.
    expect(b!.headers['retry-after']).toBeUndefined();
    const six = await serveNode(
      rateLimit({ limiter, key: () => 'k6', permits: 1e9, headers: 'draft-6' }),
    );
    expect(rateFields((await request(six)).headers)).toEqual({
      'ratelimit-policy': `1000000000;w=${max}`,
      'ratelimit-limit': '1000000000',
      'ratelimit-remaining': '0',
      'ratelimit-reset': max,
    });
  });

  it('sub-millisecond windows are named in microseconds or decimals, never "0ms"', async () => {
    const clock = new ManualClock();
    const names = [
      new TokenBucket({ capacity: 3, refillPerSecond: 10_000, clock }),
      new FixedWindow({ limit: 3, windowMs: 0.5, clock }),
      new TokenBucket({ capacity: 3, refillPerSecond: 7e6, clock }),
      new FixedWindow({ limit: 3, windowMs: 1500, clock }),
    ].map((limiter) => new HeaderWriter(limiter, ['draft-8'], undefined));
    const fields = names.map((w) => {
      const out: Record<string, string> = {};
      w.write(
        {
          setHeader: (o: Record<string, string>, f, v) => {
            o[f.lower] = v;
          },
          getHeader: (o: Record<string, string>, f) => o[f.lower],
        },
        out,
        { allowed: true, remaining: 2, limit: 3, retryAfterMs: 0, resetAfterMs: 0.3 },
        undefined,
      );
      return out['ratelimit-policy'];
    });
    expect(fields).toEqual([
      '"3-in-300us";q=3;w=1',
      '"3-in-500us";q=3;w=1',
      '"3-in-0.00042857142857142855ms";q=3;w=1',
      '"3-in-1500ms";q=3;w=2',
    ]);
  });
});

/** A node:http server limited by `limit`. */
async function serveNode(
  limit: (req: http.IncomingMessage, res: http.ServerResponse) => Promise<boolean>,
) {
  const server = http.createServer(async (req, res) => {
    if (await limit(req, res)) res.end('ok');
  });
  const { port, close } = await listen(server);
  closers.push(close);
  return port;
}

describe('the policy of each algorithm', () => {
  it('a WarmingBucket is a bucket: its limit in limit / ratePerSecond, with a window like the others', async () => {
    // Warm, it admits 10 a second; it stores at most 20 permits (its limit).
    const limiter = new WarmingBucket({ ratePerSecond: 10, warmupMs: 2000 });
    expect(limiter.limit).toBe(20);
    const port = await serveNode(rateLimit({ limiter, key: () => 'k' }));
    expect(rateFields((await request(port)).headers)['ratelimit-policy']).toBe(
      '"20-in-2s";q=20;w=2',
    );
  });
});

describe('a reconfigured limiter', () => {
  it('is described by its new quota from the next response on', async () => {
    const clock = new ManualClock();
    const limiter = new FixedWindow({ limit: 2, windowMs: 10_000, clock });
    const app = express();
    app.use(rateLimit({ limiter, headers: 'draft-8', key: () => 'k' }));
    app.get('/', (_req, res) => res.send('ok'));
    const port = await serve(app);
    const before = await request(port);
    expect(rateFields(before.headers)['ratelimit-policy']).toBe('"2-in-10s";q=2;w=10');
    limiter.reconfigure({ limit: 5 });
    const after = await request(port);
    expect(after.status).toBe(200);
    expect(rateFields(after.headers)).toMatchObject({
      'ratelimit-policy': '"5-in-10s";q=5;w=10',
      ratelimit: '"5-in-10s";r=3;t=10',
    });
  });
});
