import { beforeEach, describe, expect, it, vi } from "vitest";
import { LiveSocket, type SocketLike } from "./live";

class FakeSocket implements SocketLike {
  readyState = 0;
  sent: Array<Record<string, unknown>> = [];
  onopen: ((ev: Event) => void) | null = null;
  onmessage: ((ev: MessageEvent) => void) | null = null;
  onclose: ((ev: CloseEvent) => void) | null = null;
  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }
  close(): void {
    this.readyState = 3;
    this.onclose?.({} as CloseEvent);
  }
  open(): void {
    this.readyState = 1;
    this.onopen?.({} as Event);
  }
  deliver(message: Record<string, unknown>): void {
    this.onmessage?.({ data: JSON.stringify(message) } as MessageEvent);
  }
}

function setVisibility(state: "visible" | "hidden"): void {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => state });
  document.dispatchEvent(new Event("visibilitychange"));
}

describe("LiveSocket", () => {
  let sockets: FakeSocket[];
  let live: LiveSocket;

  beforeEach(() => {
    setVisibility("visible");
    sockets = [];
    live = new LiveSocket("ws://x/ws/", {
      factory: () => {
        const socket = new FakeSocket();
        sockets.push(socket);
        return socket;
      },
      reconnectDelayMs: 1,
    });
  });

  it("subscribes once per group however many handlers watch it", () => {
    sockets[0].open();
    const a = vi.fn();
    const b = vi.fn();
    const stopA = live.subscribe("pool:cpu", a);
    const stopB = live.subscribe("pool:cpu", b);
    expect(sockets[0].sent.filter((m) => m.op === "subscribe")).toHaveLength(1);
    sockets[0].deliver({ op: "event", group: "pool:cpu", data: { waiting: 3 } });
    expect(a).toHaveBeenCalledWith({ waiting: 3 });
    expect(b).toHaveBeenCalledWith({ waiting: 3 });
    stopA();
    expect(sockets[0].sent.some((m) => m.op === "unsubscribe")).toBe(false);
    stopB();
    expect(sockets[0].sent.at(-1)).toEqual({ op: "unsubscribe", group: "pool:cpu" });
  });

  it("resubscribes subscriptions made before the socket opened", () => {
    live.subscribe("job:7", () => {});
    sockets[0].open();
    expect(sockets[0].sent).toContainEqual({ op: "subscribe", group: "job:7" });
  });

  it("pauses while hidden and refetches once on resume", () => {
    sockets[0].open();
    const handler = vi.fn();
    const refetch = vi.fn();
    live.subscribe("pool:cpu", handler);
    live.onResume(refetch);
    setVisibility("hidden");
    expect(sockets[0].sent.at(-1)).toEqual({ op: "pause" });
    expect(live.state).toBe("paused");
    sockets[0].deliver({ op: "event", group: "pool:cpu", data: {} });
    expect(handler).not.toHaveBeenCalled();
    setVisibility("visible");
    expect(sockets[0].sent.at(-1)).toEqual({ op: "resume" });
    expect(refetch).toHaveBeenCalledTimes(1);
    expect(live.state).toBe("live");
  });

  it("records refused subscriptions", () => {
    sockets[0].open();
    live.subscribe("job:9", () => {});
    sockets[0].deliver({ op: "error", group: "job:9", reason: "not found: job:9" });
    expect(live.refusal("job:9")).toBe("not found: job:9");
  });

  it("matches command results by id", async () => {
    sockets[0].open();
    const pending = live.command("policy.update", { pool: "cpu" });
    const sent = sockets[0].sent.at(-1)!;
    expect(sent.name).toBe("policy.update");
    sockets[0].deliver({ op: "result", id: sent.id, ok: false, reason: "forbidden" });
    await expect(pending).resolves.toMatchObject({ ok: false, reason: "forbidden" });
  });

  it("reconnects, resubscribes and asks pages to refetch", async () => {
    sockets[0].open();
    live.subscribe("pool:gpu", () => {});
    const refetch = vi.fn();
    live.onResume(refetch);
    sockets[0].close();
    expect(live.state).toBe("offline");
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(sockets).toHaveLength(2);
    sockets[1].open();
    expect(sockets[1].sent).toContainEqual({ op: "subscribe", group: "pool:gpu" });
    expect(refetch).toHaveBeenCalledTimes(1);
    live.close();
  });
});
