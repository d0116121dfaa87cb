// uPlot time-series charts that follow the light/dark theme and redraw at most once per frame.

import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { h } from "./dom";
import { SeriesBuffer } from "./series";

export interface SeriesSpec {
  label: string;
  color: string;
  /** Format values in the legend. */
  format?: (value: number) => string;
}

export interface ChartSpec {
  title: string;
  series: SeriesSpec[];
  height?: number;
  maxPoints?: number;
  windowSeconds?: number;
  yMin?: number;
  /** A fixed top of the y axis (1 for ratios); otherwise it follows the data. */
  yMax?: number;
  /** Format y-axis tick labels. */
  axisFormat?: (value: number) => string;
  stepped?: boolean;
  /** false for a non-time x axis (e.g. a CDF over ACT seconds). */
  xTime?: boolean;
}

function cssVar(name: string, fallback: string): string {
  const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return value || fallback;
}

export class LiveChart {
  readonly element: HTMLElement;
  readonly buffer: SeriesBuffer;
  private plot: uPlot | null = null;
  private frame = 0;
  private readonly resizeObserver: ResizeObserver | null = null;

  constructor(private readonly spec: ChartSpec) {
    this.buffer = new SeriesBuffer(spec.series.length, spec.maxPoints, spec.windowSeconds);
    const holder = h("div", { class: "chart-body" });
    this.element = h("figure", { class: "chart" }, h("figcaption", {}, spec.title), holder);
    if (typeof ResizeObserver !== "undefined") {
      this.resizeObserver = new ResizeObserver(() => this.resize());
      this.resizeObserver.observe(this.element);
    }
    queueMicrotask(() => this.mount(holder));
  }

  push(time: number, sample: (number | null | undefined)[]): void {
    if (this.buffer.push(time, sample)) this.schedule();
  }

  reset(rows: Array<{ t: number; values: (number | null | undefined)[] }>): void {
    this.buffer.reset(rows);
    this.schedule();
  }

  /** Rebuild with the current theme's colours. */
  retheme(): void {
    const holder = this.element.querySelector<HTMLElement>(".chart-body");
    this.plot?.destroy();
    this.plot = null;
    if (holder) this.mount(holder);
  }

  destroy(): void {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.resizeObserver?.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }

  private mount(holder: HTMLElement): void {
    if (!holder.isConnected || this.plot) return;
    const axisColor = cssVar("--muted", "#667");
    const gridColor = cssVar("--grid", "#ddd");
    const axis = { stroke: axisColor, grid: { stroke: gridColor, width: 1 }, ticks: { show: false } };
    const format = this.spec.axisFormat;
    const yAxis = format
      ? { ...axis, size: 56, values: (_u: uPlot, ticks: number[]) => ticks.map((t) => format(t)) }
      : { ...axis, size: 56 };
    const options: uPlot.Options = {
      width: Math.max(240, holder.clientWidth || 480),
      height: this.spec.height ?? 180,
      legend: { show: true, live: true },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: {
          time: this.spec.xTime ?? true,
          // A time chart spans at least a minute, so one early sample does not stretch it to years.
          range: (_u, min, max): uPlot.Range.MinMax =>
            (this.spec.xTime ?? true) && (max ?? 0) - (min ?? 0) < 60
              ? [(max ?? 0) - 60, (max ?? 0) + 1]
              : [min ?? 0, max ?? 1],
        },
        y: {
          range: (_u, min, max): uPlot.Range.MinMax => [
            this.spec.yMin ?? Math.min(0, min ?? 0),
            this.spec.yMax ?? ((max ?? 0) > 0 ? (max as number) * 1.1 : 1),
          ],
        },
      },
      axes: [axis, yAxis],
      series: [
        {},
        ...this.spec.series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 1.5,
          spanGaps: false,
          paths: this.spec.stepped ? uPlot.paths.stepped?.({ align: 1 }) : undefined,
          value: (_u: uPlot, v: number | null) => (v === null ? "–" : s.format ? s.format(v) : String(v)),
        })),
      ],
    };
    this.plot = new uPlot(options, this.buffer.columns() as uPlot.AlignedData, holder);
  }

  private resize(): void {
    const holder = this.element.querySelector<HTMLElement>(".chart-body");
    if (this.plot && holder && holder.clientWidth > 0) {
      this.plot.setSize({ width: holder.clientWidth, height: this.spec.height ?? 180 });
    }
  }

  private schedule(): void {
    if (this.frame || !this.plot) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.plot?.setData(this.buffer.columns() as uPlot.AlignedData);
    });
  }
}

export const PALETTE = {
  waiting: "#e8a33d",
  running: "#3d8fe8",
  p50: "#3dba7a",
  p99: "#e5534b",
  mean: "#a371f7",
  cpu: "#3d8fe8",
  gpu: "#e8a33d",
  quota: "#a371f7",
};
