// Jobs list and the job page: trajectories, ACT breakdown, actions with URL-kept filters and
// why each waiting action waits.

import { apiGet } from "../api";
import { breakdownView } from "../components/breakdown";
import { histogramBars } from "../components/histogram";
import { DataTable, statusBadge } from "../components/table";
import { LiveChart, PALETTE } from "../charts";
import type { Page, PageContext } from "../context";
import { h, replace, setText } from "../dom";
import { fmtCount, fmtSeconds, fmtTime } from "../format";
import { replaceQuery } from "../router";
import type { ActionPage, ActionRow, JobDetail, JobSummary } from "../types";

export const ACTION_STATUSES = ["queued", "scheduled", "running", "succeeded", "failed", "cancelled", "timed_out"];
export const FILTER_KEYS = ["status", "tool", "pool", "trajectory"] as const;

export function jobsPage(_ctx: PageContext): Page {
  const table = new DataTable<JobSummary>(
    [
      { header: "Job", cell: (j) => h("a", { href: `/jobs/${j.id}`, "data-link": "" }, `#${j.id} ${j.name}`) },
      { header: "Status", cell: (j) => statusBadge(j.status) },
      { header: "Queued", cell: (j) => fmtCount(j.counts.queued ?? 0), className: "num" },
      { header: "Running", cell: (j) => fmtCount(j.counts.running ?? 0), className: "num" },
      { header: "Succeeded", cell: (j) => fmtCount(j.counts.succeeded ?? 0), className: "num" },
      { header: "Failed", cell: (j) => fmtCount(j.counts.failed ?? 0), className: "num" },
      { header: "ACT p50", cell: (j) => fmtSeconds(j.act.p50), className: "num" },
      { header: "ACT p99", cell: (j) => fmtSeconds(j.act.p99), className: "num" },
    ],
    "No jobs yet.",
  );
  void apiGet<{ results: JobSummary[] }>("/jobs").then((d) => table.render(d.results));
  return { element: h("div", { class: "page" }, h("h1", {}, "Jobs"), table.element), destroy() {} };
}

export function filtersFromQuery(query: URLSearchParams): Record<string, string> {
  const filters: Record<string, string> = {};
  for (const key of FILTER_KEYS) {
    const value = query.get(key);
    if (value) filters[key] = value;
  }
  return filters;
}

export function jobPage(ctx: PageContext): Page {
  const jobId = ctx.route.params.job;
  const filters = filtersFromQuery(ctx.route.query);
  const counts = h("div", { class: "stats" });
  const breakdown = h("div", {});
  const histogram = h("div", { class: "histogram" });
  const active = new LiveChart({
    title: "Active trajectories",
    stepped: true,
    series: [{ label: "active", color: PALETTE.running }],
  });
  const actChart = new LiveChart({
    title: "Action completion time",
    series: [
      { label: "p50", color: PALETTE.p50, format: fmtSeconds },
      { label: "p99", color: PALETTE.p99, format: fmtSeconds },
    ],
  });
  const title = h("h1", {}, `Job #${jobId}`);
  const table = new DataTable<ActionRow>(
    [
      { header: "Action", cell: (a) => h("a", { href: `/actions/${a.id}`, "data-link": "" }, `#${a.id}`) },
      { header: "Status", cell: (a) => statusBadge(a.status) },
      { header: "Tool", cell: (a) => a.tool ?? "–" },
      { header: "Pool", cell: (a) => a.pool ?? "–" },
      { header: "Trajectory", cell: (a) => (a.trajectory === null ? "–" : `#${a.trajectory}`) },
      { header: "Submitted", cell: (a) => fmtTime(a.submitted_at) },
      { header: "ACT", cell: (a) => fmtSeconds(a.act_s), className: "num" },
      { header: "Why it waits", cell: (a) => (a.wait_reason ? h("span", { class: "wait-reason" }, a.wait_reason) : "") },
    ],
    "No actions match these filters.",
  );
  const more = h("button", { type: "button", class: "btn", hidden: true }, "Load more");
  const total = h("span", { class: "muted" });
  let nextCursor: string | null = null;

  const statusSelect = h(
    "select",
    { name: "status", "aria-label": "status" },
    h("option", { value: "" }, "any status"),
    ...ACTION_STATUSES.map((s) => h("option", { value: s, selected: filters.status === s }, s)),
  );
  const textInput = (name: string, placeholder: string) =>
    h("input", { name, placeholder, value: filters[name] ?? "", "aria-label": name, size: 12 });
  const toolInput = textInput("tool", "tool");
  const poolInput = textInput("pool", "pool");
  const trajectoryInput = textInput("trajectory", "trajectory id");
  const form = h(
    "form",
    { class: "filters", onsubmit: (e: Event) => e.preventDefault() },
    statusSelect,
    toolInput,
    poolInput,
    trajectoryInput,
    total,
  );
  form.addEventListener("change", () => {
    filters.status = statusSelect.value;
    filters.tool = toolInput.value.trim();
    filters.pool = poolInput.value.trim();
    filters.trajectory = trajectoryInput.value.trim();
    replaceQuery(filters);
    void loadActions();
  });
  more.addEventListener("click", () => void loadActions(true));

  async function loadActions(append = false): Promise<void> {
    const params: Record<string, string> = {};
    for (const [key, value] of Object.entries(filters)) if (value) params[key] = value;
    if (append && nextCursor) params.cursor = nextCursor;
    const page = await apiGet<ActionPage>(`/jobs/${jobId}/actions`, params);
    table.render(page.results, append);
    nextCursor = page.next;
    more.hidden = !page.next;
    setText(total, `${fmtCount(page.total)} actions`);
  }

  function showJob(data: JobDetail): void {
    setText(title, `Job #${data.job.id} ${data.job.name}`);
    const stat = (label: string, value: string) =>
      h("div", { class: "stat" }, h("span", { class: "stat-label" }, label), h("span", { class: "stat-value" }, value));
    replace(
      counts,
      ...ACTION_STATUSES.map((s) => stat(s, fmtCount(data.job.counts[s] ?? 0))),
      stat("ACT p50", fmtSeconds(data.job.act.p50)),
      stat("ACT p99", fmtSeconds(data.job.act.p99)),
      stat("trajectories active", fmtCount(data.trajectories.active)),
    );
    replace(breakdown, breakdownView(data.act_breakdown));
    replace(histogram, ...histogramBars(data.trajectories.length_histogram, "steps", "No trajectories yet."));
  }

  async function load(): Promise<void> {
    const data = await apiGet<JobDetail>(`/jobs/${jobId}`);
    showJob(data);
    active.reset(data.history.map((p) => ({ t: p.t, values: [p.active_trajectories ?? null] })));
    actChart.reset(data.history.map((p) => ({ t: p.t, values: [p.act_p50, p.act_p99] })));
    await loadActions();
  }

  // Live: counts and charts from job snapshots; the table refetches at most every 3 s.
  let lastTableLoad = 0;
  let tableTimer: ReturnType<typeof setTimeout> | null = null;
  const stopLive = ctx.live.subscribe(`job:${jobId}`, (raw) => {
    const snapshot = raw as { t: number; counts: Record<string, number>; act: { p50: number | null; p99: number | null }; active_trajectories: number };
    actChart.push(snapshot.t, [snapshot.act.p50, snapshot.act.p99]);
    active.push(snapshot.t, [snapshot.active_trajectories]);
    for (const stat of counts.querySelectorAll<HTMLElement>(".stat")) {
      const label = stat.querySelector(".stat-label")?.textContent ?? "";
      const value = stat.querySelector(".stat-value");
      if (value && label in snapshot.counts) setText(value, fmtCount(snapshot.counts[label]));
    }
    if (tableTimer) return;
    const wait = Math.max(0, 3000 - (Date.now() - lastTableLoad));
    tableTimer = setTimeout(() => {
      tableTimer = null;
      lastTableLoad = Date.now();
      void loadActions();
    }, wait);
  });

  void load().catch((error: Error) => replace(counts, h("p", { class: "error" }, error.message)));
  const stopResume = ctx.live.onResume(() => void load());
  const element = h(
    "div",
    { class: "page" },
    title,
    counts,
    h(
      "div",
      { class: "two-col" },
      h("section", { class: "panel" }, h("h2", {}, "ACT breakdown"), breakdown),
      h("section", { class: "panel" }, h("h2", {}, "Trajectory length (steps)"), histogram),
    ),
    h("div", { class: "charts" }, active.element, actChart.element),
    h("section", { class: "panel" }, h("h2", {}, "Actions"), form, table.element, more),
  );
  return {
    element,
    retheme() {
      active.retheme();
      actChart.retheme();
    },
    destroy() {
      stopLive();
      stopResume();
      if (tableTimer) clearTimeout(tableTimer);
      active.destroy();
      actChart.destroy();
    },
  };
}
