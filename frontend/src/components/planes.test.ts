import { describe, expect, it } from "vitest";
import { mergeMaps } from "../pages/gpus";
import type { BufferSnapshotView, CachedInstance, GpuMap, GpuNode, LlmWorkerRow } from "../planeTypes";
import { matchRoute } from "../router";
import { fillBar, fillLevel, firingRate } from "./bufferView";
import { cacheLanes, gpuNodeCard, missingNotice, serviceColour, stateCounts } from "./gpuMap";
import { loadShares, routerField } from "./rolloutsView";

function instance(service: string, start: number, size: number): CachedInstance {
  return { service, start, size, last_used: 100, idle_s: 5 };
}

const NODE: GpuNode = {
  id: 1,
  name: "gpu-a",
  pool: "gpu",
  status: "online",
  heartbeat_age_s: 2,
  gpus: [0, 1, 2, 3].map((index) => ({ index, memory_mb: 1000, model: "" })),
  nvlink_groups: [[0, 1, 2, 3]],
  cache: [instance("reward", 0, 2), instance("teacher", 2, 1)],
  running: [{ action: 7, service: "reward", status: "running", gpus: [0, 1], held_s: 1 }],
  cells: [
    { index: 0, state: "busy", warm: ["reward"], action: 7, service: "reward" },
    { index: 1, state: "busy", warm: ["reward"], action: 7, service: "reward" },
    { index: 2, state: "warm", warm: ["teacher"], action: null, service: null },
    { index: 3, state: "free", warm: [], action: null, service: null },
  ],
  hosted: { reward: { sizes: [1, 2] }, judge: { error: "weights missing" } },
};

describe("GPU map", () => {
  it("puts overlapping resident instances in separate lanes and disjoint ones side by side", () => {
    const lanes = cacheLanes([instance("a", 0, 2), instance("b", 2, 2), instance("c", 1, 1)]);
    expect(lanes.map((lane) => lane.map((i) => i.service))).toEqual([["a", "b"], ["c"]]);
    expect(cacheLanes([])).toEqual([]);
  });

  it("counts GPUs per state", () => {
    expect(stateCounts(NODE.cells)).toEqual({ busy: 2, restoring: 0, warm: 1, free: 1 });
  });

  it("draws one cell per GPU linked to the action holding it, and each chunk across its GPUs", () => {
    const card = gpuNodeCard(NODE);
    const cells = card.querySelectorAll("[data-gpu]");
    expect(cells.length).toBe(4);
    expect(card.querySelector('[data-gpu="0"]')!.getAttribute("href")).toBe("/actions/7");
    expect(card.querySelector('[data-gpu="3"]')!.getAttribute("data-state")).toBe("free");
    const chunk = card.querySelector<HTMLElement>('[data-chunk="reward@0+2"]')!;
    expect(chunk.getAttribute("style")).toContain("grid-column: 1 / span 2");
    expect(card.querySelector('[data-count="busy"]')!.textContent).toBe("2 busy");
    expect(card.textContent).toContain("judge: weights missing");
    expect(card.querySelector(".health")!.className).toBe("health ok");
    expect(card.querySelector('[data-count="restoring"]')!.getAttribute("title")).toContain("restored before running");
  });

  it("says when a node has nothing resident", () => {
    const card = gpuNodeCard({ ...NODE, cache: [], cells: NODE.cells.map((c) => ({ ...c, state: "free" as const, warm: [] })) });
    expect(card.textContent).toContain("cold cache");
  });

  it("keeps a service's colour stable", () => {
    expect(serviceColour("reward")).toBe(serviceColour("reward"));
    expect(serviceColour("reward")).not.toBe(serviceColour("teacher"));
  });

  it("merges per-pool maps: nodes of both, services once each", () => {
    const base: GpuMap = { t: 1, pools: ["a"], nodes: [NODE], services: [], missing: ["x"] };
    const service = {
      name: "reward", pool: null, backend: "torch", task: "reward", allowed_dop: [1], memory_mb: 0,
      queued: 1, running: 0, act: { p50: null, p99: null, mean: null, n: 0 },
      queueing_mean_s: null, execution_mean_s: null, warm: [], load_failures: {},
      agent: { reported: 0, restores: 0, restore_mean_s: null, agent_queue_mean_s: null, execute_mean_s: null },
    };
    const merged = mergeMaps([
      { ...base, services: [service] },
      { ...base, t: 2, pools: ["b"], nodes: [{ ...NODE, name: "gpu-b" }], services: [{ ...service, queued: 3 }] },
    ]);
    expect(merged.pools).toEqual(["a", "b"]);
    expect(merged.nodes.map((n) => n.name)).toEqual(["gpu-a", "gpu-b"]);
    expect(merged.services.map((s) => s.queued)).toEqual([3]);
    expect(merged.t).toBe(2);
  });

  it("lists what is not recorded", () => {
    const box = missingNotice(["restore counts", "evictions"]);
    expect(box.querySelectorAll("li").length).toBe(2);
    expect(box.textContent).toContain("Not recorded (2)");
  });
});

function snap(t: number, firings: Record<string, number>): BufferSnapshotView {
  return {
    t, taken_at: "", held: 0, fill: 0, complete: 0, actors: 0, steps_written: 0, steps_dropped: 0,
    steps_evicted: 0, samples: 0, firings,
  };
}

describe("buffers", () => {
  it("computes firings per minute over the history", () => {
    const history = [snap(0, { batch: 2 }), snap(30, { batch: 5 }), snap(60, { batch: 8 })];
    expect(firingRate(history, "batch")).toBeCloseTo(6);
    expect(firingRate(history.slice(0, 1), "batch")).toBeNull();
    expect(firingRate(history, "other")).toBeNull();
  });

  it("grades the fill level and draws its bar", () => {
    expect([fillLevel(0.5), fillLevel(0.85), fillLevel(1)]).toEqual(["ok", "high", "full"]);
    const bar = fillBar(0.25);
    expect(bar.getAttribute("data-fill")).toBe("0.250");
    expect(bar.querySelector<HTMLElement>(".fill-bar-inner")!.style.width).toBe("25.0%");
    expect(fillBar(null).textContent).toBe("no snapshot yet");
  });
});

describe("rollouts", () => {
  it("shares the predicted remaining tokens among workers", () => {
    const worker = (name: string, predicted: number): LlmWorkerRow => ({
      name, trajectories: 1, generating: 1, tool_call: 0, pending: 0, tokens: 0, predicted_remaining_tokens: predicted,
    });
    const shares = loadShares([worker("w0", 300), worker("w1", 100)]);
    expect(shares.get("w0")).toBeCloseTo(0.75);
    expect(loadShares([worker("w0", 0)]).get("w0")).toBe(0);
  });

  it("tells a router field that was not reported from one that is empty", () => {
    expect(routerField(3, true)).toBe("3");
    expect(routerField(null, true)).toBe("–");
    expect(routerField(null, false)).toBe("n/r");
  });

  it("routes the new pages", () => {
    expect(matchRoute("/gpus", "?pool=gpu").query.get("pool")).toBe("gpu");
    expect(matchRoute("/buffers/12").params).toEqual({ buffer: "12" });
    expect(matchRoute("/buffers").name).toBe("buffers");
    expect(matchRoute("/rollouts").name).toBe("rollouts");
  });
});
