/** How long a reply's bounds on the clocks' offset count (OffsetBounds): 10 to 20 s. */
const PERIOD_MS = 10_000;

/**
 * Bounds on the offset of Redis's clock from this thread's local one (ms), from replies: a
 * reply decided at Redis time S, sent at local time s and read at a, puts the offset between
 * S − a and S − s (the script ran after sending and before reading; both clocks run at one
 * rate). The bounds kept are the tightest — the quickest replies' — of the replies read in
 * the last 10 to 20 s (two periods of PERIOD_MS on a fixed grid), so that slow replies
 * never loosen them, and old ones lapse. A reply whose bounds do not meet them shows the
 * clocks moved apart (a clock stepped, or another server answers): they start afresh from
 * it.
 */
export class OffsetBounds {
  /** The current period's tightest bounds, and the period's before. */
  private lowNow = Number.NEGATIVE_INFINITY;
  private highNow = Number.POSITIVE_INFINITY;
  private lowBefore = Number.NEGATIVE_INFINITY;
  private highBefore = Number.POSITIVE_INFINITY;
  /** When the current period began (local ms; −Infinity: no reply yet). */
  private periodAt = Number.NEGATIVE_INFINITY;

  /**
   * Which bounds count at local time `at`: 2 both periods', 1 the current one's alone, 0
   * none (none yet, or lapsed). The current period's count until two periods from its
   * start, the one's before only until the current period ends.
   */
  private live(at: number): number {
    const elapsed = at - this.periodAt;
    if (!(elapsed < 2 * PERIOD_MS)) return 0;
    return elapsed >= PERIOD_MS ? 1 : 2;
  }

  private lowBound(live: number): number {
    return live === 2 ? Math.max(this.lowNow, this.lowBefore) : this.lowNow;
  }

  private highBound(live: number): number {
    return live === 2 ? Math.min(this.highNow, this.highBefore) : this.highNow;
  }

  /**
   * Redis time `scriptMs` of a reply sent at local `sentMs` and read at `at`, as local time:
   * the latest it can have been by the bounds so far (before note() of this reply), and no
   * later than `at`; undefined where they say nothing of it (none, lapsed, or this reply
   * does not meet them).
   */
  localOf(scriptMs: number, sentMs: number, at: number): number | undefined {
    const live = this.live(at);
    if (live === 0) return undefined;
    const low = this.lowBound(live);
    if (scriptMs - sentMs < low || scriptMs - at > this.highBound(live)) return undefined;
    return Math.min(at, Math.max(sentMs, scriptMs - low));
  }

  /** Notes the bounds of a reply decided at Redis time `scriptMs`, sent at `sentMs`, read at `at`. */
  note(scriptMs: number, sentMs: number, at: number): void {
    const low = scriptMs - at;
    const high = scriptMs - sentMs;
    if (!Number.isFinite(low) || !Number.isFinite(high)) return;
    const live = this.live(at);
    if (live === 0 || high < this.lowBound(live) || low > this.highBound(live)) {
      this.lowBefore = Number.NEGATIVE_INFINITY;
      this.highBefore = Number.POSITIVE_INFINITY;
      this.lowNow = low;
      this.highNow = high;
      this.periodAt = at;
      return;
    }
    if (at - this.periodAt >= PERIOD_MS) {
      this.lowBefore = this.lowNow;
      this.highBefore = this.highNow;
      this.lowNow = Number.NEGATIVE_INFINITY;
      this.highNow = Number.POSITIVE_INFINITY;
      this.periodAt += PERIOD_MS;
    }
    if (low > this.lowNow) this.lowNow = low;
    if (high < this.highNow) this.highNow = high;
  }
}
