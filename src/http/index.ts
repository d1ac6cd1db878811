/**
 * atomic-limiter/http: one middleware for every limiter of this package (in memory, cluster
 * client, Redis, chain) and every server style (Express 5, Connect, node:http, Fastify 5).
 */
export type { TrustProxy } from './address.js';
export { type AnyRequest, type ClientKeyOptions, clientKey } from './client-key.js';
export {
  type FastifyRateLimitOptions,
  type FastifyRateLimitPlugin,
  type FastifyReplyLike,
  type FastifyRequestLike,
  fastifyRateLimit,
  type RouteRateLimit,
} from './fastify.js';
export type { HeaderFormat } from './headers.js';
export { type NodeRequest, type RateLimitMiddleware, rateLimit } from './node.js';
export type { HttpLimiter, Message, RateLimitOptions } from './options.js';
