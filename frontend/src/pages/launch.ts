// Launch: start the demo workload, or replay a trace through the simulator under two policies and
// compare their ACT side by side.

import { ApiError, apiGet, apiPost } from "../api";
import { LiveChart, PALETTE } from "../charts";
import type { Page, PageContext } from "../context";
import { h, replace } from "../dom";
import { fmtSeconds } from "../format";
import type { OverviewResponse, PoliciesResponse, PolicyField, SimulationRun } from "../types";

function numberInput(name: string, value: number, min: number, max: number, step: number | "any" = 1) {
  return h("input", { type: "number", name, value, min, max, step, required: true });
}

function labelled(label: string, input: HTMLElement): HTMLElement {
  return h("label", { class: "field" }, h("span", { class: "field-label" }, label), input);
}

export function comparisonView(run: SimulationRun): HTMLElement {
  if (run.status === "failed") return h("p", { class: "error" }, `Simulation failed: ${run.error}`);
  if (!run.result) return h("p", { class: "muted" }, `Simulation ${run.status}…`);
  const policies = run.result.policies;
  return h(
    "table",
    { class: "data comparison" },
    h(
      "thead",
      {},
      h("tr", {}, h("th", {}, ""), ...policies.map((p) => h("th", {}, p.label))),
    ),
    h(
      "tbody",
      {},
      ...(["p50", "p99", "mean"] as const).map((key) =>
        h("tr", {}, h("th", {}, `ACT ${key}`), ...policies.map((p) => h("td", { class: "num" }, fmtSeconds(p.act[key])))),
      ),
      h("tr", {}, h("th", {}, "makespan"), ...policies.map((p) => h("td", { class: "num" }, fmtSeconds(p.makespan_s)))),
      h("tr", {}, h("th", {}, "actions"), ...policies.map((p) => h("td", { class: "num" }, String(p.act.n)))),
    ),
  );
}

export function launchPage(ctx: PageContext): Page {
  const readOnly = ctx.me.role !== "admin";
  const demoStatus = h("p", { class: "notice", role: "status" });
  const poolSelect = h("select", { name: "pool" });
  const demoForm = h(
    "form",
    { class: "launch-form" },
    labelled("Pool", poolSelect),
    labelled("Actions", numberInput("count", 200, 1, 10000)),
    labelled("Mean duration (s)", numberInput("duration_s", 2, 0.01, 600, "any")),
    h("button", { type: "submit", class: "btn primary", disabled: readOnly }, "Start demo workload"),
    demoStatus,
  );
  demoForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(demoForm);
    void apiPost<{ job: number; submitted: number }>("/launch/demo", {
      pool: data.get("pool"),
      count: Number(data.get("count")),
      duration_s: Number(data.get("duration_s")),
    })
      .then((r) => {
        replace(demoStatus, `Submitted ${r.submitted} actions to `, h("a", { href: `/jobs/${r.job}`, "data-link": "" }, `job #${r.job}`));
      })
      .catch((error: Error) => replace(demoStatus, error.message));
  });

  const policyBoxes = [h("fieldset", {}), h("fieldset", {})];
  const simStatus = h("div", {});
  const cdf = new LiveChart({
    title: "ACT distribution (CDF)",
    xTime: false,
    yMin: 0,
    series: [
      { label: "policy A", color: PALETTE.running },
      { label: "policy B", color: PALETTE.waiting },
    ],
  });
  const simForm = h(
    "form",
    { class: "launch-form" },
    labelled("Trace", h("select", { name: "trace" }, h("option", { value: "generated" }, "generated"), h("option", { value: "recorded" }, "recorded from a job"))),
    labelled("Job id (recorded)", h("input", { name: "job", type: "number", min: 1 })),
    labelled("Trajectories (generated AI-coding trace)", numberInput("count", 100, 1, 2000)),
    labelled("Trajectory arrival rate (/s)", numberInput("rate", 20, 0.1, 10000, "any")),
    labelled("Simulated cores", numberInput("cores_per_node", 32, 1, 1024)),
    labelled("Seed", numberInput("seed", 1, 0, 2 ** 31)),
    h("div", { class: "two-col" }, ...policyBoxes),
    h("button", { type: "submit", class: "btn primary", disabled: readOnly }, "Compare policies"),
  );

  function fillPolicyBoxes(fields: PolicyField[]): void {
    const simFields = fields.filter((f) => f.type !== "json");
    policyBoxes.forEach((box, index) => {
      const prefix = index === 0 ? "a" : "b";
      replace(
        box,
        h("legend", {}, `Policy ${prefix.toUpperCase()}`),
        ...simFields.map((f) => {
          const name = `${prefix}.${f.name}`;
          if (f.type === "choice") {
            const preferred = index === 1 && f.choices && f.choices.length > 1 ? f.choices[1] : f.choices?.[0];
            return labelled(f.label, h("select", { name }, ...(f.choices ?? []).map((c) => h("option", { value: c, selected: c === preferred }, c))));
          }
          if (f.type === "bool") return labelled(f.label, h("input", { type: "checkbox", name }));
          return labelled(f.label, h("input", { type: "number", name, min: f.min ?? null, max: f.max ?? null, step: f.type === "int" ? 1 : "any", placeholder: "default" }));
        }),
      );
    });
  }

  function policyValues(data: FormData, prefix: string): Record<string, unknown> {
    const values: Record<string, unknown> = {};
    for (const box of policyBoxes) {
      for (const input of box.querySelectorAll<HTMLInputElement | HTMLSelectElement>("[name]")) {
        if (!input.name.startsWith(`${prefix}.`)) continue;
        const key = input.name.slice(prefix.length + 1);
        if (input instanceof HTMLInputElement && input.type === "checkbox") values[key] = input.checked;
        else if (input.value !== "") values[key] = input instanceof HTMLInputElement && input.type === "number" ? Number(input.value) : input.value;
      }
    }
    void data;
    return values;
  }

  let pollTimer: ReturnType<typeof setTimeout> | null = null;
  async function poll(id: number): Promise<void> {
    const run = await apiGet<SimulationRun>(`/launch/simulations/${id}`);
    replace(simStatus, comparisonView(run));
    if (run.result) {
      const [a, b] = run.result.policies;
      const xs = [...new Set([...(a?.act_cdf ?? []), ...(b?.act_cdf ?? [])].map(([x]) => x))].sort((p, q) => p - q);
      const at = (curve: Array<[number, number]> | undefined, x: number) => {
        if (!curve?.length) return null;
        let value = 0;
        for (const [cx, cy] of curve) if (cx <= x) value = cy;
        return value;
      };
      cdf.reset(xs.map((x) => ({ t: x, values: [at(a?.act_cdf, x), at(b?.act_cdf, x)] })));
    }
    if (run.status === "pending" || run.status === "running") pollTimer = setTimeout(() => void poll(id), 1000);
  }

  simForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(simForm);
    const cores = Number(data.get("cores_per_node"));
    const trace =
      data.get("trace") === "recorded"
        ? { kind: "recorded", job: Number(data.get("job")), cores_per_node: cores }
        : {
            kind: "generated",
            count: Number(data.get("count")),
            rate: Number(data.get("rate")),
            seed: Number(data.get("seed")),
            cores_per_node: cores,
          };
    void apiPost<SimulationRun>("/launch/simulate", { trace, policies: [policyValues(data, "a"), policyValues(data, "b")] })
      .then((run) => poll(run.id))
      .catch((error: Error) =>
        replace(simStatus, h("p", { class: "error" }, error instanceof ApiError ? error.message : String(error))),
      );
  });

  void apiGet<OverviewResponse>("/overview").then((d) =>
    replace(poolSelect, ...d.pools.map((p) => h("option", { value: p.pool }, p.pool))),
  );
  void apiGet<PoliciesResponse>("/policies").then((d) => fillPolicyBoxes(d.fields));

  return {
    element: h(
      "div",
      { class: "page" },
      h("h1", {}, "Launch"),
      readOnly ? h("p", { class: "muted read-only" }, "Read-only role: launching is for admins.") : null,
      h("section", { class: "panel" }, h("h2", {}, "Demo workload"), demoForm),
      h("section", { class: "panel" }, h("h2", {}, "Replay a trace under two policies"), simForm, simStatus, cdf.element),
    ),
    retheme: () => cdf.retheme(),
    destroy() {
      if (pollTimer) clearTimeout(pollTimer);
      cdf.destroy();
    },
  };
}
