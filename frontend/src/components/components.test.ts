import { describe, expect, it, vi } from "vitest";
import { matchRoute } from "../router";
import { effectiveTheme, nextTheme } from "../theme";
import { phaseShares, breakdownView } from "./breakdown";
import { actionColour, slotOwners } from "./nodeCard";
import { boundedLines, outputTailView } from "./outputTail";
import { crossFieldErrors, PolicyForm, validateField } from "./policyForm";
import type { PolicyField } from "../types";

const FIELDS: PolicyField[] = [
  { name: "algorithm", label: "Algorithm", type: "choice", choices: ["tangram", "fcfs"] },
  { name: "depth", label: "Depth", type: "int", min: 0, max: 16 },
  { name: "min_dop", label: "DoP min", type: "int", min: 1, max: 64 },
  { name: "max_dop", label: "DoP max", type: "int", min: 1, max: 64 },
  { name: "pps", label: "PPS", type: "bool" },
];

describe("policy form", () => {
  it("validates numbers against their bounds", () => {
    expect(validateField(FIELDS[1], "3")).toBeNull();
    expect(validateField(FIELDS[1], "17")).toBe("must be ≤ 16");
    expect(validateField(FIELDS[1], "-1")).toBe("must be ≥ 0");
    expect(validateField(FIELDS[1], "2.5")).toBe("must be a whole number");
    expect(validateField(FIELDS[1], "")).toBe("is required");
    expect(validateField(FIELDS[0], "random")).toBe("must be one of tangram, fcfs");
  });

  it("checks min_dop ≤ max_dop across fields", () => {
    expect(crossFieldErrors({ min_dop: 8, max_dop: 4 })).toEqual({ max_dop: "must be ≥ min_dop (8)" });
    expect(crossFieldErrors({ min_dop: 2, max_dop: 4 })).toEqual({});
  });

  it("does not submit invalid values and shows the reason beside the field", async () => {
    const onSubmit = vi.fn(async () => {});
    const form = new PolicyForm(FIELDS, { algorithm: "tangram", depth: 2, min_dop: 1, max_dop: 8, pps: true }, false, onSubmit);
    document.body.appendChild(form.element);
    form.element.querySelector<HTMLInputElement>('[name="depth"]')!.value = "99";
    form.element.dispatchEvent(new Event("submit", { cancelable: true }));
    await Promise.resolve();
    expect(onSubmit).not.toHaveBeenCalled();
    expect(form.element.querySelector('[data-error-for="depth"]')!.textContent).toBe("must be ≤ 16");
    form.element.querySelector<HTMLInputElement>('[name="depth"]')!.value = "4";
    form.element.dispatchEvent(new Event("submit", { cancelable: true }));
    await Promise.resolve();
    expect(onSubmit).toHaveBeenCalledWith({ algorithm: "tangram", depth: 4, min_dop: 1, max_dop: 8, pps: true });
  });

  it("is disabled for the read-only role", () => {
    const form = new PolicyForm(FIELDS, {}, true, async () => {});
    const inputs = form.element.querySelectorAll<HTMLInputElement>("input, select, button");
    expect([...inputs].every((el) => el.disabled)).toBe(true);
    expect(form.element.textContent).toContain("Read-only role");
  });

  it("maps server field errors onto inputs", () => {
    const form = new PolicyForm(FIELDS, {}, false, async () => {});
    form.showServerErrors([{ field: "settings.depth", reason: "too deep" }]);
    expect(form.element.querySelector('[data-error-for="depth"]')!.textContent).toBe("too deep");
  });
});

describe("output tail", () => {
  it("never renders more than the line bound", () => {
    const text = Array.from({ length: 5000 }, (_, i) => `line ${i}`).join("\n");
    const { lines, dropped } = boundedLines(text, 100);
    expect(lines).toHaveLength(100);
    expect(lines[99]).toBe("line 4999");
    expect(dropped).toBe(4900);
    const view = outputTailView(text, 123456, true);
    expect(view.querySelector("pre")!.textContent!.split("\n")).toHaveLength(2000);
    expect(view.textContent).toContain("123,456 bytes");
  });
});

describe("node allocation map", () => {
  it("assigns each held slot to its action and ignores out-of-range slots", () => {
    expect(slotOwners(4, [{ action: 7, slots: [0, 1] }, { action: 9, slots: [3, 8] }])).toEqual([7, 7, null, 9]);
  });
  it("gives an action a stable colour", () => {
    expect(actionColour(42)).toBe(actionColour(42));
    expect(actionColour(42)).not.toBe(actionColour(43));
  });
});

describe("ACT breakdown", () => {
  it("splits the mean ACT into phase shares", () => {
    const b = { queueing: { mean: 3, p99: 5 }, execution: { mean: 1, p99: 2 }, overhead: { mean: 0, p99: 0 }, n: 10 };
    expect(phaseShares(b)).toEqual({ queueing: 0.75, execution: 0.25, overhead: 0 });
    expect(breakdownView(b).querySelector<HTMLElement>(".phase-queueing")!.style.width).toBe("75.0%");
  });
});

describe("router and theme", () => {
  it("matches pages and keeps filters from the query", () => {
    const route = matchRoute("/jobs/12", "?status=queued&tool=sandbox");
    expect(route.name).toBe("job");
    expect(route.params.job).toBe("12");
    expect(route.query.get("status")).toBe("queued");
    expect(matchRoute("/pools/gpu-a100").params.pool).toBe("gpu-a100");
    expect(matchRoute("/nope").name).toBe("not-found");
  });
  it("follows the system in auto and toggles light/dark", () => {
    expect(effectiveTheme("auto", true)).toBe("dark");
    expect(effectiveTheme("light", true)).toBe("light");
    expect(nextTheme("dark")).toBe("light");
  });
});

describe("pool events from two publishers", () => {
  it("merges the scheduler's partial snapshot into the last full one", async () => {
    const { mergePoolEvent } = await import("./poolPanel");
    const full = {
      t: 10,
      pool: "cpu",
      waiting: 5,
      running: 2,
      oldest_wait_s: 3,
      act: { p50: 1, p99: 4, mean: 2, n: 50 },
      util: { cpu: 0.5, gpu: null, quota: null },
    };
    const merged = mergePoolEvent(full, { pool: "cpu", at: 12, waiting: 7, running: 3, policy_version: 4 }, "cpu");
    expect(merged.t).toBe(12);
    expect([merged.waiting, merged.running, merged.policy_version]).toEqual([7, 3, 4]);
    expect(merged.act.p99).toBe(4); // kept from the database snapshot
    expect(merged.util.cpu).toBe(0.5);
    const first = mergePoolEvent(null, { waiting: 1 }, "gpu");
    expect(first.act.p50).toBeNull();
    expect(first.pool).toBe("gpu");
  });

  it("says whether the saved policy version runs", async () => {
    const { describeApplied } = await import("../pages/policies");
    expect(describeApplied(undefined, 2)).toBe("v2 saved; the scheduler has not reported yet");
    expect(describeApplied(2, 2)).toBe("applied: v2");
    expect(describeApplied(1, 2)).toBe("scheduler runs v1; v2 pending");
    expect(describeApplied(1, 2, { version: 2, reason: "settings.depth: must be ≥ 1" })).toBe(
      "v2 rejected by the scheduler (settings.depth: must be ≥ 1); it runs v1",
    );
  });
});
