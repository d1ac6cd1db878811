/** How long a reply's bounds on the clocks' offset count (OffsetBounds): one or two of these. */
const PERIOD_MS = 10_000;

/**
 * Bounds on the offset of Redis's clock from this thread's local one (ms), from replies: a
 * reply decided at Redis time S, sent at local time s and read at a, puts the offset between
 * S − a and S − s (the script ran after sending and before reading; both clocks run at one
 * rate). The bounds kept are the tightest of the last one or two periods of PERIOD_MS — the
 * quickest replies' — so that slow replies never loosen them, and old ones lapse. A reply
 * whose bounds do not meet them shows the clocks moved apart (a clock stepped, or another
 * server answers): they start afresh from it.
 */
export class OffsetBounds {
  private lowNow = Number.NEGATIVE_INFINITY;
  private lowBefore = Number.NEGATIVE_INFINITY;
  private highNow = Number.POSITIVE_INFINITY;
  private highBefore = Number.POSITIVE_INFINITY;
  private periodAt = Number.NEGATIVE_INFINITY;

  /**
   * Redis time `scriptMs` of a reply sent at local `sentMs` and read at `at`, as local time:
   * the latest it can have been by the bounds so far (before note() of this reply), and no
   * later than `at`; undefined where they say nothing of it (none yet, lapsed, or this reply
   * does not meet them).
   */
  localOf(scriptMs: number, sentMs: number, at: number): number | undefined {
    if (!(at - this.periodAt < 2 * PERIOD_MS)) return undefined;
    const low = Math.max(this.lowNow, this.lowBefore);
    if (scriptMs - sentMs < low || scriptMs - at > Math.min(this.highNow, this.highBefore)) {
      return undefined;
    }
    return Math.min(at, Math.max(sentMs, scriptMs - low));
  }

  /** Notes the bounds of a reply decided at Redis time `scriptMs`, sent at `sentMs`, read at `at`. */
  note(scriptMs: number, sentMs: number, at: number): void {
    const low = scriptMs - at;
    const high = scriptMs - sentMs;
    if (!Number.isFinite(low) || !Number.isFinite(high)) return;
    if (
      !(at - this.periodAt < 2 * PERIOD_MS) ||
      high < Math.max(this.lowNow, this.lowBefore) ||
      low > Math.min(this.highNow, this.highBefore)
    ) {
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
      this.periodAt = at;
    }
    if (low > this.lowNow) this.lowNow = low;
    if (high < this.highNow) this.highNow = high;
  }
}
