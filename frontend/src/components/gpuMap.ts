// The GPU map (arl-tangram §5.3): per node a row of GPUs, coloured by state, with the services
// resident on each buddy chunk drawn as bars under the GPUs they span; per service its queue and ACT.

import { h } from "../dom";
import { fmtCount, fmtSeconds } from "../format";
import type { CachedInstance, GpuCell, GpuNode, GpuService } from "../planeTypes";
import { DataTable } from "./table";

export const CELL_STATES: GpuCell["state"][] = ["busy", "restoring", "warm", "free"];

/** What each GPU state means (the legend's tooltips). */
export const STATE_MEANING: Record<GpuCell["state"], string> = {
  busy: "a request runs here with its service resident",
  restoring: "a request holds this GPU but its service was not resident at the agent's last report: it is restored before running",
  warm: "idle, a service resident (a request for it starts without a restore)",
  free: "idle, nothing resident",
};

/** A stable colour per service name, so a service keeps its colour on every node. */
export function serviceColour(name: string): string {
  let hash = 2166136261; // FNV-1a, then the golden angle spreads neighbouring hashes apart
  for (const char of name) hash = Math.imul(hash ^ char.charCodeAt(0), 16777619) >>> 0;
  return `hsl(${((hash % 1000) * 137.508) % 360 | 0} 55% 50%)`;
}

/** Lay resident instances out in lanes so two that overlap (different chunk sizes sharing a GPU's
 * memory) never draw over each other; an instance goes to the first lane it fits in. */
export function cacheLanes(cache: CachedInstance[]): CachedInstance[][] {
  const lanes: CachedInstance[][] = [];
  const sorted = [...cache].sort((a, b) => a.start - b.start || b.size - a.size);
  for (const instance of sorted) {
    const end = instance.start + instance.size;
    const lane = lanes.find((row) => row.every((o) => o.start + o.size <= instance.start || end <= o.start));
    if (lane) lane.push(instance);
    else lanes.push([instance]);
  }
  return lanes;
}

/** How many GPUs are in each state (the node's summary line). */
export function stateCounts(cells: GpuCell[]): Record<GpuCell["state"], number> {
  const counts = { busy: 0, restoring: 0, warm: 0, free: 0 };
  for (const cell of cells) counts[cell.state] += 1;
  return counts;
}

function cellTitle(cell: GpuCell): string {
  const parts = [`GPU ${cell.index}: ${cell.state}`];
  if (cell.action !== null) parts.push(`action ${cell.action}${cell.service ? ` (${cell.service})` : ""}`);
  if (cell.warm.length) parts.push(`resident: ${cell.warm.join(", ")}`);
  return parts.join(" · ");
}

export function gpuNodeCard(node: GpuNode): HTMLElement {
  const columns = Math.max(1, node.cells.length);
  const grid = h("div", {
    class: "gpu-grid",
    style: `grid-template-columns: repeat(${columns}, minmax(34px, 1fr))`,
    "aria-label": `GPUs of ${node.name}`,
  });
  for (const cell of node.cells) {
    const attrs = {
      class: `gpu-cell state-${cell.state}`,
      "data-gpu": cell.index,
      "data-state": cell.state,
      title: cellTitle(cell),
      style: `grid-row: 1; grid-column: ${cell.index + 1}`,
    };
    grid.appendChild(
      cell.action !== null
        ? h("a", { ...attrs, href: `/actions/${cell.action}`, "data-link": "" }, String(cell.index))
        : h("span", attrs, String(cell.index)),
    );
  }
  cacheLanes(node.cache).forEach((lane, laneIndex) => {
    for (const instance of lane) {
      grid.appendChild(
        h(
          "span",
          {
            class: "chunk",
            "data-chunk": `${instance.service}@${instance.start}+${instance.size}`,
            title: `${instance.service} resident on GPUs ${instance.start}–${instance.start + instance.size - 1}` +
              (instance.idle_s !== null ? `, idle ${fmtSeconds(instance.idle_s)}` : ""),
            style:
              `grid-row: ${laneIndex + 2}; grid-column: ${instance.start + 1} / span ${instance.size};` +
              ` background: ${serviceColour(instance.service)}`,
          },
          instance.service,
        ),
      );
    }
  });
  const counts = stateCounts(node.cells);
  const failures = Object.entries(node.hosted).filter(([, entry]) => entry.error);
  return h(
    "article",
    { class: "panel gpu-node", "data-gpu-node": node.name },
    h(
      "div",
      { class: "row" },
      h("h3", {}, node.name, " ", h("span", { class: `badge status-${node.status}` }, node.status)),
      h("a", { href: `/pools/${encodeURIComponent(node.pool)}`, "data-link": "", class: "muted" }, `pool ${node.pool}`),
      h(
        "span",
        { class: `health ${node.heartbeat_age_s !== null && node.heartbeat_age_s < 30 ? "ok" : "stale"}` },
        node.heartbeat_age_s === null ? "no heartbeat yet" : `heartbeat ${fmtSeconds(node.heartbeat_age_s)} ago`,
      ),
    ),
    h(
      "div",
      { class: "gpu-legend", "data-counts": "" },
      ...CELL_STATES.map((state) =>
        h("span", { class: `legend-item state-${state}`, "data-count": state, title: STATE_MEANING[state] }, `${counts[state]} ${state}`),
      ),
    ),
    node.cells.length ? grid : h("p", { class: "muted" }, "this node registered no GPUs"),
    node.cache.length ? null : h("p", { class: "muted" }, "no service resident (cold cache)"),
    failures.length
      ? h("ul", { class: "error" }, ...failures.map(([name, entry]) => h("li", {}, `${name}: ${entry.error}`)))
      : null,
  );
}

function fmtAct(service: GpuService): string {
  if (!service.act.n) return "–";
  return `${fmtSeconds(service.act.p50)} / ${fmtSeconds(service.act.p99)}`;
}

export function serviceTable(): DataTable<GpuService> {
  return new DataTable<GpuService>(
    [
      { header: "Service", cell: (s) => h("span", { class: "svc-name", style: `border-color: ${serviceColour(s.name)}` }, s.name) },
      { header: "Backend", cell: (s) => `${s.backend} · ${s.task}` },
      { header: "Chunk sizes", cell: (s) => s.allowed_dop.join(", ") },
      { header: "Queued", cell: (s) => h("span", { "data-svc-queued": s.name }, fmtCount(s.queued)), className: "num" },
      { header: "Running", cell: (s) => fmtCount(s.running), className: "num" },
      { header: "ACT p50 / p99", cell: (s) => h("span", { "data-svc-act": s.name }, fmtAct(s)) },
      { header: "Completions", cell: (s) => fmtCount(s.act.n), className: "num" },
      { header: "Mean wait to schedule", cell: (s) => fmtSeconds(s.queueing_mean_s) },
      { header: "Mean on agent (restore + run)", cell: (s) => fmtSeconds(s.execution_mean_s) },
      {
        header: "Restores",
        cell: (s) =>
          h("span", { "data-svc-restores": s.name }, `${fmtCount(s.agent.restores)} / ${fmtCount(s.agent.reported)}`),
        className: "num",
      },
      { header: "Mean restore", cell: (s) => fmtSeconds(s.agent.restore_mean_s) },
      { header: "Mean execute", cell: (s) => fmtSeconds(s.agent.execute_mean_s) },
      {
        header: "Warm on",
        cell: (s) =>
          s.warm.length ? s.warm.map((w) => `${w.node} [${w.start}..${w.start + w.size - 1}]`).join(", ") : h("span", { class: "muted" }, "cold"),
      },
    ],
    "No GPU services registered.",
  );
}

/** What the page cannot show because nothing stores it (said, not guessed). */
export function missingNotice(missing: string[]): HTMLElement {
  return h(
    "aside",
    { class: "missing", "data-missing": "" },
    h("strong", {}, `Not recorded (${missing.length}): `),
    h("ul", {}, ...missing.map((line) => h("li", {}, line))),
  );
}
