import { describe, expect, it } from "vitest";
import type { BufferActorView } from "../planeTypes";
import { actorStateCounts, actorStateLabel, actorTable, startSplit } from "./bufferView";

function actor(name: string, state: BufferActorView["state"], restored = 3, cold = 1): BufferActorView {
  return {
    workflow: "ppo", actor: name, state, invocations: restored + cold, restored, cold,
    last_startup_wait_s: 0.012, last_restore_s: 0.004, startup_wait_p50_s: 0.001, startup_wait_p99_s: 0.25,
    reported_at: "2026-11-25T11:00:00Z",
  };
}

describe("buffer actors", () => {
  it("names the states as the page shows them", () => {
    expect(actorStateLabel("prewarmed")).toBe("pre-warmed");
    expect(actorStateLabel("checkpointed")).toBe("checkpointed");
    expect(actorStateLabel("hibernating")).toBe("hibernating");
  });

  it("splits restored and cold starts", () => {
    expect(startSplit({ restored: 3, cold: 1 })).toBe("3 / 1 (75% restored)");
    expect(startSplit({ restored: 0, cold: 0 })).toBe("0 / 0");
  });

  it("counts actors per state in a fixed order", () => {
    const counts = actorStateCounts([actor("a", "running"), actor("b", "prewarmed"), actor("c", "running")]);
    expect(counts).toEqual([["pre-warmed", 1], ["running", 2]]);
    expect(actorStateCounts([])).toEqual([]);
  });

  it("renders a row per actor with its state, starts and start-up waits", () => {
    const table = actorTable();
    table.render([actor("actor0", "prewarmed"), actor("actor1", "failed", 0, 1)]);
    const el = table.element;
    expect(el.querySelectorAll("tbody tr").length).toBe(2);
    expect(el.querySelector('[data-actor-state="ppo/actor0"]')!.textContent).toBe("pre-warmed");
    expect(el.querySelector('[data-actor-state="ppo/actor1"]')!.className).toContain("actor-failed");
    expect(el.querySelector('[data-actor-starts="ppo/actor1"]')!.textContent).toBe("0 / 1 (0.0% restored)");
    expect(el.querySelector('[data-actor-p99="ppo/actor0"]')!.textContent).toBe("250 ms");
    table.render([]);
    expect(el.textContent).toContain("No workflow has reported actors");
  });
});
