import { afterEach, describe, expect, it, vi } from "vitest";
import type { PageContext } from "../context";
import type { LiveSocket } from "../live";
import type { GpuMap, RolloutsResponse } from "../planeTypes";
import { matchRoute } from "../router";
import { gpusPage } from "./gpus";
import { rolloutsPage } from "./rollouts";

/** A live socket that records subscriptions and lets the test deliver events. */
class FakeLive {
  handlers = new Map<string, (data: unknown) => void>();
  subscribe(group: string, handler: (data: unknown) => void): () => void {
    this.handlers.set(group, handler);
    return () => this.handlers.delete(group);
  }
  onResume(): () => void {
    return () => {};
  }
}

function context(path: string, search: string, live: FakeLive, role: "admin" | "operator" = "operator"): PageContext {
  return {
    live: live as unknown as LiveSocket,
    route: matchRoute(path, search),
    me: { username: "otto", role },
    navigate: () => {},
  };
}

function answer(body: unknown, status = 200): void {
  vi.stubGlobal(
    "fetch",
    vi.fn(async () => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } })),
  );
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i += 1) await new Promise((resolve) => setTimeout(resolve, 0));
}

function gpuMap(state: "warm" | "free", queued: number): GpuMap {
  return {
    t: 1,
    pools: ["gpu"],
    nodes: [
      {
        id: 1, name: "gpu-a", pool: "gpu", status: "online", heartbeat_age_s: 1,
        gpus: [{ index: 0, memory_mb: 1, model: "" }], nvlink_groups: [],
        cache: state === "warm" ? [{ service: "reward", start: 0, size: 1, last_used: 1, idle_s: 1 }] : [],
        running: [], cells: [{ index: 0, state, warm: state === "warm" ? ["reward"] : [], action: null, service: null }],
        hosted: {},
      },
    ],
    services: [
      {
        name: "reward", pool: "gpu", backend: "torch", task: "reward", allowed_dop: [1], memory_mb: 0,
        queued, running: 0, act: { p50: null, p99: null, mean: null, n: 0 },
        queueing_mean_s: null, execution_mean_s: null, warm: [], load_failures: {},
        agent: { reported: 0, restores: 0, restore_mean_s: null, agent_queue_mean_s: null, execute_mean_s: null },
      },
    ],
    missing: ["restore counts"],
  };
}

function rollouts(): RolloutsResponse {
  return {
    t: 1, job: null, status: "active", counts: { generating: 1 }, unplaced: 0,
    workers: [{ name: "w0", trajectories: 1, generating: 1, tool_call: 0, pending: 0, tokens: 5, predicted_remaining_tokens: 9 }],
    trajectories: [], router_fields: false, groups: [], missing: [],
    remaining_histogram: [{ lo: 0, hi: 10, count: 2 }, { lo: 10, hi: 20, count: 1 }],
    router_groups: [{ group: "g9", job: "7", prompts: 2, candidates: 6, running: 1, finished: 3, aborted: 2, failed: 0, at: 5 }],
  };
}

afterEach(() => vi.unstubAllGlobals());

describe("GPU map page", () => {
  it("renders the first answer, subscribes to each pool and follows its events", async () => {
    answer(gpuMap("warm", 1));
    const live = new FakeLive();
    const page = gpusPage(context("/gpus", "", live));
    await settle();
    expect(page.element.querySelector('[data-gpu="0"]')!.getAttribute("data-state")).toBe("warm");
    expect([...live.handlers.keys()]).toEqual(["gpus:gpu"]);
    live.handlers.get("gpus:gpu")!(gpuMap("free", 4));
    expect(page.element.querySelector('[data-gpu="0"]')!.getAttribute("data-state")).toBe("free");
    expect(page.element.querySelector('[data-svc-queued="reward"]')!.textContent).toBe("4");
    expect(page.element.querySelector("[data-missing]")!.textContent).toContain("restore counts");
    page.destroy();
    expect(live.handlers.size).toBe(0);
  });

  it("shows the server's reason when the pool filter is refused", async () => {
    answer({ errors: [{ field: "pool", reason: "no GPU pool named 'x'" }] }, 400);
    const page = gpusPage(context("/gpus", "?pool=x", new FakeLive()));
    await settle();
    expect(page.element.querySelector(".error")!.textContent).toBe("pool: no GPU pool named 'x'");
  });
});

describe("Rollouts page", () => {
  it("watches every job by default and one job when the URL names it", async () => {
    answer(rollouts());
    const live = new FakeLive();
    rolloutsPage(context("/rollouts", "", live));
    await settle();
    expect([...live.handlers.keys()]).toEqual(["rollouts:all"]);
    const oneJob = new FakeLive();
    const page = rolloutsPage(context("/rollouts", "?job=7", oneJob));
    await settle();
    expect([...oneJob.handlers.keys()]).toEqual(["rollouts:7"]);
    expect(page.element.querySelector('[data-worker-trajectories="w0"]')!.textContent).toBe("1");
    expect(page.element.querySelector(".notice")!.textContent).toContain("not reported");
    expect(page.element.querySelector('[data-router-pruned="g9"]')!.textContent).toBe("2");
    const bars = page.element.querySelectorAll<HTMLElement>("[data-remaining-histogram] .bar span");
    expect([...bars].map((bar) => bar.style.height)).toEqual(["100%", "50%"]);
  });

  it("shows each worker's reported KV use and queue, and sets a router's policy", async () => {
    const data = rollouts();
    data.workers.push({
      name: "w1", trajectories: 0, generating: 0, tool_call: 0, pending: 0, tokens: 0, predicted_remaining_tokens: 0,
      router: "r1", running_requests: 2, queued_requests: 7, kv_usage: 0.5, kv_used_tokens: 800, reported_at: 1,
    });
    data.routers = {
      policies: [{ router: "r1", policy: "heddle", predictor: "prompt_history", version: 3, changed_by: "ops", changed_at: 1 }],
      unset: ["r2"],
      policy_choices: [{ value: "heddle", label: "Heddle" }, { value: "round_robin", label: "round-robin" }],
      predictor_choices: [{ value: "prompt_history", label: "prompt history" }],
    };
    answer(data);
    const operators = rolloutsPage(context("/rollouts", "", new FakeLive()));
    await settle();
    expect(operators.element.querySelector('[data-router="r1"]')!.textContent).toContain("changed by ops");
    expect(operators.element.querySelector("[data-router-policy-form]")).toBeNull(); // admin role only
    expect(operators.element.querySelector("[data-router-policy-read-only]")).not.toBeNull();
    const page = rolloutsPage(context("/rollouts", "", new FakeLive(), "admin"));
    await settle();
    expect(page.element.querySelector("[data-router-policy-read-only]")).toBeNull();
    expect(page.element.querySelector('[data-worker-kv="w1"]')!.textContent).toBe("50%");
    expect(page.element.querySelector('[data-worker-queued="w1"]')!.textContent).toBe("7");
    expect(page.element.querySelector('[data-worker-kv="w0"]')!.textContent).toBe("not reported");
    expect(page.element.querySelector('[data-router="r1"]')!.textContent).toContain("changed by ops");
    expect(page.element.querySelector('[data-router="r2"]')).not.toBeNull();
    answer({ router: "r1", policy: "round_robin", predictor: "prompt_history", version: 4, changed_by: "ops", changed_at: 2 }, 201);
    const form = page.element.querySelector<HTMLFormElement>("[data-router-policy-form]")!;
    form.querySelector<HTMLInputElement>('[name="router"]')!.value = "r1";
    form.querySelector<HTMLSelectElement>('[name="policy"]')!.value = "round_robin";
    form.dispatchEvent(new Event("submit", { cancelable: true }));
    await settle();
    const sent = vi.mocked(fetch).mock.calls[0];
    expect(String(sent[0])).toContain("/rollouts/routers/r1/policy");
    expect(JSON.parse(String(sent[1]!.body))).toEqual({ policy: "round_robin", predictor: "prompt_history" });
    expect(page.element.querySelector("[data-router-policy-status]")!.textContent).toContain("round_robin (v4)");
  });
});
