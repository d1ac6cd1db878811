import type { IncomingMessage, ServerResponse } from 'node:http';
import { show } from '../validate.js';
import { ANSWERED, Engine, GO, type Host, isLimiterError, type Outcome, REVISIT } from './core.js';
import type { HeaderSink } from './headers.js';
import { type RateLimitOptions, readOptions } from './options.js';
import {
  existingHeaderTable,
  type HeaderTable,
  headerTable,
  headStarted,
  markIn,
  setMarkIn,
  tableSink,
} from './out-headers.js';

/** A node:http request as Express and Connect extend it (`req.ip` where the framework sets it). */
export type NodeRequest = IncomingMessage & { ip?: string };

/**
 * The middleware `rateLimit()` returns. Express 5 / Connect: `(req, res, next)`. Plain
 * node:http: `await limit(req, res)` resolves `true` when the request may go on; otherwise
 * the response has been answered (the refusal, or 503 when the limiter failed, 500 when an
 * option's function did) and it resolves `false`. It never rejects. Under Express and
 * Connect, a failed limiter is answered 503 as well (see `onError`); an option's function
 * that fails goes to `next(err)`.
 */
export interface RateLimitMiddleware<Req extends IncomingMessage = NodeRequest> {
  (req: Req, res: ServerResponse, next: (error?: unknown) => void): void;
  (req: Req, res: ServerResponse): Promise<boolean>;
}

/** Fields through `res.setHeader`, where Node's header table is not written directly. */
const responseSink: HeaderSink<ServerResponse> = {
  setHeader(res, field, value) {
    res.setHeader(field.name, value);
  },
  getHeader: (res, field) => res.getHeader(field.lower),
};

/**
 * Which middlewares have decided a request, where its response has no header table this
 * module may write (see out-headers.ts), or none yet (visit() makes none: a request it
 * skips must leave the response as it was): one engine, or a set of them when stacked. A
 * WeakMap rather than a property of the request: adding a property to an Express request
 * (whose prototype Express replaced) changes its hidden class, which is slow.
 */
const seen = new WeakMap<IncomingMessage, object>();

/** Adds `engine` to a mark; undefined when it was already there. */
function marked(was: object | undefined, engine: object): object | undefined {
  if (was === undefined) return engine;
  if (was === engine || (was instanceof Set && was.has(engine))) return undefined;
  return was instanceof Set ? was.add(engine) : new Set([was, engine]);
}

/** Express's application of a request, where Express serves it. */
function expressApp(req: NodeRequest): { get(name: string): unknown } | undefined {
  const app = (req as { app?: { get?: unknown } }).app;
  return typeof app?.get === 'function' ? (app as { get(name: string): unknown }) : undefined;
}

const nodeHost: Host<NodeRequest, ServerResponse> = {
  raw: (req) => req,
  rawRes: (res) => res,
  ip: (req) => req.ip,
  trustsAnyProxy: (req) => expressApp(req)?.get('trust proxy') === true,
  trustName: (req) =>
    expressApp(req) === undefined
      ? 'option "trustProxy" is off'
      : `Express's "trust proxy" setting`,
  visit(req, res, engine) {
    // Not made here: a skipped request must leave the response as it was.
    const table = existingHeaderTable(res);
    if (table !== undefined) {
      // A mark made before the table was (below) is in the WeakMap: a miss there is cheap
      // for a request that never went in.
      const was = markIn(table) ?? seen.get(req);
      const mark = marked(was, engine);
      if (mark === undefined) return REVISIT;
      if (was !== undefined) (engine as Engine<NodeRequest, ServerResponse>).addPeers(was);
      setMarkIn(table, mark);
      return table;
    }
    const was = seen.get(req);
    const mark = marked(was, engine);
    if (mark === undefined) return REVISIT;
    if (was !== undefined) (engine as Engine<NodeRequest, ServerResponse>).addPeers(was);
    seen.set(req, mark);
    return undefined;
  },
  writeFields(res, via, writer, d, retryAfter) {
    // Made now if there was none at the visit: writing fields makes it, as setHeader would.
    const table = (via as HeaderTable | undefined) ?? headerTable(res);
    if (table !== undefined) {
      if (headStarted(res)) return false;
      writer.write(tableSink, table, d, retryAfter);
      return true;
    }
    // setHeader refuses a started response by throwing before it changes anything: trying
    // first saves asking res.headersSent on every request (a getter that is dear on an Express response).
    try {
      writer.write(responseSink, res, d, retryAfter);
      return true;
    } catch (error) {
      if (res.headersSent) return false;
      throw error;
    }
  },
  answered: (res) => res.headersSent || res.writableEnded,
  send(res, statusCode, body, retryAfter) {
    const text = typeof body === 'string';
    const payload = text ? body : JSON.stringify(body);
    res.statusCode = statusCode;
    if (retryAfter !== undefined) res.setHeader('Retry-After', retryAfter);
    if (!text || !res.hasHeader('Content-Type')) {
      res.setHeader(
        'Content-Type',
        text ? 'text/plain; charset=utf-8' : 'application/json; charset=utf-8',
      );
    }
    res.setHeader('Content-Length', Buffer.byteLength(payload));
    res.end(payload);
  },
};

const TRUE = Promise.resolve(true);
const FALSE = Promise.resolve(false);
const MAX_WARNINGS = 20;

/**
 * Rate-limits HTTP requests with any limiter of this package: Express 5 and Connect
 * middleware, or `await limit(req, res)` on plain node:http.
 *
 * ```ts
 * app.use(rateLimit({ limiter: new TokenBucket({ capacity: 100, refillPerSecond: 10 }) }));
 * ```
 *
 * Every option is checked here: a bad one throws a TypeError or RangeError naming it.
 */
export function rateLimit<Req extends IncomingMessage = NodeRequest>(
  options: RateLimitOptions<Req, ServerResponse>,
): RateLimitMiddleware<Req> {
  const owner = 'rateLimit';
  const engine = new Engine<NodeRequest, ServerResponse>(
    nodeHost,
    readOptions<NodeRequest, ServerResponse>(owner, options),
    owner,
  );
  const warned = new Set<string>();

  /**
   * node:http: answers 500 (an option's function failed, or onError threw; 503 when it
   * rethrew the limiter's error); a response the handler had already started cannot
   * become either, so it is ended by closing its connection (as Express's final handler
   * does): never left hanging.
   */
  function fail(res: ServerResponse, error: unknown): boolean {
    const status = isLimiterError(error) ? 503 : 500;
    const message = `${(error as Error)?.message ?? show(error)}`;
    const started = res.headersSent;
    // Without a framework there is no error handler to tell: a warning, once per message.
    if (warned.size < MAX_WARNINGS && !warned.has(message)) {
      warned.add(message);
      const what = started ? 'closed a response already started' : `answered ${status}`;
      process.emitWarning(`${owner}: ${what}: ${message}`, { code: 'ATOMIC_LIMITER_HTTP_ERROR' });
    }
    if (res.destroyed || res.writableEnded) return false;
    if (started) {
      res.destroy();
      return false;
    }
    if (status === 503) nodeHost.send(res, 503, 'Service Unavailable', '1');
    else nodeHost.send(res, 500, 'Internal Server Error');
    return false;
  }

  function middleware(
    req: NodeRequest,
    res: ServerResponse,
    next?: (error?: unknown) => void,
  ): undefined | Promise<boolean> {
    if (typeof next === 'function') {
      engine.runThen(req, res, next);
      return;
    }
    let r: Outcome | Promise<Outcome>;
    try {
      r = engine.run(req, res);
    } catch (error) {
      return fail(res, error) ? TRUE : FALSE;
    }
    if (r === GO) return TRUE;
    if (r === ANSWERED) return FALSE;
    return r.then(
      (o) => o === GO,
      (error) => fail(res, error),
    );
  }
  return middleware as RateLimitMiddleware<Req>;
}
