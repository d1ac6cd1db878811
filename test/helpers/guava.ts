/**
 * A direct port of Guava's SmoothRateLimiter.SmoothWarmingUp (RateLimiter.create(rate,
 * warmupPeriod)) arithmetic: doubles for stored permits, whole µs (Java `long`) for times,
 * `(long)` truncation where Guava casts. Time is an input (µs), as Guava's stopwatch.
 */
export class GuavaWarmingUp {
  private readonly stableIntervalMicros: number;
  private readonly thresholdPermits: number;
  readonly maxPermits: number;
  private readonly slope: number;
  private readonly warmupPeriodMicros: number;
  storedPermits: number;
  nextFreeTicketMicros = 0;

  constructor(permitsPerSecond: number, warmupMs: number, coldFactor = 3, nowMicros = 0) {
    this.warmupPeriodMicros = warmupMs * 1000;
    // setRate(): resync(now) with maxPermits still 0 stores nothing; then doSetRate().
    this.nextFreeTicketMicros = nowMicros;
    this.stableIntervalMicros = 1e6 / permitsPerSecond;
    const coldIntervalMicros = this.stableIntervalMicros * coldFactor;
    this.thresholdPermits = (0.5 * this.warmupPeriodMicros) / this.stableIntervalMicros;
    this.maxPermits =
      this.thresholdPermits +
      (2.0 * this.warmupPeriodMicros) / (this.stableIntervalMicros + coldIntervalMicros);
    this.slope =
      (coldIntervalMicros - this.stableIntervalMicros) / (this.maxPermits - this.thresholdPermits);
    // oldMaxPermits == 0.0: the initial state is cold.
    this.storedPermits = this.maxPermits;
  }

  private coolDownIntervalMicros(): number {
    return this.warmupPeriodMicros / this.maxPermits;
  }

  private permitsToTime(permits: number): number {
    return this.stableIntervalMicros + permits * this.slope;
  }

  private storedPermitsToWaitTime(storedPermits: number, permitsToTake: number): number {
    const availablePermitsAboveThreshold = storedPermits - this.thresholdPermits;
    let micros = 0;
    if (availablePermitsAboveThreshold > 0.0) {
      const permitsAboveThresholdToTake = Math.min(availablePermitsAboveThreshold, permitsToTake);
      const length =
        this.permitsToTime(availablePermitsAboveThreshold) +
        this.permitsToTime(availablePermitsAboveThreshold - permitsAboveThresholdToTake);
      micros = Math.trunc((permitsAboveThresholdToTake * length) / 2.0);
      permitsToTake -= permitsAboveThresholdToTake;
    }
    micros += Math.trunc(this.stableIntervalMicros * permitsToTake);
    return micros;
  }

  private resync(nowMicros: number): void {
    if (nowMicros > this.nextFreeTicketMicros) {
      const newPermits = (nowMicros - this.nextFreeTicketMicros) / this.coolDownIntervalMicros();
      this.storedPermits = Math.min(this.maxPermits, this.storedPermits + newPermits);
      this.nextFreeTicketMicros = nowMicros;
    }
  }

  private reserveEarliestAvailable(requiredPermits: number, nowMicros: number): number {
    this.resync(nowMicros);
    const returnValue = this.nextFreeTicketMicros;
    const storedPermitsToSpend = Math.min(requiredPermits, this.storedPermits);
    const freshPermits = requiredPermits - storedPermitsToSpend;
    const waitMicros =
      this.storedPermitsToWaitTime(this.storedPermits, storedPermitsToSpend) +
      Math.trunc(freshPermits * this.stableIntervalMicros);
    this.nextFreeTicketMicros += waitMicros;
    this.storedPermits -= storedPermitsToSpend;
    return returnValue;
  }

  /** tryAcquire(permits, 0, MICROSECONDS) at `nowMicros`. */
  tryAcquire(permits: number, nowMicros: number): boolean {
    if (this.nextFreeTicketMicros > nowMicros) return false; // canAcquire(now, 0)
    this.reserveEarliestAvailable(permits, nowMicros);
    return true;
  }

  /** µs from `nowMicros` until tryAcquire can succeed (the debt still owed). */
  waitMicros(nowMicros: number): number {
    return Math.max(0, this.nextFreeTicketMicros - nowMicros);
  }
}
