// Attaches to the limiter in workerData, takes a few permits, reports them and ends.
import { parentPort, workerData } from 'node:worker_threads';
import { attach } from '../../dist/index.js';

const limiter = attach(workerData.limiter);
let admitted = 0;
for (let i = 0; i < 5; i++) if (limiter.tryAcquire('k')) admitted++;
parentPort.postMessage(admitted);
