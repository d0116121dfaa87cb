// Policies: each pool's knobs in a validated form; every save is a new version with author, time
// and a diff; "applied" shows the version the scheduler reports it runs.

import { ApiError, apiGet, apiPost } from "../api";
import { PolicyForm, type PolicyValues } from "../components/policyForm";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import { fmtTime } from "../format";
import type { PoliciesResponse, PolicyVersion, PoolEvent, PoolPolicies } from "../types";

/** What the applied-version badge says, given what the scheduler reports and what is saved;
 * a saved version the scheduler refused (it keeps the one it runs) says so, with the reason. */
export function describeApplied(
  running: number | null | undefined,
  saved: number | null,
  rejected?: { version: number; reason: string } | null,
): string {
  if (rejected && rejected.version === saved) {
    return `v${saved} rejected by the scheduler (${rejected.reason}); it runs v${running ?? "–"}`;
  }
  if (running === null || running === undefined) {
    return saved === null ? "no policy saved" : `v${saved} saved; the scheduler has not reported yet`;
  }
  if (running === saved) return `applied: v${running}`;
  return `scheduler runs v${running}; v${saved} pending`;
}

export function diffView(version: PolicyVersion): HTMLElement {
  if (!version.diff.length) return h("span", { class: "muted" }, "initial version");
  return h(
    "ul",
    { class: "diff" },
    ...version.diff.map((d) =>
      h(
        "li",
        {},
        h("code", {}, d.field),
        " ",
        h("del", {}, JSON.stringify(d.old)),
        " → ",
        h("ins", {}, JSON.stringify(d.new)),
      ),
    ),
  );
}

export function policiesPage(ctx: PageContext): Page {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading policies…"));
  const unsubscribers: Array<() => void> = [];
  const readOnly = ctx.me.role !== "admin";

  function poolSection(fields: PoliciesResponse["fields"], entry: PoolPolicies): HTMLElement {
    const applied = h("span", { class: "applied", "data-applied-for": entry.pool });
    const current = entry.current?.version ?? null;
    applied.textContent = describeApplied(entry.applied_version, current);
    applied.className = `applied ${entry.applied_version === current ? "ok" : "pending"}`;
    unsubscribers.push(
      ctx.live.subscribe(`pool:${entry.pool}`, (raw) => {
        // Only the scheduler's snapshots say which version runs.
        const version = (raw as PoolEvent).policy_version;
        if (version === undefined) return;
        applied.textContent = describeApplied(version, current, (raw as PoolEvent).policy_rejected);
        applied.className = `applied ${version === current ? "ok" : "pending"}`;
      }),
    );
    const form = new PolicyForm(fields, entry.current?.settings ?? entry.defaults ?? {}, readOnly, async (values: PolicyValues) => {
      try {
        const saved = await apiPost<PoolPolicies>(`/policies/${encodeURIComponent(entry.pool)}`, { settings: values });
        form.status.textContent = `Saved version ${saved.current?.version}`;
        void load();
      } catch (error) {
        if (error instanceof ApiError) {
          form.showServerErrors(error.fieldErrors);
          if (!error.fieldErrors.length) form.status.textContent = error.message;
        } else {
          form.status.textContent = String(error);
        }
      }
    });
    const history = h(
      "table",
      { class: "data versions" },
      h("thead", {}, h("tr", {}, h("th", {}, "Version"), h("th", {}, "Author"), h("th", {}, "Time"), h("th", {}, "Change"))),
      h(
        "tbody",
        {},
        ...entry.versions.map((v) =>
          h("tr", { "data-version": v.version }, h("td", {}, `v${v.version}`), h("td", {}, v.author ?? "–"), h("td", {}, fmtTime(v.created_at)), h("td", {}, diffView(v))),
        ),
      ),
    );
    return h(
      "section",
      { class: "panel", "data-policy-pool": entry.pool },
      h("h2", {}, `Pool ${entry.pool} `, h("span", { class: "badge" }, entry.current ? `v${entry.current.version}` : "no policy"), " ", applied),
      h("div", { class: "two-col" }, form.element, h("div", {}, h("h3", {}, "History"), history)),
    );
  }

  async function load(): Promise<void> {
    unsubscribers.splice(0).forEach((u) => u());
    const data = await apiGet<PoliciesResponse>("/policies");
    if (!data.pools.length) {
      replace(body, h("p", { class: "muted" }, "No resource pools yet."));
      return;
    }
    replace(body, ...data.pools.map((entry) => poolSection(data.fields, entry)));
  }

  void load().catch((error: Error) => replace(body, h("p", { class: "error" }, error.message)));
  return {
    element: h("div", { class: "page" }, h("h1", {}, "Policies"), body),
    destroy() {
      unsubscribers.forEach((u) => u());
    },
  };
}
