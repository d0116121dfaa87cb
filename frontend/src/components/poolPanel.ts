// One pool's live panel: headline numbers and three charts (queue, ACT, utilisation).

import { LiveChart, PALETTE } from "../charts";
import { h, setText } from "../dom";
import { fmtCount, fmtPercent, fmtSeconds } from "../format";
import type { PoolEvent, PoolSnapshot, RollupPoint } from "../types";

/** Merge a (possibly partial) live event into the last full snapshot of the pool. */
export function mergePoolEvent(previous: PoolSnapshot | null, event: PoolEvent, pool: string): PoolSnapshot {
  const base: PoolSnapshot = previous ?? {
    t: 0,
    pool,
    waiting: 0,
    running: 0,
    oldest_wait_s: null,
    act: { p50: null, p99: null, mean: null, n: 0 },
    util: { cpu: null, gpu: null, quota: null },
  };
  return {
    ...base,
    ...event,
    t: event.t ?? event.at ?? Date.now() / 1000,
    pool,
    act: event.act ?? base.act,
    util: event.util ?? base.util,
    oldest_wait_s: event.oldest_wait_s !== undefined ? event.oldest_wait_s : base.oldest_wait_s,
  } as PoolSnapshot;
}

export function snapshotFromRollup(pool: string, point: RollupPoint): PoolSnapshot {
  return {
    t: point.t,
    pool,
    waiting: point.waiting,
    running: point.running,
    oldest_wait_s: point.oldest_wait_s,
    act: { p50: point.act_p50, p99: point.act_p99, mean: point.act_mean, n: 0 },
    util: { cpu: point.util_cpu, gpu: point.util_gpu, quota: point.util_quota },
  };
}

export class PoolPanel {
  readonly element: HTMLElement;
  private readonly stats: Record<string, HTMLElement> = {};
  private readonly charts: LiveChart[];
  private readonly queueChart: LiveChart;
  private readonly actChart: LiveChart;
  private readonly utilChart: LiveChart;
  private readonly headReason: HTMLElement;
  private last: PoolSnapshot | null = null;

  constructor(
    readonly pool: string,
    options: { link?: boolean } = {},
  ) {
    const stat = (key: string, label: string) => {
      const value = h("span", { class: "stat-value", "data-stat": key }, "–");
      this.stats[key] = value;
      return h("div", { class: "stat" }, h("span", { class: "stat-label" }, label), value);
    };
    this.queueChart = new LiveChart({
      title: "Queue",
      series: [
        { label: "waiting", color: PALETTE.waiting },
        { label: "running", color: PALETTE.running },
      ],
    });
    this.actChart = new LiveChart({
      title: "Action completion time",
      axisFormat: fmtSeconds,
      series: [
        { label: "p50", color: PALETTE.p50, format: fmtSeconds },
        { label: "p99", color: PALETTE.p99, format: fmtSeconds },
        { label: "mean", color: PALETTE.mean, format: fmtSeconds },
      ],
    });
    this.utilChart = new LiveChart({
      title: "Utilisation",
      yMin: 0,
      yMax: 1,
      axisFormat: fmtPercent,
      series: [
        { label: "cores", color: PALETTE.cpu, format: fmtPercent },
        { label: "GPUs", color: PALETTE.gpu, format: fmtPercent },
        { label: "quotas", color: PALETTE.quota, format: fmtPercent },
      ],
    });
    this.charts = [this.queueChart, this.actChart, this.utilChart];
    this.headReason = h("p", { class: "wait-reason head-reason", "data-head-reason": pool });
    const title = options.link
      ? h("a", { href: `/pools/${encodeURIComponent(pool)}`, "data-link": "" }, pool)
      : pool;
    this.element = h(
      "section",
      { class: "panel pool-panel", "data-pool": pool },
      h("h2", {}, "Pool ", title),
      h(
        "div",
        { class: "stats" },
        stat("waiting", "waiting"),
        stat("running", "running"),
        stat("oldest", "oldest waiting"),
        stat("p50", "ACT p50"),
        stat("p99", "ACT p99"),
        stat("mean", "ACT mean"),
        stat("cpu", "cores"),
        stat("gpu", "GPUs"),
        stat("quota", "quotas"),
      ),
      this.headReason,
      h("div", { class: "charts" }, ...this.charts.map((c) => c.element)),
    );
  }

  /** Load history (rollups) then the current snapshot. */
  reset(history: RollupPoint[], current: PoolSnapshot | null): void {
    const rows = history.map((p) => snapshotFromRollup(this.pool, p));
    if (current && (!rows.length || current.t > rows[rows.length - 1].t)) rows.push(current);
    this.queueChart.reset(rows.map((s) => ({ t: s.t, values: [s.waiting, s.running] })));
    this.actChart.reset(rows.map((s) => ({ t: s.t, values: [s.act.p50, s.act.p99, s.act.mean] })));
    this.utilChart.reset(rows.map((s) => ({ t: s.t, values: [s.util.cpu, s.util.gpu, s.util.quota] })));
    if (current) {
      this.last = current;
      this.showNumbers(current);
    }
  }

  /** A live event: a full database snapshot or the scheduler's partial one. */
  update(event: PoolEvent): void {
    const snapshot = mergePoolEvent(this.last, event, this.pool);
    this.last = snapshot;
    this.showNumbers(snapshot);
    if (event.head_wait_reason !== undefined) {
      setText(this.headReason, event.head_wait_reason ? `Head of the queue: ${event.head_wait_reason}` : "");
    }
    this.queueChart.push(snapshot.t, [snapshot.waiting, snapshot.running]);
    if (event.act) this.actChart.push(snapshot.t, [snapshot.act.p50, snapshot.act.p99, snapshot.act.mean]);
    if (event.util) this.utilChart.push(snapshot.t, [snapshot.util.cpu, snapshot.util.gpu, snapshot.util.quota]);
  }

  retheme(): void {
    for (const chart of this.charts) chart.retheme();
  }

  destroy(): void {
    for (const chart of this.charts) chart.destroy();
  }

  private showNumbers(s: PoolSnapshot): void {
    setText(this.stats.waiting, fmtCount(s.waiting));
    setText(this.stats.running, fmtCount(s.running));
    setText(this.stats.oldest, fmtSeconds(s.oldest_wait_s));
    setText(this.stats.p50, fmtSeconds(s.act.p50));
    setText(this.stats.p99, fmtSeconds(s.act.p99));
    setText(this.stats.mean, fmtSeconds(s.act.mean));
    setText(this.stats.cpu, fmtPercent(s.util.cpu));
    setText(this.stats.gpu, fmtPercent(s.util.gpu));
    setText(this.stats.quota, fmtPercent(s.util.quota));
  }
}
