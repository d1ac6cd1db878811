// Child process for ipc.mjs and clock.mjs (started with child_process.fork): echoes every
// message back over the IPC channel; { cmd: 'offset' } answers with this process's
// perf.now()/hrtime calibration. Sends 'ready' first. The parent disconnects the channel and the child exits.
import { calibrateOffset } from './lib.mjs';

process.on('message', (m) => {
  if (m !== null && typeof m === 'object' && m.cmd === 'offset') {
    const out = [];
    for (let r = 0; r < m.rounds; r++) out.push(calibrateOffset(m.samples));
    process.send(out);
    return;
  }
  process.send(m);
});
process.send('ready'); // the listener is in place: the parent may start
