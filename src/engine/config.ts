import type { Algorithm } from './algorithm.js';
import { type Core, stampOf, unwrapStamp } from './core.js';
import {
  F64_EPOCH_US,
  F64_PARAMS,
  FRESH,
  GEN_MASK,
  GEN_SHIFT,
  H_CONFIG,
  H_CONTROL,
  PAYLOAD_MASK,
  RESERVED,
  S_STAMP,
  S_STATE,
  STAMP_MASK,
  STAMP_PER_US,
} from './layout.js';
import { GEN_SAFE_SPAN } from './table.js';
import { forEachLockedStripe } from './table-walk.js';
import { wideExt, widePayload, wideState } from './wide.js';

/**
 * How long the options' sequence lock may stay taken before another thread takes it over:
 * a reconfigure() whose thread or process died midway (see wait()).
 */
const CONFIG_STALE_MS = 5000;
const CONFIG_WAIT_MS = 20;

/**
 * A limiter's options as stored in its buffer's header (F64_PARAMS), under a sequence lock
 * (H_CONFIG: odd while a reconfigure() writes them), and this thread's copy of them.
 */
export class SharedOptions {
  /** This thread's copy of the options, as read when H_CONFIG was `version`. */
  params: number[] = [];
  version = 0;
  /** True while this thread runs reconfigure() (it holds the lock). */
  reconfiguring = false;

  constructor(
    /** A view of the header (it never moves when the buffer grows). */
    private readonly i32: Int32Array,
    private readonly f64: Float64Array,
  ) {
    this.read();
  }

  /** The options in the header now (read under the lock, or by its holder). */
  stored(): number[] {
    return Array.from(this.f64.subarray(F64_PARAMS, F64_EPOCH_US));
  }

  /** Writes `next` to the header (under the lock). */
  store(next: number[]): void {
    next.forEach((p, k) => {
      this.f64[F64_PARAMS + k] = p;
    });
  }

  /** True when another thread's reconfigure() changed the options since this thread read them. */
  stale(): boolean {
    return !this.reconfiguring && Atomics.load(this.i32, H_CONFIG) !== this.version;
  }

  /** Reads the options under their sequence lock (waiting out a reconfigure() under way). */
  read(): void {
    const i32 = this.i32;
    let waits = 0;
    for (;;) {
      const v = Atomics.load(i32, H_CONFIG);
      if ((v & 1) !== 0) {
        waits = this.wait(v, waits);
        continue;
      }
      const params = this.stored();
      if (Atomics.load(i32, H_CONFIG) !== v) continue;
      this.params = params;
      this.version = v;
      return;
    }
  }

  /** Takes the lock (waiting out another holder); returns the version it replaced. */
  lock(): number {
    const i32 = this.i32;
    let waits = 0;
    for (;;) {
      const v = Atomics.load(i32, H_CONFIG);
      if ((v & 1) !== 0) waits = this.wait(v, waits);
      else if (Atomics.compareExchange(i32, H_CONFIG, v, v + 1) === v) {
        this.reconfiguring = true;
        return v;
      }
    }
  }

  /** Releases the lock at version `done` and wakes the threads waiting for it. */
  unlock(done: number): void {
    this.reconfiguring = false;
    this.version = done;
    Atomics.store(this.i32, H_CONFIG, done);
    Atomics.notify(this.i32, H_CONFIG);
  }

  /**
   * Waits for a reconfigure() under way (the lock word at odd `v`); `waits` counts the
   * waits already spent on that same value. A lock held past CONFIG_STALE_MS belongs to a
   * reconfigure() whose thread or process died midway: it is released as it stands — the
   * options in the header are whole numbers each, old or new, and each slot was converted
   * by one CAS or not at all — and every thread is sent off the fast path to take them up.
   */
  private wait(v: number, waits: number): number {
    const i32 = this.i32;
    if (Atomics.wait(i32, H_CONFIG, v, CONFIG_WAIT_MS) !== 'timed-out') return 0;
    if ((waits + 1) * CONFIG_WAIT_MS < CONFIG_STALE_MS) return waits + 1;
    if (Atomics.compareExchange(i32, H_CONFIG, v, v + 1) === v) {
      Atomics.add(i32, H_CONTROL, GEN_SAFE_SPAN);
      Atomics.notify(i32, H_CONFIG);
    }
    return 0;
  }
}

/**
 * reconfigure()'s work under the options' lock: the options `opts` (names checked) make
 * (Algorithm.reconfigured()) replace the stored ones, every slot's state is converted to
 * them where the algorithm says states depend on them, and every thread is sent off the
 * decision's fast path to take them up. `use` makes a set of options this thread's. False
 * when nothing changed.
 */
export function reconfigureShared(
  core: Core,
  algo: Algorithm,
  shared: SharedOptions,
  name: string,
  opts: Record<string, unknown>,
  use: (params: number[]) => void,
): boolean {
  const v = shared.lock();
  let done = v;
  try {
    // The options as they are (this thread may not have taken up the last change yet).
    const old = shared.stored();
    if (shared.version !== v) {
      use(old);
      shared.version = v;
    }
    const next = algo.reconfigured(name, opts);
    while (next.length < old.length) next.push(old[next.length]!);
    if (next.every((p, k) => p === old[k])) return false;
    shared.store(next);
    if (algo.convertsStates) convertAll(core, algo, old, next, use);
    else use(next);
    // Every thread's next decision leaves the fast path (see stands() in decision.ts) and
    // clears its key cache; and, as each slot was bumped at most once, the count of
    // generation bumps the control word keeps still bounds every slot's.
    Atomics.add(core.i32, H_CONTROL, GEN_SAFE_SPAN);
    done = v + 2;
    return true;
  } finally {
    shared.unlock(done);
  }
}

/**
 * Converts every slot's state from options `old` to `next` (`use` makes a set of options
 * this thread's), under each stripe's lock, a slot at a time RESERVED (decisions meeting it
 * look the key up again, and wait on the stripe lock), and bumps its generation: a thread
 * whose reference predates the conversion misses the slot, looks it up again, and takes up
 * the new options first (Limiter.syncConfig()); none steps a converted state with the old
 * options.
 */
function convertAll(
  core: Core,
  algo: Algorithm,
  old: number[],
  next: number[],
  use: (params: number[]) => void,
): void {
  const wide = core.wide;
  const last = core.last;
  forEachLockedStripe(core.table, (words) => {
    const i32 = core.i32;
    const nowUs = core.clock.nowUs();
    const stampNow = Math.floor((nowUs - core.epochUs) * STAMP_PER_US);
    use(old);
    const seen: number[] = [];
    const plans: (number[] | undefined)[] = [];
    for (const w of words) {
      for (;;) {
        const s = Atomics.load(i32, w + S_STATE);
        // A slot a dead inserter left reserved: voided with a new generation by the next.
        if ((s & PAYLOAD_MASK) === RESERVED) break;
        if (Atomics.compareExchange(i32, w + S_STATE, s, (s & GEN_MASK) | RESERVED) !== s) {
          continue;
        }
        const p = wide ? widePayload(s, Atomics.load(i32, w - 1)) : s;
        const fresh = (s & PAYLOAD_MASK) === FRESH;
        last.word = w;
        seen.push(w, s);
        plans.push(fresh ? undefined : algo.describe(p, stampOf(core, w, nowUs), nowUs));
        break;
      }
    }
    use(next);
    for (let k = 0; k < plans.length; k++) {
      const w = seen[2 * k]!;
      const gen = (((seen[2 * k + 1]! >>> GEN_SHIFT) + 1) & 15) << GEN_SHIFT;
      const d = plans[k];
      if (d === undefined) {
        Atomics.store(i32, w + S_STATE, gen | FRESH);
        continue;
      }
      // The new state is written relative to a stamp of now, or later (restampUs()): only
      // ever raised.
      const stamp = Math.floor((algo.restampUs(d, nowUs) - core.epochUs) * STAMP_PER_US);
      for (;;) {
        const raw = Atomics.load(i32, w + S_STAMP);
        if (unwrapStamp(raw, stampNow) >= stamp) break;
        const raised = (stamp & STAMP_MASK) | (raw & ~STAMP_MASK);
        if (Atomics.compareExchange(i32, w + S_STAMP, raw, raised) === raw) break;
      }
      last.word = w;
      const p = algo.restate(d, nowUs);
      if (wide) {
        Atomics.store(i32, w - 1, wideExt(p));
        Atomics.store(i32, w + S_STATE, wideState(gen, p));
      } else {
        Atomics.store(i32, w + S_STATE, gen | (p & PAYLOAD_MASK));
      }
    }
  });
  use(next);
}
