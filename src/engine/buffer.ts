import { Attached, type Fresh, type Liveness, type MemoryRegion, type Waits } from '../options.js';
import { rangeError, show, typeError } from '../validate.js';
import {
  computeLayout,
  F64_EPOCH_US,
  F64_PARAMS,
  FRESH,
  H_ALGO,
  H_BYTES_DIV64,
  H_HOLDERS,
  H_KEYS,
  H_LOG_RING,
  H_MAGIC,
  H_MAX_KEYS,
  H_MAX_WAITERS,
  H_QUEUE_LIMIT,
  H_QUEUE_ORDER,
  H_SEED0,
  H_SEED1,
  H_SEGMENTS,
  H_SLOTS,
  H_STRIPES,
  H_VERSION,
  H_WHEN_FULL,
  H_WIDE,
  hotWord,
  LAYOUT_VERSION,
  type Layout,
  MAGIC,
  S_STATE,
} from './layout.js';

// A limiter's shared buffer: made and its header written for new options, or checked
// when attached from a handle (the layout itself is in layout.ts).

/** A limiter's buffers as opened by its constructor. */
export interface Opened {
  buffer: SharedArrayBuffer;
  layout: Layout;
  /** SlidingLog's pool of rings, when `layout.logRing` > 0. */
  logs: SharedArrayBuffer | undefined;
  /** The state existed before (a handle, or a region another process made): no init. */
  attached: boolean;
  /** Another thread or process may write the state from the start (attached, or a region). */
  shared: boolean;
  /** Lets other processes use a region this one made (see MemoryRegion.publish). */
  publish: () => void;
  /** How a region tells dead processes (see MemoryRegion.liveness). */
  liveness?: Liveness | undefined;
  /** How a region's waiters are woken from other processes (see MemoryRegion.waits). */
  waits?: Waits | undefined;
}

const NOTHING_TO_PUBLISH = () => {};

/**
 * The buffer and layout of a limiter: `source`'s, checked to belong to algorithm `algo`,
 * or a new buffer sized for its options within `maxBytes`, header written — in a region of
 * `source.memory` when given (created there, or attached and checked).
 */
export function openBuffer(owner: string, algo: number, source: Fresh | Attached): Opened {
  if (source instanceof Attached) {
    return {
      buffer: source.buffer,
      layout: attachedLayout(owner, algo, source),
      logs: source.logs,
      attached: true,
      shared: true,
      publish: NOTHING_TO_PUBLISH,
    };
  }
  const layout = layoutWithin(owner, source);
  if (source.memory === undefined) {
    const buffer = growable(layout.bytes, layout.maxBytes);
    writeHeader(buffer, layout, algo, source);
    const logs = layout.logRing > 0 ? growable(layout.poolBytes, layout.poolMaxBytes) : undefined;
    return { buffer, layout, logs, attached: false, shared: false, publish: NOTHING_TO_PUBLISH };
  }
  const parts = [{ bytes: layout.bytes, maxBytes: layout.maxBytes }];
  if (layout.logRing > 0) parts.push({ bytes: layout.poolBytes, maxBytes: layout.poolMaxBytes });
  const region: MemoryRegion = source.memory.open({
    owner,
    layoutVersion: LAYOUT_VERSION,
    options: source.described ?? {},
    parts,
    init: ([buffer]) => writeHeader(buffer!, layout, algo, source),
  });
  const [buffer, logs] = region.buffers;
  if (!region.created) headerAlgo(buffer!);
  return {
    buffer: buffer!,
    layout: region.created
      ? layout
      : attachedLayout(owner, algo, new Attached(buffer!, source.clock, logs)),
    logs,
    attached: !region.created,
    shared: true,
    publish: () => region.publish(),
    liveness: region.liveness,
    waits: region.waits,
  };
}

/** A buffer of `bytes`, growable to `maxBytes` (address space reserved, committed as it grows). */
function growable(bytes: number, maxBytes: number): SharedArrayBuffer {
  return maxBytes > bytes
    ? new SharedArrayBuffer(bytes, { maxByteLength: maxBytes })
    : new SharedArrayBuffer(bytes);
}

function attachedLayout(owner: string, algo: number, source: Attached): Layout {
  const i32 = fixedView(source.buffer);
  const layout = computeLayout(
    i32[H_KEYS]!,
    i32[H_LOG_RING]!,
    i32[H_MAX_WAITERS]!,
    i32[H_HOLDERS]!,
    i32[H_MAX_KEYS]!,
    i32[H_WIDE] === 1,
  );
  const length = source.buffer.byteLength;
  if (i32[H_ALGO] !== algo || length < layout.bytes || length > layout.maxBytes) {
    throw typeError(`${owner}: the buffer does not belong to a ${owner}`);
  }
  if (layout.logRing > 0 && !(source.logs instanceof SharedArrayBuffer)) {
    throw typeError(`${owner}: the handle has no log pool (handle.logs)`);
  }
  return layout;
}

/** Writes a new limiter's header and its slots' initial states. */
function writeHeader(buffer: SharedArrayBuffer, layout: Layout, algo: number, source: Fresh): void {
  const i32 = fixedView(buffer);
  const f64 = new Float64Array(buffer, 0, 16);
  i32[H_VERSION] = LAYOUT_VERSION;
  i32[H_ALGO] = algo;
  i32[H_SLOTS] = layout.slots;
  i32[H_STRIPES] = layout.stripes;
  i32[H_SEED0] = randomSeed();
  i32[H_SEED1] = randomSeed();
  i32[H_KEYS] = source.keys;
  i32[H_MAX_KEYS] = layout.maxKeys;
  i32[H_SEGMENTS] = 1;
  i32[H_QUEUE_LIMIT] = source.queueLimit;
  i32[H_QUEUE_ORDER] = source.queueOrder === 'newest-first' ? 1 : 0;
  i32[H_LOG_RING] = source.logRing;
  i32[H_MAX_WAITERS] = source.maxWaiters;
  i32[H_HOLDERS] = layout.holders;
  i32[H_WHEN_FULL] = source.whenFull === 'allow' ? 1 : 0;
  i32[H_WIDE] = source.wide ? 1 : 0;
  i32[H_BYTES_DIV64] = layout.bytes / 64;
  source.params.forEach((p, k) => {
    f64[F64_PARAMS + k] = p;
  });
  f64[F64_EPOCH_US] = Math.floor(source.clock.nowUs());
  for (let s = 0; s <= layout.slots; s++) i32[hotWord(layout, s) + S_STATE] = FRESH;
  // Magic last: a thread that sees it sees a complete header.
  Atomics.store(i32, H_MAGIC, MAGIC);
}

/** The layout for `source`'s options whose reservation fits its `maxBytes`, or a RangeError. */
function layoutWithin(owner: string, source: Fresh): Layout {
  const slots = computeLayout(source.keys, 0, 1, 0).slots + 1;
  const layoutFor = (maxKeys: number) =>
    computeLayout(
      source.keys,
      source.logRing,
      source.maxWaiters,
      slots * (source.holdersPerSlot ?? 0),
      maxKeys,
      source.wide === true,
    );
  let layout = layoutFor(source.maxKeys);
  const orLimit = source.logRing > 0 ? ' or "limit"' : '';
  // What `keys` reserve without growing (a log's pool may take a ring for every slot).
  const least = layoutFor(source.keys).totalMaxBytes;
  if (least > source.maxBytes) {
    throw rangeError(
      `${owner}: ${show(source.keys)} keys need ${mib(least)} of shared memory, more than "maxBytes" allows (${mib(source.maxBytes)}); lower "keys"${orLimit}, or raise "maxBytes"`,
    );
  }
  if (layout.totalMaxBytes > source.maxBytes && source.maxKeysGiven) {
    throw rangeError(
      `${owner}: a table growing to ${show(source.maxKeys)} keys reserves ${mib(layout.totalMaxBytes)} of shared memory, more than "maxBytes" allows (${mib(source.maxBytes)}); lower "maxKeys"${orLimit}, or raise "maxBytes"`,
    );
  }
  // Without an explicit maxKeys, the ceiling is as many segments as maxBytes holds.
  while (layout.totalMaxBytes > source.maxBytes) {
    layout = layoutFor(source.keys * 2 ** (layout.segments.length - 2));
  }
  return layout;
}

function randomSeed(): number {
  return (Math.random() * 2 ** 32) | 0;
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** A fixed-length Int32 view of the whole buffer as long as it is now. */
export function fixedView(buffer: SharedArrayBuffer): Int32Array {
  return new Int32Array(buffer, 0, buffer.byteLength >> 2);
}

/** Reads a limiter's header for attach(): algorithm id, or throws a clear error. */
export function headerAlgo(buffer: SharedArrayBuffer): number {
  const i32 = new Int32Array(buffer, 0, Math.min(16, buffer.byteLength >> 2));
  if (buffer.byteLength < 256 || Atomics.load(i32, H_MAGIC) !== MAGIC) {
    throw typeError('attach: the buffer is not an atomic-limiter buffer (wrong magic)');
  }
  const version = Atomics.load(i32, H_VERSION);
  if (version !== LAYOUT_VERSION) {
    throw typeError(
      `attach: the buffer has layout version ${version}; this copy of atomic-limiter reads version ${LAYOUT_VERSION}`,
    );
  }
  if (Atomics.load(i32, H_BYTES_DIV64) * 64 > buffer.byteLength) {
    throw typeError('attach: the buffer size does not match its header');
  }
  return Atomics.load(i32, H_ALGO);
}
