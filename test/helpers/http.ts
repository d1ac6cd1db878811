import http, { type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach } from 'vitest';

/** Listens on a free loopback port; `close()` ends every connection and the server. */
export async function listen(
  server: Server,
): Promise<{ port: number; close: () => Promise<void> }> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  /** Names and values as they came, one entry per field line. */
  rawHeaders: string[];
  body: string;
}

export interface RequestOptions {
  path?: string;
  method?: string;
  headers?: Record<string, string>;
  /** Aborting destroys the request (the client goes away). */
  signal?: AbortSignal;
}

/** One request on a fresh connection; resolves with status, headers and body. */
export function request(port: number, options: RequestOptions = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: options.path ?? '/',
        method: options.method ?? 'GET',
        headers: options.headers,
        agent: false,
        signal: options.signal,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (body += c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            rawHeaders: res.rawHeaders,
            body,
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** `n` requests one after the other. */
export async function sequence(port: number, n: number, options: RequestOptions = {}) {
  const out: Reply[] = [];
  for (let i = 0; i < n; i++) out.push(await request(port, options));
  return out;
}

/** Resolves once `check()` holds, checked on every turn of the event loop (no timers). */
export async function until(check: () => boolean, what: string, maxTurns = 200_000): Promise<void> {
  for (let i = 0; i < maxTurns; i++) {
    if (check()) return;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`never happened: ${what}`);
}

/** The rate-limit fields of a reply, for exact comparison. */
export function rateFields(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (/^(x-)?ratelimit|^retry-after$/.test(k) && typeof v === 'string') out[k] = v;
  }
  return out;
}

export interface Warning {
  message: string;
  code: string | undefined;
  detail: string | undefined;
}

/**
 * Captures the process warnings of each test of the file (none is printed), and fails a
 * test that emitted one it did not claim with `expected(code)`. `of(code)` lists a code's
 * warnings so far (for `until`).
 */
export function watchWarnings() {
  let seen: Warning[] = [];
  let claimed = new Set<string | undefined>();
  let original: typeof process.emitWarning | undefined;
  beforeEach(() => {
    seen = [];
    claimed = new Set();
    original = process.emitWarning;
    process.emitWarning = ((warning: string | Error, options?: unknown) => {
      const o = (typeof options === 'object' && options !== null ? options : {}) as {
        code?: string;
        detail?: string;
      };
      seen.push({
        message: typeof warning === 'string' ? warning : warning.message,
        code: o.code ?? (warning as { code?: string }).code,
        detail: o.detail,
      });
    }) as typeof process.emitWarning;
  });
  afterEach(() => {
    if (original !== undefined) process.emitWarning = original;
    const unclaimed = seen.filter((w) => !claimed.has(w.code));
    if (unclaimed.length > 0) {
      throw new Error(`unexpected process warnings: ${JSON.stringify(unclaimed)}`);
    }
  });
  return {
    /** Claims `code`'s warnings as this test's; returns them (so far). */
    expected(code: string): Warning[] {
      claimed.add(code);
      return seen.filter((w) => w.code === code);
    },
    of(code: string): Warning[] {
      return seen.filter((w) => w.code === code);
    },
  };
}
