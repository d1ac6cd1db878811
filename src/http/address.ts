import type { IncomingMessage } from 'node:http';
import { isIPv4 } from 'node:net';
import ipaddr from 'ipaddr.js';
import proxyaddr from 'proxy-addr';
import { rangeError, show, typeError } from '../validate.js';

/**
 * The client address a request is counted under. Parsing is left to ipaddr.js (IPv4-mapped
 * IPv6 as IPv4, subnets) and X-Forwarded-For to proxy-addr: address strings are never
 * split by hand.
 */

/** Which proxies to believe about X-Forwarded-For (plain node:http). */
export type TrustProxy = boolean | number | string | readonly string[];

/** proxy-addr's trust function: whether the hop `i` away (0 = the socket peer) is trusted. */
export type TrustFn = (address: string, hop: number) => boolean;

export function compileTrustProxy(owner: string, value: unknown): TrustFn | undefined {
  if (value === undefined || value === false) return undefined;
  if (value === true) return () => true;
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 0 || value > 1000) {
      throw rangeError(
        `${owner}: option "trustProxy" as a hop count must be an integer from 0 to 1000, got ${show(value)}`,
      );
    }
    return (_address, hop) => hop < value;
  }
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.some((a) => typeof a !== 'string')) {
    throw typeError(
      `${owner}: option "trustProxy" must be true, false, a hop count, or addresses/CIDRs (a string or an array of strings), got ${show(value)}`,
    );
  }
  try {
    return proxyaddr.compile(list as string[]);
  } catch (error) {
    throw typeError(
      `${owner}: option "trustProxy": ${(error as Error).message} (in ${JSON.stringify(list)})`,
    );
  }
}

/** The IPv6 prefix a client is counted under: 32…64 bits, or false (each address alone). */
export function ipv6SubnetOption(owner: string, value: unknown): number | false {
  if (value === undefined) return 56;
  if (value === false) return false;
  if (typeof value !== 'number') {
    throw typeError(
      `${owner}: option "ipv6Subnet" must be an integer from 32 to 64 or false, got ${show(value)}`,
    );
  }
  if (!Number.isInteger(value) || value < 32 || value > 64) {
    throw rangeError(
      `${owner}: option "ipv6Subnet" must be an integer from 32 to 64 or false, got ${show(value)}`,
    );
  }
  return value;
}

const MEMO_SIZE = 4096;

/**
 * Turns an address into the key it is counted under: IPv4 as is, IPv4-mapped IPv6 as its
 * IPv4 address, other IPv6 addresses as their /`ipv6Subnet` network ("2001:db8:1:2300::/56")
 * since one subscriber usually holds a whole /56 or /64. Returns undefined for a string
 * that is not an IP address. IPv6 parsing costs a few µs, so results are remembered (a
 * small table, emptied when full: a flood of distinct addresses costs no more than parsing).
 */
export class AddressKeys {
  private readonly memo = new Map<string, string | undefined>();

  constructor(private readonly ipv6Subnet: number | false) {}

  keyOf(address: string): string | undefined {
    // Node and the frameworks give IPv4 peers in canonical dotted form: the common case.
    if (isIPv4(address)) return address;
    const memo = this.memo;
    let key = memo.get(address);
    if (key !== undefined || memo.has(address)) return key;
    key = this.parse(address);
    if (memo.size >= MEMO_SIZE) memo.clear();
    memo.set(address, key);
    return key;
  }

  private parse(address: string): string | undefined {
    if (!ipaddr.isValid(address)) return undefined;
    const ip = ipaddr.process(address); // IPv4-mapped IPv6 → IPv4
    if (ip.kind() === 'ipv4') return ip.toString();
    const v6 = ip as ipaddr.IPv6;
    const prefix = this.ipv6Subnet;
    if (prefix === false) return new ipaddr.IPv6(v6.parts).toString(); // zone id dropped
    const parts = v6.parts.slice();
    for (let i = 0; i < 8; i++) {
      const keep = Math.min(16, Math.max(0, prefix - i * 16));
      parts[i] = keep === 0 ? 0 : parts[i]! & (0xffff << (16 - keep)) & 0xffff;
    }
    return `${new ipaddr.IPv6(parts).toString()}/${prefix}`;
  }
}

/**
 * The address a request comes from: the framework's own `req.ip` (its trust-proxy setting
 * decided it), else, with `trust`, proxy-addr over X-Forwarded-For, else the socket peer.
 */
export function clientAddress(
  req: IncomingMessage,
  frameworkIp: unknown,
  trust: TrustFn | undefined,
): string | undefined {
  if (trust !== undefined) {
    // proxy-addr reads the socket and the header; a closed socket has no address.
    return req.socket?.remoteAddress === undefined ? undefined : proxyaddr(req, trust);
  }
  if (typeof frameworkIp === 'string' && frameworkIp !== '') return frameworkIp;
  return req.socket?.remoteAddress;
}
