/**
 * Opt-in types for Fastify apps: `import type {} from 'atomic-limiter/http/fastify-config'`,
 * once anywhere in the program, types a route's `config.rateLimit` as RouteRateLimit, so a
 * value of the wrong type is a compile error.
 *
 * It is a separate entry because @fastify/rate-limit declares the same property with its own
 * type, and TypeScript refuses two declarations of one property that differ: a program that
 * loads @fastify/rate-limit's types leaves this one out and writes
 * `config: { rateLimit: { … } satisfies RouteRateLimit }` instead (it also catches unknown
 * keys, which Fastify's inference of a route's config type lets through).
 */
import type { RouteRateLimit } from './fastify.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** atomic-limiter's plugin: false to skip this route, or options merged over the plugin's. */
    rateLimit?: RouteRateLimit;
  }
}
