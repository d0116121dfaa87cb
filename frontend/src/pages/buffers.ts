// Buffers: the list (fill level of each), and a page per buffer — fill over time, counters,
// trigger firings, the elastic actors of its workflows, live over the buffer's topic.

import "../planes.css";
import { apiGet } from "../api";
import { actorStateCounts, actorTable, bufferListTable, bufferStats, triggerTable } from "../components/bufferView";
import { missingNotice } from "../components/gpuMap";
import { LiveChart, PALETTE } from "../charts";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import { fmtPercent } from "../format";
import type { BufferDetail, BufferSnapshotView, BuffersResponse } from "../planeTypes";

export function buffersPage(ctx: PageContext): Page {
  const job = ctx.route.query.get("job");
  const table = bufferListTable();
  const notice = h("p", { class: "notice", role: "status" }, "Loading buffers…");
  const element = h("div", { class: "page plane-page" }, h("h1", {}, job ? `Buffers of job ${job}` : "Buffers"), notice, table.element);
  async function load(): Promise<void> {
    const data = await apiGet<BuffersResponse>("/buffers", job ? { job } : undefined);
    table.render(data.buffers);
    notice.textContent = "";
  }
  void load().catch((error: Error) => (notice.textContent = error.message));
  const stopResume = ctx.live.onResume(() => void load());
  return { element, destroy: stopResume };
}

export function bufferPage(ctx: PageContext): Page {
  const id = ctx.route.params.buffer;
  const title = h("h1", {}, `Buffer ${id}`);
  const subtitle = h("p", { class: "muted" });
  const statsBox = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const missingBox = h("div", {});
  let history: BufferSnapshotView[] = [];
  const triggers = triggerTable(() => history);
  const actors = actorTable();
  const actorSummary = h("p", { class: "muted", "data-actor-summary": "" });
  const fillChart = new LiveChart({
    title: "Fill level",
    height: 160,
    maxPoints: 1000,
    yMin: 0,
    yMax: 1,
    axisFormat: (v) => fmtPercent(v),
    series: [{ label: "fill", color: PALETTE.running, format: (v) => fmtPercent(v) }],
  });
  const flowChart = new LiveChart({
    title: "Steps written and samples drawn",
    height: 160,
    maxPoints: 1000,
    series: [
      { label: "steps written", color: PALETTE.cpu },
      { label: "samples", color: PALETTE.p50 },
    ],
  });
  const element = h(
    "div",
    { class: "page plane-page" },
    title,
    subtitle,
    statsBox,
    h("div", { class: "chart-row" }, fillChart.element, flowChart.element),
    h("h2", {}, "Triggers"),
    triggers.element,
    h("h2", {}, "Actors"),
    actorSummary,
    actors.element,
    missingBox,
  );

  function show(data: BufferDetail): void {
    history = data.history;
    const buffer = data.buffer;
    title.textContent = `Buffer ${buffer.name}`;
    replace(
      subtitle,
      "job ",
      h("a", { href: `/jobs/${buffer.job.id}`, "data-link": "" }, buffer.job.name),
      ` · ${buffer.sampler} sampler · ${buffer.sync_mode} · eviction ${buffer.eviction} · keys ${Object.keys(buffer.schema).join(", ") || "–"}`,
    );
    replace(statsBox, bufferStats(buffer, data.snapshot_age_s));
    triggers.render(data.triggers);
    actors.render(data.actors ?? []);
    const counts = actorStateCounts(data.actors ?? []);
    actorSummary.textContent = counts.length
      ? counts.map(([state, n]) => `${n} ${state}`).join(" · ")
      : "Actors appear once a workflow reports them (Workflow.start(report_to=…)).";
    fillChart.reset(history.map((s) => ({ t: s.t, values: [s.fill] })));
    flowChart.reset(history.map((s) => ({ t: s.t, values: [s.steps_written, s.samples] })));
    replace(missingBox, data.missing.length ? missingNotice(data.missing) : null);
  }

  async function load(): Promise<void> {
    show(await apiGet<BufferDetail>(`/buffers/${encodeURIComponent(id)}`));
  }
  void load().catch((error: Error) => replace(statsBox, h("p", { class: "error" }, error.message)));
  const unsubscribe = ctx.live.subscribe(`buffer:${id}`, (event) => show(event as BufferDetail));
  const stopResume = ctx.live.onResume(() => void load());
  return {
    element,
    retheme() {
      fillChart.retheme();
      flowChart.retheme();
    },
    destroy() {
      unsubscribe();
      stopResume();
      fillChart.destroy();
      flowChart.destroy();
    },
  };
}
