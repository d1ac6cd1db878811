import type { IncomingMessage, ServerResponse } from 'node:http';
import { show } from '../validate.js';
import { ANSWERED, Engine, GO, type Host, isLimiterError, type Outcome } from './core.js';
import { type RateLimitOptions, readOptions } from './options.js';

/** A node:http request as Express and Connect extend it (`req.ip` where the framework sets it). */
export type NodeRequest = IncomingMessage & { ip?: string };

/**
 * The middleware `rateLimit()` returns. Express 5 / Connect: `(req, res, next)`. Plain
 * node:http: `await limit(req, res)` resolves `true` when the request may go on; otherwise
 * the response has been answered (the refusal, or 503 when the limiter failed, 500 when an
 * option's function did) and it resolves `false`. It never rejects.
 */
export interface RateLimitMiddleware<Req extends IncomingMessage = NodeRequest> {
  (req: Req, res: ServerResponse, next: (error?: unknown) => void): void;
  (req: Req, res: ServerResponse): Promise<boolean>;
}

const nodeHost: Host<NodeRequest, ServerResponse> = {
  raw: (req) => req,
  rawRes: (res) => res,
  ip: (req) => req.ip,
  started: (res) => res.headersSent,
  setHeaderThrowsWhenStarted: true,
  setHeader: (res, name, value) => {
    res.setHeader(name, value);
  },
  getHeader: (res, name) => res.getHeader(name),
  send(res, statusCode, body) {
    const text = typeof body === 'string';
    const payload = text ? body : JSON.stringify(body);
    res.statusCode = statusCode;
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

  /** node:http: answers 503 (the limiter failed) or 500 (an option's function did). */
  function fail(res: ServerResponse, error: unknown): boolean {
    const status = isLimiterError(error) ? 503 : 500;
    const message = `${(error as Error)?.message ?? show(error)}`;
    // Without a framework there is no error handler to tell: a warning, once per message.
    if (warned.size < MAX_WARNINGS && !warned.has(message)) {
      warned.add(message);
      process.emitWarning(`${owner}: answered ${status}: ${message}`, {
        code: 'ATOMIC_LIMITER_HTTP_ERROR',
      });
    }
    if (!res.headersSent && !res.destroyed) {
      nodeHost.send(res, status, status === 503 ? 'Service Unavailable' : 'Internal Server Error');
    }
    return false;
  }

  function middleware(
    req: NodeRequest,
    res: ServerResponse,
    next?: (error?: unknown) => void,
  ): undefined | Promise<boolean> {
    let r: Outcome | Promise<Outcome>;
    if (typeof next === 'function') {
      try {
        r = engine.run(req, res);
      } catch (error) {
        next(error);
        return;
      }
      if (r === GO) next();
      else if (r !== ANSWERED) {
        r.then((o) => {
          if (o === GO) next();
        }, next);
      }
      return;
    }
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
