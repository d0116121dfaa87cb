// Rollouts: LLM workers' load, trajectories with predicted remaining length, priority, worker
// and migrations, DARTS groups with their pruning — live. Filters (job, status) live in the URL.

import "../planes.css";
import { apiGet } from "../api";
import { missingNotice } from "../components/gpuMap";
import { histogramBars } from "../components/histogram";
import { groupsTable, routerGroupsTable, trajectoriesTable, workersTable } from "../components/rolloutsView";
import { routerPolicyPanel } from "../components/routerPolicy";
import { LiveChart, PALETTE } from "../charts";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import { fmtCount } from "../format";
import type { RolloutsResponse } from "../planeTypes";
import { replaceQuery } from "../router";

const ENDED = ["finished", "aborted", "failed"];

export const STATUS_CHOICES = ["active", "pending", "generating", "tool_call", "finished", "aborted", "failed"];

export function rolloutsPage(ctx: PageContext): Page {
  let job = ctx.route.query.get("job") ?? "";
  let status = ctx.route.query.get("status") || "active";
  let reported = false;
  const workers = workersTable();
  const routers = routerPolicyPanel(ctx.me.role === "admin");
  const trajectories = trajectoriesTable(() => reported);
  const groups = groupsTable();
  const routerGroups = routerGroupsTable();
  const routerGroupsNote = h("p", { class: "muted" });
  const counts = h("div", { class: "stats" });
  const notice = h("p", { class: "notice", role: "status" }, "Loading rollouts…");
  const missingBox = h("div", {});
  const remaining = h("div", { class: "histogram", "data-remaining-histogram": "" });
  const activity = new LiveChart({
    title: "Trajectories not ended (since this page opened)",
    stepped: true,
    height: 150,
    series: [
      { label: "generating", color: PALETTE.running },
      { label: "in tool call", color: PALETTE.waiting },
      { label: "waiting", color: PALETTE.mean },
    ],
  });
  const jobInput = h("input", { name: "job", type: "text", inputmode: "numeric", placeholder: "all jobs", value: job, size: 8 });
  const statusSelect = h("select", { name: "status" }, ...STATUS_CHOICES.map((s) => h("option", { value: s, selected: s === status }, s)));
  const filters = h(
    "form",
    { class: "filters" },
    h("label", {}, "Job ", jobInput),
    h("label", {}, "Trajectories ", statusSelect),
    h("button", { type: "submit", class: "btn" }, "Apply"),
  );
  const element = h(
    "div",
    { class: "page plane-page" },
    h("h1", {}, "Rollouts"),
    counts,
    h(
      "div",
      { class: "chart-row" },
      activity.element,
      h("figure", { class: "chart" }, h("figcaption", {}, "Predicted remaining tokens of the trajectories not ended"), remaining),
    ),
    h("h2", {}, "LLM workers"),
    workers.element,
    h("h2", {}, "Routers"),
    routers.element,
    h("h2", {}, "Trajectories"),
    filters,
    notice,
    trajectories.element,
    h("h2", {}, "DARTS groups (trajectories the trainer registered)"),
    groups.element,
    h("h2", {}, "DARTS group rollouts through the router"),
    routerGroupsNote,
    routerGroups.element,
    missingBox,
  );

  function show(data: RolloutsResponse): void {
    reported = data.router_fields;
    replace(
      counts,
      ...["pending", "generating", "tool_call", "finished", "aborted", "failed"].map((s) =>
        h(
          "div",
          { class: "stat", title: ENDED.includes(s) ? "ended trajectories are recounted every 10 s" : "exact" },
          h("div", { class: "stat-label" }, s.replace("_", " ")),
          h("div", { class: "stat-value", "data-count": s }, fmtCount(data.counts[s] ?? 0)),
        ),
      ),
      h("div", { class: "stat" }, h("div", { class: "stat-label" }, "unplaced"), h("div", { class: "stat-value", "data-count": "unplaced" }, fmtCount(data.unplaced))),
    );
    workers.update(data.workers);
    routers.render(data.routers);
    trajectories.render(data.trajectories);
    groups.render(data.groups);
    routerGroups.render(data.router_groups ?? []);
    routerGroupsNote.textContent = data.router_groups === null ? "Not reported: no router state stream readable here." : "";
    replace(remaining, ...histogramBars(data.remaining_histogram, "tokens", "No prediction yet."));
    activity.push(data.t, [data.counts.generating ?? 0, data.counts.tool_call ?? 0, data.counts.pending ?? 0]);
    notice.textContent = reported ? "" : "Priority and migrations: not reported (no router state stream readable here).";
    replace(missingBox, data.missing.length ? missingNotice(data.missing) : null);
  }

  let unsubscribe: (() => void) | null = null;
  function watch(): void {
    unsubscribe?.();
    const topic = `rollouts:${/^\d+$/.test(job) ? job : "all"}`;
    // The live topic carries the default view (trajectories that have not ended); another status
    // filter refetches over REST when the topic says something changed.
    unsubscribe = ctx.live.subscribe(topic, (event) => {
      if (status === "active") show(event as RolloutsResponse);
      else void load();
    });
  }

  async function load(): Promise<void> {
    const params: Record<string, string> = { status };
    if (job) params.job = job;
    try {
      show(await apiGet<RolloutsResponse>("/rollouts", params));
    } catch (error) {
      notice.textContent = (error as Error).message;
    }
  }

  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    job = jobInput.value.trim();
    status = statusSelect.value;
    replaceQuery({ job, status: status === "active" ? null : status });
    watch();
    void load();
  });

  watch();
  void load();
  const stopResume = ctx.live.onResume(() => void load());
  return {
    element,
    retheme: () => activity.retheme(),
    destroy() {
      unsubscribe?.();
      stopResume();
      activity.destroy();
    },
  };
}
