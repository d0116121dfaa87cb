// A buffer's numbers (artos §4.1–§4.2): fill level, counters, each trigger's firings; and the
// elastic actors of its workflows (§4.3): state, restored vs cold starts, start-up waits.

import { type Child, h } from "../dom";
import { fmtCount, fmtPercent, fmtSeconds, fmtTime } from "../format";
import type { BufferActorView, BufferSnapshotView, BufferSummary, TriggerView } from "../planeTypes";
import { DataTable } from "./table";

/** Firings per minute of `trigger` over the recorded history (null with fewer than two points). */
export function firingRate(history: BufferSnapshotView[], trigger: string): number | null {
  const points = history.filter((s) => typeof s.firings[trigger] === "number");
  if (points.length < 2) return null;
  const first = points[0];
  const last = points[points.length - 1];
  const seconds = last.t - first.t;
  if (seconds <= 0) return null;
  return ((last.firings[trigger] - first.firings[trigger]) / seconds) * 60;
}

/** "ok" below 80 % full, "high" up to 100 %, "full" at capacity. */
export function fillLevel(fill: number): "ok" | "high" | "full" {
  if (fill >= 1) return "full";
  return fill >= 0.8 ? "high" : "ok";
}

export function fillBar(fill: number | null): HTMLElement {
  if (fill === null) return h("span", { class: "muted" }, "no snapshot yet");
  const clipped = Math.max(0, Math.min(1, fill));
  return h(
    "span",
    { class: `fill-bar fill-${fillLevel(fill)}`, title: fmtPercent(fill), "data-fill": fill.toFixed(3) },
    h("span", { class: "fill-bar-inner", style: `width: ${(clipped * 100).toFixed(1)}%` }),
    h("span", { class: "fill-bar-text" }, fmtPercent(fill)),
  );
}

function stat(label: string, value: Child, key: string): HTMLElement {
  return h("div", { class: "stat" }, h("div", { class: "stat-label" }, label), h("div", { class: "stat-value", "data-stat": key }, value));
}

export function bufferStats(buffer: BufferSummary, ageSeconds: number | null): HTMLElement {
  const latest = buffer.latest;
  return h(
    "div",
    { class: "stats" },
    stat("fill", fillBar(latest ? latest.fill : null), "fill"),
    stat("held / capacity", latest ? `${fmtCount(latest.held)} / ${fmtCount(buffer.capacity)}` : `– / ${fmtCount(buffer.capacity)}`, "held"),
    stat("complete steps", fmtCount(latest?.complete), "complete"),
    stat("actors written", fmtCount(latest?.actors), "actors"),
    stat("steps written", fmtCount(latest?.steps_written), "written"),
    stat("dropped", fmtCount(latest?.steps_dropped), "dropped"),
    stat("evicted", fmtCount(latest?.steps_evicted), "evicted"),
    stat("samples", fmtCount(latest?.samples), "samples"),
    stat("snapshot age", fmtSeconds(ageSeconds), "age"),
  );
}

export function triggerTable(history: () => BufferSnapshotView[]): DataTable<TriggerView> {
  return new DataTable<TriggerView>(
    [
      { header: "Trigger", cell: (t) => h("span", { "data-trigger": t.name }, t.name) },
      { header: "Kind", cell: (t) => t.kind },
      { header: "Params", cell: (t) => h("code", {}, JSON.stringify(t.params)) },
      { header: "Target", cell: (t) => t.target || h("span", { class: "muted" }, "counted") },
      { header: "Enabled", cell: (t) => (t.enabled ? "yes" : "no") },
      { header: "Firings", cell: (t) => h("span", { "data-firings": t.name }, fmtCount(t.firings)), className: "num" },
      {
        header: "Per minute",
        cell: (t) => {
          const rate = firingRate(history(), t.name);
          return rate === null ? "–" : rate.toFixed(rate < 10 ? 2 : 0);
        },
      },
    ],
    "No triggers on this buffer.",
  );
}

export function bufferListTable(): DataTable<BufferSummary> {
  return new DataTable<BufferSummary>(
    [
      { header: "Buffer", cell: (b) => h("a", { href: `/buffers/${b.id}`, "data-link": "", "data-buffer-link": b.name }, b.name) },
      { header: "Job", cell: (b) => h("a", { href: `/jobs/${b.job.id}`, "data-link": "" }, b.job.name) },
      { header: "Fill", cell: (b) => fillBar(b.latest ? b.latest.fill : null) },
      { header: "Held / capacity", cell: (b) => `${fmtCount(b.latest?.held)} / ${fmtCount(b.capacity)}` },
      { header: "Samples", cell: (b) => fmtCount(b.latest?.samples), className: "num" },
      { header: "Sampler", cell: (b) => b.sampler },
      { header: "Sync", cell: (b) => b.sync_mode },
      { header: "Eviction", cell: (b) => b.eviction },
    ],
    "No buffers defined yet.",
  );
}

const ACTOR_STATE_LABELS: Record<BufferActorView["state"], string> = {
  checkpointed: "checkpointed",
  prewarming: "pre-warming",
  prewarmed: "pre-warmed",
  running: "running",
  failed: "failed",
};

/** The words the page uses for an actor's state (an unknown one shown as it came). */
export function actorStateLabel(state: string): string {
  return ACTOR_STATE_LABELS[state as BufferActorView["state"]] ?? state;
}

/** "restored / cold" start counts, with the restored share when there was any start. */
export function startSplit(actor: Pick<BufferActorView, "restored" | "cold">): string {
  const total = actor.restored + actor.cold;
  const split = `${fmtCount(actor.restored)} / ${fmtCount(actor.cold)}`;
  return total ? `${split} (${fmtPercent(actor.restored / total)} restored)` : split;
}

/** How many actors are in each state, in the order the states are listed above. */
export function actorStateCounts(actors: BufferActorView[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const actor of actors) counts.set(actor.state, (counts.get(actor.state) ?? 0) + 1);
  const known = Object.keys(ACTOR_STATE_LABELS).filter((s) => counts.has(s));
  const other = [...counts.keys()].filter((s) => !(s in ACTOR_STATE_LABELS)).sort();
  return [...known, ...other].map((s) => [actorStateLabel(s), counts.get(s) ?? 0]);
}

export function actorTable(): DataTable<BufferActorView> {
  const key = (a: BufferActorView): string => `${a.workflow}/${a.actor}`;
  return new DataTable<BufferActorView>(
    [
      { header: "Workflow", cell: (a) => a.workflow },
      { header: "Actor", cell: (a) => h("span", { "data-actor": key(a) }, a.actor) },
      {
        header: "State",
        cell: (a) => h("span", { class: `badge actor-${a.state}`, "data-actor-state": key(a) }, actorStateLabel(a.state)),
      },
      { header: "Invocations", cell: (a) => fmtCount(a.invocations), className: "num" },
      { header: "Restored / cold", cell: (a) => h("span", { "data-actor-starts": key(a) }, startSplit(a)) },
      { header: "Last start-up wait", cell: (a) => fmtSeconds(a.last_startup_wait_s), className: "num" },
      { header: "Last restore", cell: (a) => fmtSeconds(a.last_restore_s), className: "num" },
      { header: "Wait p50", cell: (a) => fmtSeconds(a.startup_wait_p50_s), className: "num" },
      {
        header: "Wait p99",
        cell: (a) => h("span", { "data-actor-p99": key(a) }, fmtSeconds(a.startup_wait_p99_s)),
        className: "num",
      },
      { header: "Reported", cell: (a) => fmtTime(a.reported_at) },
    ],
    "No workflow has reported actors for this buffer.",
  );
}
