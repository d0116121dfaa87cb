// A bounded time-series buffer in uPlot's column layout: memory stays flat however long a tab
// stays open (the target: a browser tab under 64 MB of JS heap with 1 000 actions/s flowing).

export type Columns = [number[], ...(number | null)[][]];

export class SeriesBuffer {
  readonly times: number[] = [];
  readonly values: (number | null)[][];

  constructor(
    readonly seriesCount: number,
    readonly maxPoints = 1200,
    readonly windowSeconds = 3600,
  ) {
    this.values = Array.from({ length: seriesCount }, () => []);
  }

  /** Append one sample (unix seconds); samples older than the last one are dropped. */
  push(time: number, sample: (number | null | undefined)[]): boolean {
    const last = this.times.length ? this.times[this.times.length - 1] : -Infinity;
    if (!(time > last)) return false;
    this.times.push(time);
    for (let i = 0; i < this.seriesCount; i++) {
      const value = sample[i];
      this.values[i].push(value === undefined || !Number.isFinite(value) ? null : value);
    }
    this.trim();
    return true;
  }

  /** Replace the contents (e.g. with rollup history after a refetch). */
  reset(rows: Array<{ t: number; values: (number | null | undefined)[] }>): void {
    this.times.length = 0;
    for (const column of this.values) column.length = 0;
    for (const row of [...rows].sort((a, b) => a.t - b.t)) this.push(row.t, row.values);
  }

  get length(): number {
    return this.times.length;
  }

  columns(): Columns {
    return [this.times, ...this.values];
  }

  private trim(): void {
    const newest = this.times[this.times.length - 1];
    let drop = Math.max(0, this.times.length - this.maxPoints);
    while (drop < this.times.length && newest - this.times[drop] > this.windowSeconds) drop++;
    if (drop > 0) {
      this.times.splice(0, drop);
      for (const column of this.values) column.splice(0, drop);
    }
  }
}
