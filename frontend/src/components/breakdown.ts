// The ACT breakdown of a job: queueing, execution and overhead as one stacked bar.

import { h } from "../dom";
import { fmtSeconds } from "../format";
import type { PhaseStats } from "../types";

export interface Breakdown {
  queueing: PhaseStats;
  execution: PhaseStats;
  overhead: PhaseStats;
  n: number;
}

const PHASES: Array<[keyof Omit<Breakdown, "n">, string]> = [
  ["queueing", "queueing"],
  ["execution", "execution"],
  ["overhead", "overhead"],
];

/** Share of each phase in the mean ACT (0..1), zero when nothing finished. */
export function phaseShares(b: Breakdown): Record<string, number> {
  const total = PHASES.reduce((sum, [key]) => sum + (b[key].mean ?? 0), 0);
  const shares: Record<string, number> = {};
  for (const [key] of PHASES) shares[key] = total > 0 ? (b[key].mean ?? 0) / total : 0;
  return shares;
}

export function breakdownView(b: Breakdown): HTMLElement {
  if (!b.n) return h("p", { class: "muted" }, "No finished actions yet.");
  const shares = phaseShares(b);
  return h(
    "div",
    { class: "breakdown" },
    h(
      "div",
      { class: "stacked-bar", role: "img", "aria-label": "ACT breakdown" },
      ...PHASES.map(([key]) =>
        h("span", { class: `phase phase-${key}`, style: `width:${(shares[key] * 100).toFixed(1)}%` }),
      ),
    ),
    h(
      "dl",
      { class: "phase-legend" },
      ...PHASES.flatMap(([key, label]) => [
        h("dt", {}, h("span", { class: `swatch phase-${key}` }), label),
        h("dd", {}, `mean ${fmtSeconds(b[key].mean)} · p99 ${fmtSeconds(b[key].p99)}`),
      ]),
    ),
    h("p", { class: "muted" }, `over ${b.n} finished actions`),
  );
}
