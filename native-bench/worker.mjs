// Worker-thread side of the native-bench groups. One file, dispatched on workerData.role.
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { calibrateOffset } from './lib.mjs';

if (isMainThread) {
  console.error('native-bench/worker.mjs is started by the groups; run native-bench/run.mjs');
  process.exit(2);
}
const data = workerData ?? {};

switch (data.role) {
  case 'calibrate': {
    // Calibrate perf.now() against hrtime `rounds` times and send the offsets back.
    const out = [];
    for (let r = 0; r < data.rounds; r++) out.push(calibrateOffset(data.samples));
    parentPort.postMessage(out);
    break;
  }

  case 'ticker': {
    // Coarse clock: store ms since `baseNs` (hrtime) into word 0 every 1 ms until word 1 is set.
    const w = new Int32Array(data.sab);
    const baseNs = data.baseNs;
    let timer = null;
    const tick = () => {
      if (Atomics.load(w, 1) !== 0) {
        clearInterval(timer);
        return;
      }
      Atomics.store(w, 0, Number((process.hrtime.bigint() - baseNs) / 1_000_000n));
      Atomics.add(w, 2, 1);
    };
    tick();
    timer = setInterval(tick, 1);
    break;
  }

  case 'contention': {
    // Rounds driven by the main thread through `ctl` (see layout.mjs). Each round: report
    // READY, block until GEN changes, CAS-increment word ctl[WORD + id] until STOP === gen,
    // publish the count, report DONE. GEN < 0 ends the worker.
    const ctl = new Int32Array(data.ctl);
    const counts = new Float64Array(data.counts);
    const words = new Int32Array(data.words);
    const id = data.id;
    const [GEN, READY, STOP, DONE, WORD] = [0, 1, 2, 3, 8];
    let gen = 0;
    for (;;) {
      Atomics.add(ctl, READY, 1);
      Atomics.notify(ctl, READY);
      Atomics.wait(ctl, GEN, gen);
      gen = Atomics.load(ctl, GEN);
      if (gen < 0) break;
      const w = Atomics.load(ctl, WORD + id);
      let c = 0;
      if (w >= 0) {
        while (Atomics.load(ctl, STOP) !== gen) {
          for (let k = 0; k < 256; k++) {
            let v = Atomics.load(words, w);
            for (;;) {
              const seen = Atomics.compareExchange(words, w, v, (v + 1) | 0);
              if (seen === v) break;
              v = seen;
            }
          }
          c += 256;
        }
      }
      counts[id] = c;
      Atomics.add(ctl, DONE, 1);
      Atomics.notify(ctl, DONE);
    }
    break;
  }

  case 'pingpong': {
    // Echo: wait for word A to change (waitAsync, or blocking Atomics.wait when data.sync),
    // copy it to word B and notify B. A value of -1 ends the worker.
    const w = new Int32Array(data.sab);
    const [A, B] = [0, 1];
    if (data.sync) {
      let last = 0;
      for (;;) {
        let a = Atomics.load(w, A);
        while (a === last) {
          Atomics.wait(w, A, last);
          a = Atomics.load(w, A);
        }
        if (a === -1) break;
        last = a;
        Atomics.store(w, B, a);
        Atomics.notify(w, B);
      }
    } else {
      // A pending waitAsync does not keep the event loop alive: hold it open with a timer.
      const keepAlive = setInterval(() => {}, 1 << 30);
      let last = 0;
      for (;;) {
        let a = Atomics.load(w, A);
        while (a === last) {
          const r = Atomics.waitAsync(w, A, last);
          if (r.async) await r.value;
          a = Atomics.load(w, A);
        }
        if (a === -1) break;
        last = a;
        Atomics.store(w, B, a);
        Atomics.notify(w, B);
      }
      clearInterval(keepAlive);
    }
    break;
  }

  case 'echo': {
    // MessagePort echo; 'exit' closes the port so the worker ends on its own.
    parentPort.on('message', (m) => {
      if (m === 'exit') parentPort.close();
      else parentPort.postMessage(m);
    });
    break;
  }

  default:
    throw new Error(`native-bench worker: unknown role ${String(data.role)}`);
}
