// The Rollouts page's tables (heddle §4–§5, darts §4): LLM workers, trajectories, DARTS groups.

import { h } from "../dom";
import { fmtCount, fmtPercent, fmtSeconds } from "../format";
import type { GroupRow, LlmWorkerRow, RouterGroupRow, TrajectoryRow } from "../planeTypes";
import { DataTable, statusBadge } from "./table";

/** Each worker's share of the predicted remaining tokens (Heddle's load), 0 when none is left. */
export function loadShares(workers: LlmWorkerRow[]): Map<string, number> {
  const total = workers.reduce((sum, w) => sum + w.predicted_remaining_tokens, 0);
  return new Map(workers.map((w) => [w.name, total > 0 ? w.predicted_remaining_tokens / total : 0]));
}

/** A router-only field: its value, or "n/r" when the router's state stream was not readable. */
export function routerField(value: number | null, reported: boolean): string {
  if (value === null) return reported ? "–" : "n/r";
  return String(value);
}

export function workersTable(): DataTable<LlmWorkerRow> & { update(rows: LlmWorkerRow[]): void } {
  let shares = new Map<string, number>();
  const table = new DataTable<LlmWorkerRow>(
    [
      { header: "Worker", cell: (w) => h("span", { "data-worker": w.name }, w.name) },
      { header: "Trajectories", cell: (w) => h("span", { "data-worker-trajectories": w.name }, fmtCount(w.trajectories)), className: "num" },
      { header: "Generating", cell: (w) => fmtCount(w.generating), className: "num" },
      { header: "In tool call", cell: (w) => fmtCount(w.tool_call), className: "num" },
      { header: "Waiting", cell: (w) => fmtCount(w.pending), className: "num" },
      { header: "Tokens so far", cell: (w) => fmtCount(w.tokens), className: "num" },
      { header: "Predicted remaining", cell: (w) => fmtCount(w.predicted_remaining_tokens), className: "num" },
      { header: "Running (engine)", cell: (w) => reportedCount(w, w.running_requests), className: "num" },
      { header: "Queued (engine)", cell: (w) => h("span", { "data-worker-queued": w.name }, reportedCount(w, w.queued_requests)), className: "num" },
      {
        header: "KV use",
        cell: (w) =>
          h(
            "span",
            { "data-worker-kv": w.name, title: w.kv_used_tokens == null ? "" : `${fmtCount(w.kv_used_tokens)} tokens` },
            w.kv_usage == null ? notReported(w) : fmtPercent(w.kv_usage),
          ),
        className: "num",
      },
      {
        header: "Load share",
        cell: (w) => {
          const share = shares.get(w.name) ?? 0;
          return h(
            "span",
            { class: "fill-bar fill-ok", title: fmtPercent(share) },
            h("span", { class: "fill-bar-inner", style: `width: ${(share * 100).toFixed(1)}%` }),
            h("span", { class: "fill-bar-text" }, fmtPercent(share)),
          );
        },
      },
    ],
    "No trajectory is placed on an LLM worker right now.",
  );
  return Object.assign(table, {
    update(rows: LlmWorkerRow[]) {
      shares = loadShares(rows);
      table.render(rows);
    },
  });
}

function notReported(w: LlmWorkerRow): string {
  return w.reported_at == null ? "not reported" : "–";
}

function reportedCount(w: LlmWorkerRow, value: number | null | undefined): string {
  return value == null ? notReported(w) : fmtCount(value);
}

export function trajectoriesTable(reported: () => boolean): DataTable<TrajectoryRow> {
  return new DataTable<TrajectoryRow>(
    [
      { header: "Trajectory", cell: (t) => h("span", { "data-trajectory": t.id }, `#${t.id}`) },
      { header: "Job", cell: (t) => h("a", { href: `/jobs/${t.job}`, "data-link": "" }, String(t.job)) },
      { header: "Step", cell: (t) => String(t.training_step), className: "num" },
      { header: "Group / sample", cell: (t) => (t.group ? `${t.group} / ${t.sample}` : "–") },
      { header: "Status", cell: (t) => statusBadge(t.status) },
      { header: "Worker", cell: (t) => t.worker ?? h("span", { class: "muted" }, "unplaced") },
      { header: "Turns", cell: (t) => fmtCount(t.steps), className: "num" },
      { header: "Tokens", cell: (t) => fmtCount(t.tokens), className: "num" },
      {
        header: "Predicted remaining",
        cell: (t) => h("span", { "data-predicted": t.id }, fmtCount(t.predicted_remaining_tokens)),
        className: "num",
      },
      { header: "Priority", cell: (t) => routerField(t.priority, reported()), className: "num" },
      { header: "Migrations", cell: (t) => routerField(t.migrations, reported()), className: "num" },
      { header: "Queueing", cell: (t) => fmtSeconds(t.queueing_s) },
      { header: "Generation", cell: (t) => fmtSeconds(t.generation_s) },
      { header: "Tools", cell: (t) => fmtSeconds(t.tool_s) },
    ],
    "No trajectories match.",
  );
}

export function groupsTable(): DataTable<GroupRow> {
  return new DataTable<GroupRow>(
    [
      { header: "Job", cell: (g) => String(g.job), className: "num" },
      { header: "Step", cell: (g) => String(g.training_step), className: "num" },
      { header: "Group", cell: (g) => h("span", { "data-group": g.group }, g.group) },
      { header: "Samples", cell: (g) => fmtCount(g.samples), className: "num" },
      { header: "Running", cell: (g) => fmtCount(g.running), className: "num" },
      { header: "Kept (finished)", cell: (g) => fmtCount(g.finished), className: "num" },
      { header: "Pruned (aborted)", cell: (g) => h("span", { "data-pruned": g.group }, fmtCount(g.pruned)), className: "num" },
      { header: "Failed", cell: (g) => fmtCount(g.failed), className: "num" },
    ],
    "No DARTS groups yet.",
  );
}

export function routerGroupsTable(): DataTable<RouterGroupRow> {
  return new DataTable<RouterGroupRow>(
    [
      { header: "Group", cell: (g) => h("span", { "data-router-group": g.group }, g.group) },
      { header: "Job", cell: (g) => g.job ?? "–", className: "num" },
      { header: "Prompts", cell: (g) => fmtCount(g.prompts), className: "num" },
      { header: "Candidates", cell: (g) => fmtCount(g.candidates), className: "num" },
      { header: "Decoding", cell: (g) => fmtCount(g.running), className: "num" },
      { header: "Finished", cell: (g) => fmtCount(g.finished), className: "num" },
      { header: "Aborted (pruned)", cell: (g) => h("span", { "data-router-pruned": g.group }, fmtCount(g.aborted)), className: "num" },
      { header: "Last change", cell: (g) => (g.at ? new Date(g.at * 1000).toISOString().slice(11, 19) : "–") },
    ],
    "No group rollout through the router in its newest state entries.",
  );
}
