// Action: its timeline, allocation, why it waits, a bounded output tail, and cancel.

import { apiGet, apiPost } from "../api";
import { outputTailView } from "../components/outputTail";
import { statusBadge } from "../components/table";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import { fmtSeconds, fmtTime, secondsBetween } from "../format";
import type { ActionDetail } from "../types";

const STEPS: Array<[keyof ActionDetail["timeline"], string]> = [
  ["submitted_at", "submitted"],
  ["scheduled_at", "scheduled"],
  ["started_at", "started"],
  ["finished_at", "finished"],
];

export function timelineView(action: ActionDetail): HTMLElement {
  const t = action.timeline;
  return h(
    "div",
    {},
    h(
      "ol",
      { class: "timeline" },
      ...STEPS.map(([key, label]) =>
        h("li", { class: t[key] ? "done" : "pending" }, h("strong", {}, label), h("span", {}, fmtTime(t[key]))),
      ),
    ),
    h(
      "p",
      { class: "muted" },
      `queueing ${fmtSeconds(secondsBetween(t.submitted_at, t.started_at ?? t.scheduled_at))} · ` +
        `execution ${fmtSeconds(secondsBetween(t.started_at, t.finished_at))} · ` +
        `ACT ${fmtSeconds(secondsBetween(t.submitted_at, t.finished_at))}`,
    ),
  );
}

export function actionPage(ctx: PageContext): Page {
  const actionId = ctx.route.params.action;
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const notice = h("p", { class: "notice", role: "status" });
  const title = h("h1", {}, `Action #${actionId}`);
  let stopLive: (() => void) | null = null;
  let refreshTimer: ReturnType<typeof setTimeout> | null = null;

  async function cancel(button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    try {
      const updated = await apiPost<ActionDetail>(`/actions/${actionId}/cancel`);
      notice.textContent = `Action #${actionId} is ${updated.status}`;
      show(updated);
    } catch (error) {
      notice.textContent = (error as Error).message;
      button.disabled = false;
    }
  }

  function show(action: ActionDetail): void {
    replace(title, `Action #${action.id} `, statusBadge(action.status));
    const cancelButton =
      ctx.me.role === "admin" && action.can_cancel
        ? h("button", { type: "button", class: "btn danger", "data-action": "cancel" }, "Cancel action")
        : null;
    cancelButton?.addEventListener("click", () => void cancel(cancelButton));
    replace(
      body,
      h(
        "p",
        {},
        "Job ",
        h("a", { href: `/jobs/${action.job}`, "data-link": "" }, `#${action.job}`),
        action.pool
          ? h("span", {}, " · pool ", h("a", { href: `/pools/${action.pool}`, "data-link": "" }, action.pool))
          : null,
        action.tool ? ` · tool ${action.tool}` : null,
        " ",
        cancelButton,
      ),
      action.wait_reason ? h("p", { class: "wait-reason" }, `Waiting: ${action.wait_reason}`) : null,
      h("section", { class: "panel" }, h("h2", {}, "Timeline"), timelineView(action)),
      h(
        "div",
        { class: "two-col" },
        h(
          "section",
          { class: "panel" },
          h("h2", {}, "Allocation"),
          h("p", {}, action.node ? `node ${action.node.name}` : "not allocated"),
          h("pre", { class: "json" }, JSON.stringify(action.allocation ?? null, null, 2)),
        ),
        h(
          "section",
          { class: "panel" },
          h("h2", {}, "Demand"),
          h("pre", { class: "json" }, JSON.stringify(action.demand ?? null, null, 2)),
        ),
      ),
      h(
        "section",
        { class: "panel" },
        h("h2", {}, "Output"),
        action.exit_code !== null ? h("p", {}, `exit code ${action.exit_code}`) : null,
        action.error ? h("p", { class: "error" }, action.error) : null,
        outputTailView(action.output_tail, action.output_bytes, action.output_truncated),
      ),
    );
    if (!stopLive && !isTerminal(action.status)) {
      // The job's snapshots tell us something moved; refetch this action at most once a second.
      stopLive = ctx.live.subscribe(`job:${action.job}`, () => {
        if (refreshTimer) return;
        refreshTimer = setTimeout(() => {
          refreshTimer = null;
          void load();
        }, 1000);
      });
    }
  }

  async function load(): Promise<void> {
    show(await apiGet<ActionDetail>(`/actions/${actionId}`));
  }

  void load().catch((error: Error) => replace(body, h("p", { class: "error" }, error.message)));
  const stopResume = ctx.live.onResume(() => void load());
  return {
    element: h("div", { class: "page" }, title, notice, body),
    destroy() {
      stopResume();
      stopLive?.();
      if (refreshTimer) clearTimeout(refreshTimer);
    },
  };
}

export function isTerminal(status: string): boolean {
  return ["succeeded", "failed", "cancelled", "timed_out"].includes(status);
}
