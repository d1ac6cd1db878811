/**
 * atomic-limiter/cluster: one limiter for every process of a `node:cluster`.
 *
 * A SharedArrayBuffer cannot cross a process boundary, so the primary owns the limiters
 * and answers its workers over the IPC channel. A round trip costs tens of microseconds
 * against ~0.1 µs in-process, so both sides batch: every call a worker makes in one tick
 * travels in one message, answered in one (protocol.ts), and permit blocks (client.ts)
 * let a worker spend permits locally.
 *
 * primary:  serveCluster({ api: limiter });
 * worker:   const api = connectCluster('api'); await api.tryAcquire(ip);
 */
import cluster from 'node:cluster';
import { ClusterUnavailableError } from '../errors.js';
import { show, typeError } from '../validate.js';
import { Channel } from './channel.js';
import { Client, type ClusterLimiter, type ConnectOptions, connectOptions } from './client.js';
import { MARK } from './protocol.js';

export type { ClusterLimiter, ConnectOptions, DescribedClusterLimiter } from './client.js';
export { type ClusterServer, serveCluster } from './serve.js';

// One channel per process, shared by every copy of this module (an ESM and a CJS copy of
// the same protocol): each copy's would number its batches and acquire() calls from 1, and
// take the other's answers for its own calls.
const CHANNEL = Symbol.for(`atomic-limiter.cluster-channel:${MARK}`);
function sharedChannel(): Channel {
  const g = globalThis as { [CHANNEL]?: Channel };
  g[CHANNEL] ??= new Channel();
  return g[CHANNEL];
}

/**
 * PM2's cluster mode forks the application's instances from its own daemon: they are
 * cluster workers whose primary is PM2's, which serves no limiter, so every call would wait
 * out its timeout. PM2 copies the app's settings into each instance's environment, its
 * `exec_mode` among them; in fork mode an application's own `node:cluster` works as usual
 * (its primary is the application's, and its workers inherit `exec_mode: 'fork_mode'`).
 */
function underPm2ClusterMode(): void {
  const env = process.env;
  if (!cluster.isWorker || env.pm_id === undefined || env.exec_mode !== 'cluster_mode') return;
  throw new ClusterUnavailableError(
    `connectCluster: this process is PM2 cluster-mode instance ${env.pm_id}; its cluster primary is PM2's daemon, which serves no limiter. Share a limit between PM2 instances with host mode: pass memory: hostMemory('<name>') from 'atomic-limiter/host' to the limiter in every instance`,
  );
}

/**
 * In a cluster worker: the primary's limiter called `name` (see `serveCluster`). Calls
 * made before the primary serves wait for it (no polling) within their timeout; a name
 * the primary does not serve rejects at once with `ClusterUnavailableError`. Outside a
 * connected cluster worker, and in a PM2 cluster-mode instance (whose primary is PM2's
 * daemon: use `atomic-limiter/host` there), it throws `ClusterUnavailableError` (bad
 * options throw first).
 */
export function connectCluster(name: string, options: ConnectOptions = {}): ClusterLimiter {
  if (typeof name !== 'string' || name === '') {
    throw typeError(`connectCluster: name must be a non-empty string, got ${show(name)}`);
  }
  const parsed = connectOptions(options);
  underPm2ClusterMode();
  if (!cluster.isWorker || !process.send || !process.connected) {
    throw new ClusterUnavailableError(
      'connectCluster: call it in a connected cluster worker (cluster.isWorker); in the primary, use the limiter itself',
    );
  }
  const channel = sharedChannel();
  const client = new Client(name, channel, parsed);
  channel.hello();
  return client;
}
