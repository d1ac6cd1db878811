// Types only: fastify is an optional peer, never loaded by this module.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { show, typeError } from '../validate.js';
import { Engine, type Host } from './core.js';
import type { HeaderSink } from './headers.js';
import { type Config, OPTION_NAMES, type RateLimitOptions, readOptions } from './options.js';

/**
 * A Fastify request as the options' functions see it: the fields of Fastify's
 * `FastifyRequest` they commonly read, typed here so that this package's types never import
 * `fastify` (an app without it type-checks without skipLibCheck). The object is Fastify's
 * own request: annotate a function's parameter as `FastifyRequest` to see all of it.
 */
export interface FastifyRequestLike {
  /** Fastify's request id. */
  readonly id: unknown;
  /** Node's request underneath. */
  readonly raw: IncomingMessage;
  /** The client address (Fastify's `trustProxy` applied). */
  readonly ip: string;
  /** The request headers. */
  readonly headers: IncomingHttpHeaders;
  /** The request URL, query string included. */
  readonly url: string;
  /** The HTTP method. */
  readonly method: string;
  /** The Host, as Fastify reads it. */
  readonly hostname: string;
  /** The route parameters. */
  readonly params: unknown;
  /** The parsed query string. */
  readonly query: unknown;
  /** The parsed body (undefined in `onRequest`). */
  readonly body: unknown;
  /** True for the not-found handler's requests. */
  readonly is404: boolean;
}

/** A Fastify reply as the options' functions see it (see FastifyRequestLike). */
export interface FastifyReplyLike {
  /** Node's response underneath. */
  readonly raw: ServerResponse;
  /** The status code set so far. */
  readonly statusCode: number;
  /** True once the reply was sent. */
  readonly sent: boolean;
  /** A response header set so far. */
  getHeader(name: string): unknown;
}

/** Options of the Fastify plugin: those of `rateLimit()` but `trustProxy` (Fastify has its own). */
export type FastifyRateLimitOptions = Omit<
  RateLimitOptions<FastifyRequestLike, FastifyReplyLike>,
  'trustProxy'
>;

/**
 * The plugin's type: a Fastify plugin callback (`app.register(fastifyRateLimit, options)`),
 * written without Fastify's types (see FastifyRequestLike).
 */
export type FastifyRateLimitPlugin = (
  app: unknown,
  options: FastifyRateLimitOptions,
  done: (error?: Error) => void,
) => void;

/** A route's `config.rateLimit`: false to skip it, or options merged over the plugin's. */
export type RouteRateLimit = false | Partial<FastifyRateLimitOptions>;

type RouteConfig = Record<PropertyKey, unknown>;

const replySink: HeaderSink<FastifyReply> = {
  setHeader(reply, field, value) {
    reply.header(field.lower, value);
  },
  getHeader: (reply, field) => reply.getHeader(field.lower),
};

const fastifyHost: Host<FastifyRequest, FastifyReply> = {
  raw: (request) => request.raw,
  rawRes: (reply) => reply.raw,
  ip: (request) => request.ip,
  trustsAnyProxy: (request) =>
    (request.server as { initialConfig?: { trustProxy?: unknown } } | undefined)?.initialConfig
      ?.trustProxy === true,
  trustName: () => `Fastify's "trustProxy" option`,
  // One plugin adds one hook to a route, and Fastify runs a route's onRequest hooks once
  // per request: an engine cannot see a request twice, so nothing needs marking. (Two
  // plugins stacked are two engines, and each counts: two limiters.)
  visit: () => undefined,
  writeFields(reply, _via, writer, d, retryAfter) {
    if (reply.sent || reply.raw.headersSent) return false;
    writer.write(replySink, reply, d, retryAfter);
    return true;
  },
  answered: (reply) => reply.sent || reply.raw.headersSent,
  send(reply, statusCode, body, retryAfter) {
    if (retryAfter !== undefined) reply.header('retry-after', retryAfter);
    reply.code(statusCode).send(body);
  },
};

const KNOWN = OPTION_NAMES.filter((n) => n !== 'trustProxy');
// What Fastify itself may leave in a plugin's options object.
const FASTIFY_KEYS = new Set(['prefix', 'logLevel', 'logSerializers']);

function ownOptions(owner: string, options: unknown): Record<string, unknown> {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw typeError(`${owner}: options must be an object, got ${show(options)}`);
  }
  if ('trustProxy' in options) {
    throw typeError(
      `${owner}: option "trustProxy" is Fastify's own: pass it to fastify({ trustProxy }), and request.ip follows it`,
    );
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(options)) if (!FASTIFY_KEYS.has(k)) out[k] = v;
  return out;
}

function hookFor(engine: Engine<FastifyRequest, FastifyReply>) {
  return function atomicLimiterOnRequest(
    request: FastifyRequest,
    reply: FastifyReply,
    done: (error?: Error) => void,
  ): void {
    // A reply sent from the hook is not followed by `done` (Fastify's rule): runThen()
    // calls it only when the request goes on or failed.
    engine.runThen(request, reply, done);
  };
}

/**
 * The limiters each route has a hook for, by the route's options object: every plugin's
 * onRoute hook is given the same object for a route (a GET route's HEAD twin is another).
 * Two plugins stacked each merge a route's `config.rateLimit` over their own options; with
 * a `limiter` of the route's own, both would count every request against it: twice.
 */
const installed = new WeakMap<RouteOptions, Map<unknown, Engine<FastifyRequest, FastifyReply>>>();

function addOnRequest(
  route: RouteOptions,
  limiter: unknown,
  hook: ReturnType<typeof hookFor>,
  engine: Engine<FastifyRequest, FastifyReply>,
): void {
  const limiters = installed.get(route);
  // Another plugin counts this route's requests with the same limiter: if under the same
  // key too, each request counts twice (reported when seen: see Engine.addPeers).
  const other = limiters?.get(limiter);
  if (other !== undefined) engine.addPeers(other);
  if (limiters === undefined) installed.set(route, new Map([[limiter, engine]]));
  else limiters.set(limiter, engine);
  const existing = route.onRequest as unknown;
  if (Array.isArray(existing)) route.onRequest = [...existing, hook] as RouteOptions['onRequest'];
  else if (typeof existing === 'function') {
    route.onRequest = [existing, hook] as RouteOptions['onRequest'];
  } else route.onRequest = hook as RouteOptions['onRequest'];
}

/**
 * The Fastify 5 plugin: every route registered after it (in this app and its child
 * contexts) is rate-limited by an `onRequest` hook. A route's `config: { rateLimit }` is
 * `false` to leave it out, or options merged over the plugin's (a `limiter` of its own for a
 * separate budget). Options are checked when the plugin and each route are registered.
 *
 * ```ts
 * await app.register(fastifyRateLimit, { limiter });
 * ```
 */
const plugin = (
  app: FastifyInstance,
  options: FastifyRateLimitOptions,
  done: (error?: Error) => void,
) => {
  const owner = 'fastifyRateLimit';
  let base: Record<string, unknown>;
  let config: Config<FastifyRequest, FastifyReply>;
  try {
    base = ownOptions(owner, options);
    config = readOptions<FastifyRequest, FastifyReply>(owner, base, KNOWN);
  } catch (error) {
    done(error as Error);
    return;
  }
  const sharedEngine = new Engine(fastifyHost, config, owner);
  const shared = hookFor(sharedEngine);
  /**
   * The hook of a route from its `config.rateLimit` (undefined: none). `where` names the
   * route in errors; `taken`: the limiters already counting the route's requests (a route's
   * own limiter, installed by another stacked plugin, is not installed again).
   */
  const hookOf = (own: unknown, where: string, taken: { has(l: unknown): boolean } | undefined) => {
    if (own === false) return undefined;
    if (own === undefined || own === true) {
      return { limiter: config.limiterOption, hook: shared, engine: sharedEngine };
    }
    const merged = { ...base, ...ownOptions(`${where}: config.rateLimit`, own) };
    const c = readOptions(where, merged, KNOWN);
    // The route names a limiter of its own, merged over each stacked plugin's options:
    // the first plugin installs it, the others would count each request again. (Without
    // one, each plugin limits the route with its own limiter, as on other routes.)
    if ('limiter' in (own as object) && taken?.has(c.limiterOption)) return undefined;
    const engine = new Engine(fastifyHost, c, where);
    return { limiter: c.limiterOption, hook: hookFor(engine), engine };
  };
  // This plugin's mark on the routes it saw added (in their config, which Fastify copies
  // into the route's context with its own symbols).
  const seen = Symbol('atomic-limiter/http: a route fastifyRateLimit saw');
  app.addHook('onRoute', (route) => {
    const routeConfig = (route.config ??= {}) as RouteConfig;
    routeConfig[seen] = true;
    const where = `${owner} (route ${show(route.method)} ${route.url})`;
    const h = hookOf(routeConfig.rateLimit, where, installed.get(route));
    if (h === undefined) return;
    addOnRequest(route, h.limiter, h.hook, h.engine);
    // For the routes other plugins meet late (below): the limiters counting this one.
    // A set of this route's own: a config object may serve several routes, and Fastify
    // copies it (shallowly) into each route's context as the route is added.
    const counting = new Set(routeConfig[COUNTING] as Set<unknown> | undefined);
    counting.add(h.limiter);
    routeConfig[COUNTING] = counting;
  });
  // Requests no route of the plugin's saw: those of the not-found handler (Fastify's own
  // or setNotFoundHandler's; no onRoute for them), limited like any other request; and
  // routes added before this plugin loaded (declared first, or right after an
  // `app.register()` that was not awaited), which never reach onRoute. One app-level hook
  // serves both; it costs every request a hook call.
  const before = app.printRoutes({ commonPrefix: false }).trim();
  // Fastify prints an empty router as "(empty tree)"; were that to change, the late-routes
  // part would be on, to no harm.
  const late = before !== '' && before !== '(empty tree)';
  addAppHook(app, owner, seen, hookOf, shared, late);
  done();
};

/** The app-level hook of a plugin: the not-found handler, and routes added before it. */
function addAppHook(
  app: FastifyInstance,
  owner: string,
  seen: symbol,
  hookOf: (
    own: unknown,
    where: string,
    taken: { has(l: unknown): boolean } | undefined,
  ) => { limiter: unknown; hook: ReturnType<typeof hookFor> } | undefined,
  shared: ReturnType<typeof hookFor>,
  lateRoutes: boolean,
): void {
  const late = new WeakMap<RouteConfig, ReturnType<typeof hookFor> | Error | null>();
  app.addHook('onRequest', function atomicLimiterAppHook(request, reply, next) {
    if (request.is404) {
      shared(request, reply, next);
      return;
    }
    if (!lateRoutes) {
      next();
      return;
    }
    const routeConfig = request.routeOptions.config as unknown as RouteConfig;
    if (routeConfig[seen] === true) {
      next();
      return;
    }
    let h = late.get(routeConfig);
    if (h === undefined) {
      const where = `${owner} (route ${show(request.routeOptions.method)} ${show(request.routeOptions.url)}, added before the plugin)`;
      try {
        const counting = (routeConfig[COUNTING] ??= new Set()) as Set<unknown>;
        const found = hookOf(routeConfig.rateLimit, where, counting);
        if (found !== undefined) counting.add(found.limiter);
        h = found?.hook ?? null;
      } catch (error) {
        h = error as Error;
      }
      late.set(routeConfig, h);
    }
    if (h === null) next();
    else if (h instanceof Error) next(h);
    else h(request, reply, next);
  });
}

/** In a route's config: the limiters counting its requests (for routes met late). */
const COUNTING = Symbol('atomic-limiter/http: limiters counting this route');

/**
 * The Fastify 5 plugin (see plugin above): every route registered after it is limited.
 *
 * ```ts
 * await app.register(fastifyRateLimit, { limiter });
 * ```
 */
export const fastifyRateLimit = plugin as unknown as FastifyRateLimitPlugin;

// Applies to the whole app rather than its own encapsulated context: what the
// fastify-plugin package does, without depending on it.
Object.assign(fastifyRateLimit, {
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'atomic-limiter',
});
