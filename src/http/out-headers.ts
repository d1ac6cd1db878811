import { IncomingMessage, OutgoingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import type { HeaderSink } from './headers.js';

/**
 * Node's table of a response's header fields, written directly. `setHeader` checks each
 * field's name and value with a regular expression apiece before storing
 * `table[lower] = [name, value]`: most of this middleware's own cost on Express would go
 * to those checks. The fields written here
 * are valid by construction (constant names; values of digits, ASCII punctuation and policy
 * names checked to be printable ASCII when the middleware was made), so they go straight
 * into that table: the entry setHeader would have made, which getHeader, hasHeader,
 * getHeaders, removeHeader and writeHead read as if setHeader had made it.
 *
 * That table is Node's internal state, so it is used only when a probe, run once when this
 * module loads, finds it and proves the round trip on a real response (a direct entry read
 * back by getHeader and getHeaderNames, and sent by writeHead); and only on a response whose
 * `setHeader` is the one OutgoingMessage.prototype had when this module loaded: one an
 * application or an agent wrapped since (on the response, a prototype, or Node's) gets
 * every field through its wrapper. (A wrapper installed on Node's prototype before this
 * module loaded cannot be told from Node's own.) Anything else (another Node, HTTP/2's
 * compatibility responses) uses setHeader.
 */

export type HeaderTable = Record<string | symbol, unknown>;

/**
 * The one switch of the private fast path, and this module the only one that touches
 * another project's private state. Off, every field goes through `res.setHeader` and the
 * middleware's marks through a WeakMap (node.ts); the whole HTTP suite passes both ways.
 * On an Express response it saves ~0.5–1 µs of the middleware's ~1.5–2.5 µs a request
 * (in-process measurement); Fastify replies always take the public `reply.header()`,
 * where writing Fastify's own field object saved nothing measurable.
 */
export const PRIVATE_FAST_PATH = true;

const nodeSetHeader = OutgoingMessage.prototype.setHeader;

/**
 * Read with a computed key, and so are the table's symbol and the mark: every Express 5
 * response has a hidden class of its own (Express sets its prototype, then adds
 * `res.locals`, a null-prototype object), so a property read by name on it misses V8's
 * inline caches and then its stub cache the first time each name is read on each response.
 * A computed-key read takes the generic path instead, which is cheaper; the prototype's
 * property and an own-property check cost less still.
 */
const HEAD = '_header';

/** The symbol under which a response keeps its table, when the probe vouches for it. */
const TABLE: symbol | undefined = PRIVATE_FAST_PATH ? probe() : undefined;

function probe(): symbol | undefined {
  try {
    const blank = () => new ServerResponse(new IncomingMessage(new Socket()));
    const res = blank();
    res.setHeader('X-Atomic-Probe', 'a');
    for (const s of Object.getOwnPropertySymbols(res)) {
      const t = (res as unknown as HeaderTable)[s] as HeaderTable | null;
      if (typeof t !== 'object' || t === null || Object.getPrototypeOf(t) !== null) continue;
      const entry = t['x-atomic-probe'];
      if (!Array.isArray(entry) || entry[0] !== 'X-Atomic-Probe' || entry[1] !== 'a') continue;
      // The same symbol on a fresh response, written the way this module writes.
      const other = blank() as unknown as HeaderTable & ServerResponse;
      if (!(s in other) || (other[s] !== null && typeof other[s] !== 'object')) return undefined;
      tableOf(other, s)['x-atomic-check'] = ['X-Atomic-Check', 'b'];
      const names = other.getHeaderNames();
      if (other.getHeader('X-Atomic-Check') !== 'b' || names.length !== 1) return undefined;
      if (headStarted(other)) return undefined;
      other.writeHead(200);
      const sent = (other as unknown as { _header?: unknown })._header;
      return typeof sent === 'string' && sent.includes('\r\nX-Atomic-Check: b\r\n') ? s : undefined;
    }
  } catch {
    // Any surprise means the table is not what this module expects: use setHeader.
  }
  return undefined;
}

function tableOf(res: ServerResponse, s: symbol): HeaderTable {
  const r = res as unknown as HeaderTable;
  let t = r[s] as HeaderTable | null;
  if (t === null || t === undefined) {
    t = Object.create(null) as HeaderTable;
    r[s] = t;
  }
  return t;
}

/**
 * The header table of `res` (made if it has none yet, as setHeader would), or undefined
 * where fields must go through `res.setHeader` (no vouched-for table, or a wrapped
 * setHeader). Writes into it are only valid while `headStarted(res)` is false.
 */
export function headerTable(res: ServerResponse): HeaderTable | undefined {
  if (!writable(res)) return undefined;
  return tableOf(res, TABLE!);
}

/**
 * headerTable(), but only when the response has a table already (some field was set):
 * making one changes how Node writes the head — `writeHead(status, [name, value, …])` on a
 * response with a table sets each pair through setHeader, so repeated names (Set-Cookie)
 * keep only their last value — which a request this middleware skips must not do.
 */
export function existingHeaderTable(res: ServerResponse): HeaderTable | undefined {
  if (!writable(res)) return undefined;
  const t = (res as unknown as HeaderTable)[TABLE!] as HeaderTable | null | undefined;
  return t === null || t === undefined ? undefined : t;
}

/** Whether fields of `res` may go straight into its table (see above). */
function writable(res: ServerResponse): boolean {
  if (TABLE === undefined) return false;
  // Not `res.setHeader`, read on the response itself: see HEAD below.
  const proto = Object.getPrototypeOf(res) as { setHeader?: unknown } | null;
  return proto?.setHeader === nodeSetHeader && !Object.hasOwn(res, 'setHeader');
}

/** Whether `res` has started: `_header` holds the serialized head from then on. */
export function headStarted(res: ServerResponse): boolean {
  return Boolean((res as unknown as Record<string, unknown>)[HEAD]);
}

/** Writes fields into a header table: the entry `setHeader` would have made. */
export const tableSink: HeaderSink<HeaderTable> = {
  setHeader(table, field, value) {
    table[field.lower] = [field.name, value];
  },
  getHeader(table, field) {
    return (table[field.lower] as readonly unknown[] | undefined)?.[1];
  },
};

/**
 * Where the response has a header table, the same mark is kept in it, under a symbol:
 * Node reads the table by field name only (for…in, Object.keys, name lookups), so the mark
 * is never sent nor listed among the fields, and it costs a lookup where a WeakMap entry
 * costs a set and the collector's work on it.
 */
const COUNTED_BY = Symbol('atomic-limiter/http: decided by');

/** The middlewares' mark kept in a response's header table (see above), if any. */
export function markIn(table: HeaderTable): object | undefined {
  return table[COUNTED_BY] as object | undefined;
}

export function setMarkIn(table: HeaderTable, mark: object): void {
  table[COUNTED_BY] = mark;
}
