// One node: which cores / GPUs each action holds (a live map), cached services, health, drain.

import { LiveChart, PALETTE } from "../charts";
import { h, replace, setText } from "../dom";
import { fmtSeconds } from "../format";
import type { NodeView } from "../types";

/** A stable colour per action id, so one action keeps its colour across updates. */
export function actionColour(actionId: number): string {
  const hue = (actionId * 137.508) % 360;
  return `hsl(${hue.toFixed(0)} 65% 55%)`;
}

/** Owner of every core / GPU slot: slot index → action id (or null when free). */
export function slotOwners(total: number, held: Array<{ action: number; slots: number[] }>): (number | null)[] {
  const owners: (number | null)[] = Array.from({ length: Math.max(0, total) }, () => null);
  for (const { action, slots } of held) {
    for (const slot of slots) if (slot >= 0 && slot < owners.length) owners[slot] = action;
  }
  return owners;
}

export class NodeCard {
  readonly element: HTMLElement;
  private readonly header: HTMLElement;
  private readonly coreMap: HTMLElement;
  private readonly gpuMap: HTMLElement;
  private readonly services: HTMLElement;
  private readonly health: HTMLElement;
  private readonly button: HTMLButtonElement | null;
  private readonly chart: LiveChart;
  private node: NodeView;

  constructor(
    node: NodeView,
    canOperate: boolean,
    private readonly onDrain: (node: NodeView, drain: boolean) => Promise<void>,
  ) {
    this.node = node;
    this.header = h("h3", {});
    this.health = h("span", { class: "health" });
    this.coreMap = h("div", { class: "slot-map", "aria-label": "cores" });
    this.gpuMap = h("div", { class: "slot-map gpu", "aria-label": "GPUs" });
    this.services = h("ul", { class: "services" });
    this.button = canOperate
      ? h("button", { type: "button", class: "btn", onclick: () => void this.toggleDrain() })
      : null;
    this.chart = new LiveChart({
      title: "Held over time",
      height: 120,
      maxPoints: 600,
      stepped: true,
      series: [
        { label: "cores held", color: PALETTE.cpu },
        { label: "GPUs held", color: PALETTE.gpu },
      ],
    });
    this.element = h(
      "article",
      { class: "panel node-card", "data-node": node.id },
      h("div", { class: "row" }, this.header, this.health, this.button),
      h("div", { class: "label" }, "Cores"),
      this.coreMap,
      h("div", { class: "label" }, "GPUs and cached services"),
      this.gpuMap,
      this.services,
      this.chart.element,
    );
    this.update(node);
  }

  update(node: NodeView): void {
    this.node = node;
    replace(
      this.header,
      node.name,
      " ",
      h("span", { class: `badge status-${node.status}` }, node.status),
      node.draining && node.status !== "draining" ? h("span", { class: "badge draining" }, "draining") : null,
    );
    setText(
      this.health,
      node.heartbeat_age_s === null ? "no heartbeat yet" : `heartbeat ${fmtSeconds(node.heartbeat_age_s)} ago`,
    );
    this.health.className = `health ${node.heartbeat_age_s !== null && node.heartbeat_age_s < 30 ? "ok" : "stale"}`;
    if (this.button) setText(this.button, node.draining ? "Resume node" : "Drain node");
    this.renderSlots(this.coreMap, node.cores_total, node.allocations.map((a) => ({ action: a.action, slots: a.cores })));
    this.renderSlots(this.gpuMap, node.gpus_total, node.allocations.map((a) => ({ action: a.action, slots: a.gpus })));
    replace(
      this.services,
      ...node.services.map((s) =>
        h("li", {}, `GPU ${s.gpu ?? "?"}: ${s.name} `, h("span", { class: `badge svc-${s.state}` }, s.state)),
      ),
    );
    if (!node.services.length && node.gpus_total) replace(this.services, h("li", { class: "muted" }, "no services cached"));
    this.chart.push(node.t ?? Date.now() / 1000, [node.cores_used, node.gpus_total ? node.gpus_used : null]);
  }

  retheme(): void {
    this.chart.retheme();
  }

  destroy(): void {
    this.chart.destroy();
  }

  private renderSlots(target: HTMLElement, total: number, held: Array<{ action: number; slots: number[] }>): void {
    const owners = slotOwners(total, held);
    if (!owners.length) {
      replace(target, h("span", { class: "muted" }, "none"));
      return;
    }
    replace(
      target,
      ...owners.map((owner, index) =>
        owner === null
          ? h("span", { class: "slot free", title: `#${index} free` })
          : h("a", {
              class: "slot held",
              href: `/actions/${owner}`,
              "data-link": "",
              title: `#${index} held by action ${owner}`,
              style: `background:${actionColour(owner)}`,
            }),
      ),
    );
  }

  private async toggleDrain(): Promise<void> {
    if (!this.button) return;
    this.button.disabled = true;
    try {
      await this.onDrain(this.node, !this.node.draining);
    } finally {
      this.button.disabled = false;
    }
  }
}
