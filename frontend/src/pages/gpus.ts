// GPU map: every GPU node's chunks and resident services, per-service queue and ACT, live.

import "../planes.css";
import { apiGet } from "../api";
import { CELL_STATES, gpuNodeCard, missingNotice, serviceTable, STATE_MEANING } from "../components/gpuMap";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import type { GpuMap, GpuService } from "../planeTypes";

/** One map from the per-pool maps the live topics carry: nodes side by side, services by name. */
export function mergeMaps(maps: GpuMap[]): GpuMap {
  const services = new Map<string, GpuService>();
  for (const map of maps) for (const service of map.services) services.set(service.name, service);
  return {
    t: Math.max(0, ...maps.map((m) => m.t)),
    pools: maps.flatMap((m) => m.pools),
    nodes: maps.flatMap((m) => m.nodes),
    services: [...services.values()].sort((a, b) => a.name.localeCompare(b.name)),
    missing: maps[0]?.missing ?? [],
  };
}

export function gpusPage(ctx: PageContext): Page {
  const pool = ctx.route.query.get("pool") || null;
  const nodesBox = h("div", { class: "gpu-nodes" }, h("p", { class: "muted" }, "Loading GPU nodes…"));
  const services = serviceTable();
  const missingBox = h("div", {});
  const scope = h("p", { class: "muted" });
  const element = h(
    "div",
    { class: "page plane-page" },
    h("h1", {}, "GPU map"),
    scope,
    h(
      "p",
      { class: "gpu-legend" },
      ...CELL_STATES.map((state) => h("span", { class: `legend-item state-${state}`, title: STATE_MEANING[state] }, state)),
    ),
    nodesBox,
    h("h2", {}, "Services"),
    services.element,
    missingBox,
  );
  const byPool = new Map<string, GpuMap>();
  const unsubscribers = new Map<string, () => void>();

  function render(): void {
    const map = mergeMaps([...byPool.values()]);
    if (!map.nodes.length) replace(nodesBox, h("p", { class: "muted" }, "No GPU nodes registered yet: start a GPU agent."));
    else replace(nodesBox, ...map.nodes.map(gpuNodeCard));
    services.render(map.services);
    replace(missingBox, map.missing.length ? missingNotice(map.missing) : null);
  }

  async function load(): Promise<void> {
    const data = await apiGet<GpuMap>("/gpus", pool ? { pool } : undefined);
    byPool.clear();
    for (const name of data.pools) {
      byPool.set(name, { ...data, pools: [name], nodes: data.nodes.filter((n) => n.pool === name) });
      if (!unsubscribers.has(name)) {
        unsubscribers.set(
          name,
          ctx.live.subscribe(`gpus:${name}`, (event) => {
            byPool.set(name, event as GpuMap);
            render();
          }),
        );
      }
    }
    replace(
      scope,
      pool
        ? h("span", {}, `Pool ${pool} · `, h("a", { href: "/gpus", "data-link": "" }, "all GPU pools"))
        : data.pools.length
          ? h(
              "span",
              {},
              "GPU pools: ",
              ...data.pools.flatMap((name, index) => [
                index ? ", " : null,
                h("a", { href: `/gpus?pool=${encodeURIComponent(name)}`, "data-link": "", "data-pool-filter": name }, name),
              ]),
            )
          : "No GPU pools.",
    );
    render();
  }

  void load().catch((error: Error) => replace(nodesBox, h("p", { class: "error" }, error.message)));
  const stopResume = ctx.live.onResume(() => void load());
  return {
    element,
    destroy() {
      stopResume();
      unsubscribers.forEach((u) => u());
    },
  };
}
