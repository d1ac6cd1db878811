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

export type { ClusterLimiter, ConnectOptions, DescribedClusterLimiter } from './client.js';
export { type ClusterServer, serveCluster } from './serve.js';

let channel: Channel | undefined;

/**
 * In a cluster worker: the primary's limiter called `name` (see `serveCluster`). Calls
 * made before the primary serves wait for it (no polling) within their timeout; a name
 * the primary does not serve rejects at once with `ClusterUnavailableError`. Outside a
 * connected cluster worker it throws `ClusterUnavailableError` (bad options throw first).
 */
export function connectCluster(name: string, options: ConnectOptions = {}): ClusterLimiter {
  if (typeof name !== 'string' || name === '') {
    throw typeError(`connectCluster: name must be a non-empty string, got ${show(name)}`);
  }
  const parsed = connectOptions(options);
  if (!cluster.isWorker || !process.send || !process.connected) {
    throw new ClusterUnavailableError(
      'connectCluster: call it in a connected cluster worker (cluster.isWorker); in the primary, use the limiter itself',
    );
  }
  channel ??= new Channel();
  const client = new Client(name, channel, parsed);
  channel.hello();
  return client;
}
