// Pool and node: the pool's live panel, then every node's allocation map, services and health.

import { apiGet, apiPost } from "../api";
import { NodeCard } from "../components/nodeCard";
import { PoolPanel } from "../components/poolPanel";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import type { NodeView, PoolDetail, PoolEvent } from "../types";

export function poolPage(ctx: PageContext): Page {
  const poolName = ctx.route.params.pool;
  const panel = new PoolPanel(poolName);
  const nodesBox = h("div", { class: "node-grid" }, h("p", { class: "muted" }, "Loading nodes…"));
  const notice = h("p", { class: "notice", role: "status" });
  const element = h(
    "div",
    { class: "page" },
    h("h1", {}, `Pool ${poolName}`),
    panel.element,
    h("h2", {}, "Nodes"),
    notice,
    nodesBox,
  );
  const cards = new Map<number, NodeCard>();
  const unsubscribers: Array<() => void> = [
    ctx.live.subscribe(`pool:${poolName}`, (d) => panel.update(d as PoolEvent)),
  ];
  const canOperate = ctx.me.role === "admin";

  async function setDraining(node: NodeView, drain: boolean): Promise<void> {
    try {
      const updated = await apiPost<NodeView>(`/nodes/${node.id}/${drain ? "drain" : "resume"}`);
      cards.get(node.id)?.update(updated);
      notice.textContent = `${updated.name} ${drain ? "is draining" : "resumed"}`;
    } catch (error) {
      notice.textContent = String((error as Error).message);
    }
  }

  async function load(): Promise<void> {
    const data = await apiGet<PoolDetail>(`/pools/${encodeURIComponent(poolName)}`);
    panel.reset(data.history, data.pool);
    for (const node of data.nodes) {
      const existing = cards.get(node.id);
      if (existing) {
        existing.update(node);
        continue;
      }
      const card = new NodeCard(node, canOperate, setDraining);
      cards.set(node.id, card);
      unsubscribers.push(ctx.live.subscribe(`node:${node.id}`, (d) => card.update(d as NodeView)));
    }
    if (!cards.size) replace(nodesBox, h("p", { class: "muted" }, "No nodes registered in this pool."));
    else replace(nodesBox, ...[...cards.values()].map((c) => c.element));
  }

  void load().catch((error: Error) => replace(nodesBox, h("p", { class: "error" }, error.message)));
  const stopResume = ctx.live.onResume(() => void load());
  return {
    element,
    retheme() {
      panel.retheme();
      cards.forEach((c) => c.retheme());
    },
    destroy() {
      stopResume();
      unsubscribers.forEach((u) => u());
      panel.destroy();
      cards.forEach((c) => c.destroy());
    },
  };
}
