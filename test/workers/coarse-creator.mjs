// Creates a CoarseClock in this worker thread and posts its handle. `end`: 'exit' returns
// at once (the thread ends by itself); 'stay' keeps the thread alive until terminated.
import { parentPort, workerData } from 'node:worker_threads';
import { CoarseClock } from '../../dist/index.js';

const clock = new CoarseClock({ resolutionMs: 1 });
parentPort.postMessage(clock.handle);
if (workerData.end === 'stay') setInterval(() => {}, 1000);
