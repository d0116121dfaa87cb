// Policies: each pool's knobs in a validated form; every save is a new version with author, time
// and a diff; "applied" shows the version the scheduler reports it runs.

import { ApiError, apiGet, apiPost } from "../api";
import { PolicyForm, type PolicyValues } from "../components/policyForm";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import { fmtTime } from "../format";
import type { PoliciesResponse, PolicyVersion, PoolPolicies, PoolSnapshot } from "../types";

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
    const showApplied = (version: number | null | undefined) => {
      const current = entry.current?.version ?? null;
      applied.textContent =
        version === null || version === undefined
          ? "scheduler has not reported a version yet"
          : version === current
            ? `applied: v${version}`
            : `scheduler runs v${version}, v${current} pending`;
      applied.className = `applied ${version === current ? "ok" : "pending"}`;
    };
    showApplied(entry.applied_version);
    unsubscribers.push(
      ctx.live.subscribe(`pool:${entry.pool}`, (raw) => {
        const version = (raw as PoolSnapshot).policy_version;
        if (version !== undefined) showApplied(version);
      }),
    );
    const form = new PolicyForm(fields, entry.current?.settings ?? {}, readOnly, async (values: PolicyValues) => {
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
