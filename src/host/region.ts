import type { MemoryProvider, MemoryRegion, MemoryRequest } from '../options.js';
import { rangeError, show, typeError } from '../validate.js';
import { addon } from './addon.js';
import { LIVENESS_BYTES, processLiveness } from './liveness.js';
import { hostWaits } from './waits.js';

// A named POSIX shared-memory region holding one limiter (or one ManualClock): a header
// page, then each part the limiter asked for (its table, SlidingLog's pool of rings), each
// reserved at its largest size and allocated as it grows.
//
// Header (Int32 words): the region's magic and format version, a ready mark, the creator's
// process id, the engine's layout version, the parts, the owner and options as JSON, and a
// checksum over all of that but the ready mark and the parts' current lengths (the words
// that change). An attaching process checks every one before trusting the region.

const REGION_MAGIC = 0x414c4852; // 'ALHR'
/** The format of this header. */
const REGION_FORMAT = 1;
const HEADER_BYTES = 4096;
const PAGE = 4096;
/** The processes behind the limiter's thread table (liveness.ts), after the header. */
const LIVENESS_AT = HEADER_BYTES;
const PARTS_AT = LIVENESS_AT + Math.ceil(LIVENESS_BYTES / 4096) * 4096;
const W_MAGIC = 0;
const W_FORMAT = 1;
/** 0 while the creator writes, READY once published. */
const W_STATE = 2;
const W_CREATOR = 3;
const W_LAYOUT_VERSION = 4;
const W_PARTS = 5;
const W_TEXT_BYTES = 6;
const W_CHECKSUM = 7;
/** Per part, 4 words from here: offset, largest bytes, current bytes, spare. */
const W_PART0 = 16;
const MAX_PARTS = 4;
const TEXT_BYTE = 256;
const READY = 1;

/** Names are file names under /dev/shm, prefixed so they never meet another program's. */
const PREFIX = 'atomic-limiter.';
const MAX_NAME = 200;
const NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;
/** Default ceiling of a region: what a limiter's table may grow to, reserved not allocated. */
const DEFAULT_MAX_BYTES = 256 * 2 ** 20;
const MAX_REGION_BYTES = 2 ** 31 - 2 ** 16;
/** How long an attaching process waits for the creator to publish the region. */
const READY_TIMEOUT_MS = 5000;

/** Options of `hostMemory()`. */
export interface HostMemoryOptions {
  /**
   * Largest bytes the limiter's state may take in the region (default 256 MiB, at most
   * 2^31 − 2^16): reserved when the region is created, allocated as the table grows.
   */
  maxBytes?: number;
  /** File mode of the region (default 0o600: only this user's processes can open it). */
  mode?: number;
}

/** A memory provider for host mode, as `hostMemory()` returns it. */
export interface HostMemory extends MemoryProvider {
  /** Always 'host'. */
  readonly kind: 'host';
  /** The region's name, as given. */
  readonly name: string;
  /** The most bytes the region may grow to (its table's growth stops there). */
  readonly maxBytes: number;
  /** The region's file mode. */
  readonly mode: number;
}

function checkName(owner: string, name: unknown): string {
  if (typeof name !== 'string') {
    throw typeError(`${owner}: the region name must be a string, got ${show(name)}`);
  }
  if (name.length === 0 || name.length > MAX_NAME) {
    throw rangeError(
      `${owner}: the region name must be 1 to ${MAX_NAME} characters, got ${name.length}`,
    );
  }
  if (!NAME.test(name)) {
    throw typeError(
      `${owner}: the region name ${show(name)} may hold only letters, digits, ".", "_" and "-", and not start with "." or "-" (it is a file name in /dev/shm; no "/")`,
    );
  }
  return name;
}

/**
 * Shared memory every process of this host can open by `name`: pass it as a limiter's
 * `memory` option in each process, with the same options, and they share one limit.
 * The first process to open the name creates the region (mode 0600 by default) and
 * initialises it; the others attach, and are refused (an error naming the option and both
 * values) if their class, options or version differ. The region outlives the processes
 * (a restart or deploy keeps the limits) until `removeHostMemory(name)`.
 *
 * @example
 * new TokenBucket({ capacity: 100, refillPerSecond: 50, keys: 100_000, memory: hostMemory('api') })
 */
export function hostMemory(name: string, options: HostMemoryOptions = {}): HostMemory {
  checkName('hostMemory', name);
  if (typeof options !== 'object' || options === null) {
    throw typeError(`hostMemory: options must be an object, got ${show(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (key !== 'maxBytes' && key !== 'mode') {
      throw typeError(`hostMemory: unknown option "${key}"; expected "maxBytes" or "mode"`);
    }
  }
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  if (!Number.isInteger(maxBytes) || maxBytes < 2 ** 16 || maxBytes > MAX_REGION_BYTES) {
    throw rangeError(
      `hostMemory: option "maxBytes" must be an integer from ${2 ** 16} to ${MAX_REGION_BYTES}, got ${show(options.maxBytes)}`,
    );
  }
  const mode = options.mode ?? 0o600;
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o777 || (mode & 0o600) !== 0o600) {
    throw rangeError(
      `hostMemory: option "mode" must be a file mode from 0o600 to 0o777 that lets its owner read and write, got ${show(options.mode)}`,
    );
  }
  return {
    kind: 'host',
    name,
    maxBytes,
    mode,
    open: (request) => openRegion(name, maxBytes, mode, request),
  };
}

/**
 * Deletes region `name`: processes that have it open keep using theirs; the next to open
 * the name creates a new one. Returns false if there was none.
 */
export function removeHostMemory(name: string): boolean {
  return addon.unlink(PREFIX + checkName('removeHostMemory', name));
}

function roundUp(n: number, to: number): number {
  return Math.ceil(n / to) * to;
}

function openRegion(
  name: string,
  ceiling: number,
  mode: number,
  request: MemoryRequest,
): MemoryRegion {
  const text = new TextEncoder().encode(
    JSON.stringify({ owner: request.owner, options: request.options }),
  );
  if (TEXT_BYTE + text.length > HEADER_BYTES) {
    throw rangeError(`hostMemory(${show(name)}): the ${request.owner}'s options are too long`);
  }
  if (request.parts.length > MAX_PARTS) {
    throw rangeError(`hostMemory(${show(name)}): at most ${MAX_PARTS} parts`);
  }
  const offsets: number[] = [];
  let total = PARTS_AT;
  let largest = 0;
  for (const part of request.parts) {
    offsets.push(total);
    total += roundUp(part.maxBytes, PAGE);
    largest += part.maxBytes;
  }
  if (largest > ceiling) {
    throw rangeError(
      `hostMemory(${show(name)}): the ${request.owner} needs ${largest} bytes at most, past the region's ceiling ("maxBytes", ${ceiling})`,
    );
  }
  const deadline = Date.now() + READY_TIMEOUT_MS;
  const nap = new Int32Array(new SharedArrayBuffer(4));
  const file = PREFIX + name;
  for (;;) {
    let opened: ReturnType<typeof addon.open>;
    try {
      opened = addon.open(file, total, HEADER_BYTES, mode);
    } catch (error) {
      throw systemError(`hostMemory(${show(name)}): could not open or create the region`, error);
    }
    if (opened === null) {
      // Its creator has not sized it yet (or it was removed meanwhile): try again.
      if (Date.now() > deadline) throw unfinished(name, 0);
      Atomics.wait(nap, 0, 0, 1);
      continue;
    }
    const whole = opened.buffer;
    const header = new Int32Array(whole, 0, HEADER_BYTES / 4);
    if (opened.created) {
      return create(name, file, whole, header, request, offsets, text);
    }
    return attach(name, opened.size, whole, header, request, deadline, nap);
  }
}

function create(
  name: string,
  file: string,
  whole: SharedArrayBuffer,
  header: Int32Array,
  request: MemoryRequest,
  offsets: readonly number[],
  text: Uint8Array,
): MemoryRegion {
  try {
    header[W_FORMAT] = REGION_FORMAT;
    header[W_CREATOR] = process.pid;
    header[W_LAYOUT_VERSION] = request.layoutVersion;
    header[W_PARTS] = request.parts.length;
    header[W_TEXT_BYTES] = text.length;
    request.parts.forEach((part, i) => {
      header[W_PART0 + 4 * i] = offsets[i]!;
      header[W_PART0 + 4 * i + 1] = part.maxBytes;
      header[W_PART0 + 4 * i + 2] = part.bytes;
      // Allocated now, so that a full /dev/shm is an error here rather than a SIGBUS later.
      if (part.bytes > 0) commit(name, whole, offsets[i]!, part.bytes);
    });
    commit(name, whole, LIVENESS_AT, LIVENESS_BYTES);
    new Uint8Array(whole, TEXT_BYTE, text.length).set(text);
    header[W_CHECKSUM] = checksum(header, whole);
    Atomics.store(header, W_MAGIC, REGION_MAGIC);
    const buffers = partBuffers(name, whole, header);
    request.init(buffers);
    let published = false;
    return {
      buffers,
      created: true,
      name,
      liveness: processLiveness(addon.view(whole, LIVENESS_AT, LIVENESS_BYTES)),
      waits: hostWaits,
      publish: () => {
        if (published) return;
        published = true;
        Atomics.store(header, W_STATE, READY);
        Atomics.notify(header, W_STATE);
      },
    };
  } catch (error) {
    // Nobody can use a region its creator could not finish: remove it, report why.
    addon.unlink(file);
    throw error;
  }
}

function attach(
  name: string,
  size: number,
  whole: SharedArrayBuffer,
  header: Int32Array,
  request: MemoryRequest,
  deadline: number,
  nap: Int32Array,
): MemoryRegion {
  const where = `hostMemory(${show(name)})`;
  // The creator publishes once its limiter is built (microseconds): wait for that mark.
  while (Atomics.load(header, W_STATE) !== READY) {
    const magic = Atomics.load(header, W_MAGIC);
    if (magic !== 0 && magic !== REGION_MAGIC) break; // not ours: refused below
    if (Date.now() > deadline) {
      throw unfinished(name, Atomics.load(header, W_CREATOR));
    }
    Atomics.wait(nap, 0, 0, 1);
  }
  const magic = Atomics.load(header, W_MAGIC);
  if (magic !== REGION_MAGIC) {
    throw typeError(
      `${where}: the region is not an atomic-limiter region (magic ${hex(magic)}, expected ${hex(REGION_MAGIC)}); removeHostMemory(${show(name)}) deletes it`,
    );
  }
  const format = header[W_FORMAT];
  if (format !== REGION_FORMAT) {
    throw typeError(
      `${where}: the region's header has format ${format}; this copy of atomic-limiter reads format ${REGION_FORMAT}`,
    );
  }
  const parts = header[W_PARTS]!;
  const textBytes = header[W_TEXT_BYTES]!;
  if (
    parts < 0 ||
    parts > MAX_PARTS ||
    textBytes < 0 ||
    TEXT_BYTE + textBytes > HEADER_BYTES ||
    header[W_CHECKSUM] !== checksum(header, whole)
  ) {
    throw corrupted(where, name, 'its checksum does not match');
  }
  for (let i = 0; i < parts; i++) {
    const offset = header[W_PART0 + 4 * i]!;
    const max = header[W_PART0 + 4 * i + 1]!;
    const now = Atomics.load(header, W_PART0 + 4 * i + 2);
    if (offset < PARTS_AT || max < 0 || offset + max > size || now < 0 || now > max) {
      throw corrupted(where, name, `part ${i} lies outside the region`);
    }
  }
  let theirs: { owner: string; options: Record<string, unknown> };
  try {
    theirs = JSON.parse(
      new TextDecoder().decode(new Uint8Array(whole, TEXT_BYTE, textBytes).slice()),
    );
  } catch {
    throw corrupted(where, name, 'its description is not JSON');
  }
  // The class first: a ManualClock's region and a limiter's have different layout versions,
  // and "another version" would send the caller to remove a region that is not stale.
  if (theirs.owner !== request.owner) {
    throw typeError(
      `${where}: the region holds a ${theirs.owner}, not a ${request.owner}; use another name, or removeHostMemory(${show(name)})`,
    );
  }
  const version = header[W_LAYOUT_VERSION];
  if (version !== request.layoutVersion) {
    throw typeError(
      `${where}: the region was made by a copy of atomic-limiter with layout version ${version}; this copy reads version ${request.layoutVersion} (removeHostMemory(${show(name)}) once every process runs the new version)`,
    );
  }
  const names = new Set([...Object.keys(theirs.options), ...Object.keys(request.options)]);
  for (const option of names) {
    const a = theirs.options[option];
    const b = request.options[option];
    if (a !== b) {
      throw typeError(
        `${where}: option "${option}" of the ${request.owner} in the region is ${show(a)}, here ${show(b)}; every process sharing a region must give the same options`,
      );
    }
  }
  if (parts !== request.parts.length) {
    throw corrupted(
      where,
      name,
      `it has ${parts} parts, the ${request.owner} needs ${request.parts.length}`,
    );
  }
  return {
    buffers: partBuffers(name, whole, header),
    created: false,
    name,
    publish: () => {},
    liveness: processLiveness(addon.view(whole, LIVENESS_AT, LIVENESS_BYTES)),
    waits: hostWaits,
  };
}

/**
 * One buffer per part, over the part's whole reservation, that behaves as a growable
 * SharedArrayBuffer for the engine: `byteLength` is the part's length now (a header word
 * every process sees), and `grow()` allocates the new pages, then lengthens it.
 */
function partBuffers(
  name: string,
  whole: SharedArrayBuffer,
  header: Int32Array,
): SharedArrayBuffer[] {
  const out: SharedArrayBuffer[] = [];
  const parts = header[W_PARTS]!;
  for (let i = 0; i < parts; i++) {
    const offset = header[W_PART0 + 4 * i]!;
    const max = header[W_PART0 + 4 * i + 1]!;
    const word = W_PART0 + 4 * i + 2;
    const buffer = addon.view(whole, offset, max);
    if (Atomics.load(header, word) < max) {
      Object.defineProperties(buffer, {
        byteLength: { get: () => Atomics.load(header, word) },
        maxByteLength: { value: max },
        growable: { value: true },
        grow: {
          value: (bytes: number) => {
            const now = Atomics.load(header, word);
            if (!Number.isInteger(bytes) || bytes > max || bytes < 0) {
              throw rangeError(`host memory: cannot grow a part of ${max} bytes to ${bytes}`);
            }
            if (bytes <= now) return;
            commit(name, whole, offset + now, bytes - now);
            let seen = now;
            while (seen < bytes) {
              const was = Atomics.compareExchange(header, word, seen, bytes);
              if (was === seen) break;
              seen = was;
            }
          },
        },
      });
    }
    out.push(buffer);
  }
  return out;
}

/** Allocates a range of the region's pages, or throws saying why (a full /dev/shm). */
function commit(name: string, whole: SharedArrayBuffer, offset: number, bytes: number): void {
  try {
    addon.commit(whole, offset, bytes);
  } catch (error) {
    throw systemError(
      `hostMemory(${show(name)}): could not allocate ${bytes} bytes of the region`,
      error,
    );
  }
}

/** An Error for a failed system call, with its errno code and a hint. */
function systemError(what: string, cause: unknown): Error {
  const code = (cause as { code?: string }).code ?? 'EIO';
  const hint =
    code === 'ENOSPC' || code === 'EFBIG' || code === 'ENOMEM'
      ? ': /dev/shm is full or too small for it (see df /dev/shm; a smaller "maxBytes" or "keys" needs less)'
      : code === 'EACCES' || code === 'EPERM'
        ? ': another user owns a region of that name (regions are mode 0600 by default)'
        : '';
  const error = new Error(`${what} (${(cause as Error).message})${hint}`, { cause });
  Object.defineProperty(error, 'code', { value: code, enumerable: true });
  return error;
}

/** FNV-1a over the header words that never change and the description. */
function checksum(header: Int32Array, whole: SharedArrayBuffer): number {
  let h = 0x811c9dc5;
  const mix = (x: number) => {
    h = Math.imul(h ^ (x & 0xff), 0x01000193);
    h = Math.imul(h ^ ((x >>> 8) & 0xff), 0x01000193);
    h = Math.imul(h ^ ((x >>> 16) & 0xff), 0x01000193);
    h = Math.imul(h ^ (x >>> 24), 0x01000193);
  };
  mix(header[W_FORMAT]!);
  mix(header[W_CREATOR]!);
  mix(header[W_LAYOUT_VERSION]!);
  const parts = header[W_PARTS]!;
  mix(parts);
  const textBytes = header[W_TEXT_BYTES]!;
  mix(textBytes);
  for (let i = 0; i < Math.min(parts, MAX_PARTS); i++) {
    mix(header[W_PART0 + 4 * i]!);
    mix(header[W_PART0 + 4 * i + 1]!);
  }
  const bytes = new Uint8Array(
    whole,
    TEXT_BYTE,
    Math.max(0, Math.min(textBytes, HEADER_BYTES - TEXT_BYTE)),
  );
  for (const b of bytes) mix(b);
  return h | 0;
}

function hex(n: number): string {
  return `0x${(n >>> 0).toString(16)}`;
}

function corrupted(where: string, name: string, why: string): Error {
  const error = new Error(
    `${where}: the region's header is corrupted (${why}); it is not used. removeHostMemory(${show(name)}) deletes it (its limits start again)`,
  );
  Object.defineProperty(error, 'code', { value: 'ERR_HOST_MEMORY_CORRUPTED', enumerable: true });
  return error;
}

function unfinished(name: string, creator: number): Error {
  const who =
    creator > 0
      ? addon.alive(creator)
        ? `process ${creator} is still creating it`
        : `process ${creator} died while creating it`
      : 'its creator never sized it';
  const error = new Error(
    `hostMemory(${show(name)}): the region was not ready after ${READY_TIMEOUT_MS} ms (${who}); removeHostMemory(${show(name)}) deletes it`,
  );
  Object.defineProperty(error, 'code', { value: 'ERR_HOST_MEMORY_UNFINISHED', enumerable: true });
  return error;
}
