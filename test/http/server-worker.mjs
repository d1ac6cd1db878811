// A worker thread serving HTTP on its own port, rate-limited by a limiter attached from the
// main thread's handle (plain ESM on dist/: vitest does not transform worker files).
import http from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';
import { rateLimit } from '../../dist/http.js';
import { attach } from '../../dist/index.js';

const limit = rateLimit({ limiter: attach(workerData.handle), key: () => 'shared' });
let allowed = 0;
let refused = 0;
const server = http.createServer(async (req, res) => {
  if (!(await limit(req, res))) {
    refused++;
    return;
  }
  allowed++;
  res.end(String(workerData.index));
});
server.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: server.address().port }));
parentPort.on('message', (m) => {
  if (m === 'close') {
    server.closeAllConnections();
    server.close(() => {
      parentPort.postMessage({ allowed, refused });
      parentPort.close();
    });
  }
});
