import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Loads the native addon of host mode (host-addon/ at the package's root): a prebuilt binary
// from host-addon/prebuilds/<platform>-<arch>/, or the one built at install in
// host-addon/build/Release. Only atomic-limiter/host loads it; where it cannot load, importing
// atomic-limiter/host throws at once, naming the platform and what to use instead.

/** What the addon exports (host-addon/region.cc). */
export interface Addon {
  /** Creates (O_EXCL, `mode`) or opens region `name`; null while its creator sizes it. */
  open(
    name: string,
    bytes: number,
    initialBytes: number,
    mode: number,
  ): { created: boolean; buffer: SharedArrayBuffer; size: number } | null;
  /** A SharedArrayBuffer over `length` bytes of `buffer`'s mapping from `offset`. */
  view(buffer: SharedArrayBuffer, offset: number, length: number): SharedArrayBuffer;
  /** Allocates the pages of a range (a full /dev/shm is an error here, not a SIGBUS later). */
  commit(buffer: SharedArrayBuffer, offset: number, length: number): void;
  /** Unlinks region `name`: false if there was none. */
  unlink(name: string): boolean;
  /** Whether a process with this id exists. */
  alive(pid: number): boolean;
  /** Sets this thread's function that settles its waits: settle(id, result). */
  setSettler(settle: (id: number, result: 'ok' | 'timed-out' | 'not-equal') => void): void;
  /** FUTEX_WAKE on a word of a region (its waiters in every process). */
  wake(buffer: SharedArrayBuffer, byteOffset: number): void;
  /**
   * Waits in the addon's waiter thread until the word is woken or differs from `value`, or
   * `timeoutMs` pass; returns the id settle() is called with.
   */
  wait(buffer: SharedArrayBuffer, byteOffset: number, value: number, timeoutMs: number): number;
}

const ALTERNATIVES =
  'Instead: the cluster bridge (atomic-limiter/cluster) for the processes of one node:cluster, or Redis (atomic-limiter/redis) for any processes and hosts.';

function addonDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let up = 0; up < 4; up++) {
    const candidate = join(dir, 'host-addon');
    if (existsSync(join(candidate, 'binding.gyp'))) return candidate;
    dir = dirname(dir);
  }
  return join(dirname(fileURLToPath(import.meta.url)), '..', 'host-addon');
}

function load(): Addon {
  const where = `${process.platform}-${process.arch}, Node ${process.versions.node} (ABI ${process.versions.modules})`;
  if (process.platform !== 'linux') {
    throw new Error(
      `atomic-limiter/host: host mode runs on Linux; there is no native addon for ${where}. ${ALTERNATIVES}`,
    );
  }
  const require = createRequire(import.meta.url);
  try {
    const nodeGypBuild = require('node-gyp-build') as (dir: string) => Addon;
    return nodeGypBuild(addonDir());
  } catch (error) {
    const cause = error instanceof Error ? error.message.split('\n')[0] : String(error);
    throw new Error(
      `atomic-limiter/host: the native addon could not be loaded for ${where} (${cause}). It is built when the package is installed (needs a C++ compiler, python3 and make), or loaded from a prebuilt binary. ${ALTERNATIVES}`,
      { cause: error },
    );
  }
}

/** The addon, loaded when this module is imported (an error at import if it cannot be). */
export const addon: Addon = load();
