import type { IncomingMessage } from 'node:http';
import { checkOptionsObject, show } from '../validate.js';
import {
  AddressKeys,
  clientAddress,
  compileTrustProxy,
  ipv6SubnetOption,
  type TrustFn,
  type TrustProxy,
} from './address.js';

/** Where the docs explain a diagnostic: one anchor per code. */
export function docsAnchor(code: string): string {
  return `docs/http.md#${code.toLowerCase()}`;
}

/** The error of a request with no usable client address (`code` ERR_NO_CLIENT_ADDRESS). */
export function noAddressError(owner: string, address: string | undefined): Error {
  const error = new Error(
    `${owner}: no client address for this request (${address === undefined ? 'the socket has none' : `not an IP address: ${show(address)}`}); give a "key" option (for example an API key, or the address your proxy or framework reports)`,
  );
  Object.defineProperty(error, 'code', { value: 'ERR_NO_CLIENT_ADDRESS', enumerable: true });
  return error;
}

/** Options of `clientKey()`: those of `rateLimit()` that decide the client's key. */
export interface ClientKeyOptions {
  /** node:http (and Connect): which proxies to believe about X-Forwarded-For. */
  trustProxy?: TrustProxy;
  /** Prefix length IPv6 clients are grouped by (default 56), 32…64, or false for none. */
  ipv6Subnet?: number | false;
}

interface Compiled {
  readonly addresses: AddressKeys;
  readonly trust: TrustFn | undefined;
}

const compiled = new WeakMap<object, Compiled>();
let defaults: Compiled | undefined;

function compile(options: ClientKeyOptions | undefined): Compiled {
  if (options === undefined) {
    defaults ??= { addresses: new AddressKeys(56), trust: undefined };
    return defaults;
  }
  let c = compiled.get(options);
  if (c === undefined) {
    const o = checkOptionsObject('clientKey', options, ['trustProxy', 'ipv6Subnet']);
    c = {
      addresses: new AddressKeys(ipv6SubnetOption('clientKey', o.ipv6Subnet)),
      trust: compileTrustProxy('clientKey', o.trustProxy),
    };
    compiled.set(options, c);
  }
  return c;
}

/** A request of node:http, Express or Connect (`req.ip` where the framework sets it), or Fastify. */
export type AnyRequest = IncomingMessage | { readonly raw: IncomingMessage; readonly ip?: string };

/**
 * The key the middleware counts a request under by default: the client address — the
 * framework's `req.ip` (its own trust-proxy setting decided it), or with `trustProxy` the
 * address X-Forwarded-For gives through trusted proxies, else the socket's — with
 * IPv4-mapped IPv6 as IPv4 and IPv6 grouped by its /`ipv6Subnet` network (56 by default).
 * For a key of your own that falls back to the client: `req.get('x-api-key') ??
 * clientKey(req)`. Throws an Error with code ERR_NO_CLIENT_ADDRESS when the request has no
 * usable address; a TypeError or RangeError for bad options.
 */
export function clientKey(req: AnyRequest, options?: ClientKeyOptions): string {
  const c = compile(options);
  const fastify = 'raw' in req && typeof req.raw === 'object' && req.raw !== null;
  const raw = fastify ? (req as { raw: IncomingMessage }).raw : (req as IncomingMessage);
  const address = clientAddress(raw, (req as { ip?: unknown }).ip, c.trust);
  const key = address === undefined ? undefined : c.addresses.keyOf(address);
  if (key === undefined) throw noAddressError('clientKey', address);
  return key;
}
