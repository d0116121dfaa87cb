// Overview: every pool, live — queue, oldest wait, ACT p50/p99/mean and utilisation over time.

import { apiGet } from "../api";
import { PoolPanel } from "../components/poolPanel";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import type { OverviewResponse, PoolEvent } from "../types";

export function overviewPage(ctx: PageContext): Page {
  const body = h("div", { class: "pool-grid" }, h("p", { class: "muted" }, "Loading pools…"));
  const element = h("div", { class: "page" }, h("h1", {}, "Overview"), body);
  const panels = new Map<string, PoolPanel>();
  const unsubscribers: Array<() => void> = [];

  async function load(): Promise<void> {
    const data = await apiGet<OverviewResponse>("/overview");
    if (!data.pools.length) {
      replace(body, h("p", { class: "muted" }, "No resource pools yet: start an agent or the demo."));
      return;
    }
    for (const snapshot of data.pools) {
      let panel = panels.get(snapshot.pool);
      if (!panel) {
        panel = new PoolPanel(snapshot.pool, { link: true });
        panels.set(snapshot.pool, panel);
        const target = panel;
        unsubscribers.push(
          ctx.live.subscribe(`pool:${snapshot.pool}`, (d) => target.update(d as PoolEvent)),
        );
      }
      panel.reset(data.history[snapshot.pool] ?? [], snapshot);
    }
    replace(body, ...[...panels.values()].map((p) => p.element));
  }

  void load();
  const stopResume = ctx.live.onResume(() => void load());
  return {
    element,
    retheme: () => panels.forEach((p) => p.retheme()),
    destroy() {
      stopResume();
      unsubscribers.forEach((u) => u());
      panels.forEach((p) => p.destroy());
    },
  };
}
