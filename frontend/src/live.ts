// One multiplexed websocket for the whole tab (apps/dashboard/consumers.py speaks the other end).
//
// Pages subscribe to topics ("pool:cpu", "node:3", "job:7") with a handler; subscriptions are
// reference counted so two widgets watching one pool cost one server subscription. While the tab
// is hidden the socket sends {"op":"pause"} and the server stops forwarding; when it is visible
// again it sends {"op":"resume"} and calls every resume listener once, so pages refetch one time
// instead of replaying what they missed.

export type EventHandler = (data: unknown) => void;
export type LiveState = "connecting" | "live" | "paused" | "offline";

export interface SocketLike {
  readyState: number;
  send(data: string): void;
  close(): void;
  onopen: ((ev: Event) => void) | null;
  onmessage: ((ev: MessageEvent) => void) | null;
  onclose: ((ev: CloseEvent) => void) | null;
}

export interface CommandResult {
  ok: boolean;
  reason?: string;
  errors?: Array<{ field: string; reason: string }>;
  [key: string]: unknown;
}

interface LiveOptions {
  factory?: (url: string) => SocketLike;
  doc?: Document;
  reconnectDelayMs?: number;
}

const OPEN = 1;

export class LiveSocket {
  private socket: SocketLike | null = null;
  private readonly handlers = new Map<string, Set<EventHandler>>();
  private readonly refusals = new Map<string, string>();
  private readonly pendingCommands = new Map<number, (result: CommandResult) => void>();
  private readonly resumeListeners = new Set<() => void>();
  private readonly stateListeners = new Set<(state: LiveState) => void>();
  private nextCommandId = 1;
  private hidden = false;
  private closed = false;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  private attempts = 0;
  state: LiveState = "connecting";

  constructor(
    private readonly url: string,
    private readonly options: LiveOptions = {},
  ) {
    const doc = options.doc ?? document;
    this.hidden = doc.visibilityState === "hidden";
    doc.addEventListener("visibilitychange", () => this.onVisibility(doc.visibilityState));
    this.connect();
  }

  /** Watch `group`; returns the function that stops watching. */
  subscribe(group: string, handler: EventHandler): () => void {
    let set = this.handlers.get(group);
    if (!set) {
      set = new Set();
      this.handlers.set(group, set);
      this.send({ op: "subscribe", group });
    }
    set.add(handler);
    return () => {
      const current = this.handlers.get(group);
      if (!current) return;
      current.delete(handler);
      if (current.size === 0) {
        this.handlers.delete(group);
        this.send({ op: "unsubscribe", group });
      }
    };
  }

  /** Why the server refused a subscription (permission or unknown object), if it did. */
  refusal(group: string): string | undefined {
    return this.refusals.get(group);
  }

  /** Run an operator command over the socket (permission-checked on the server). */
  command(name: string, args: Record<string, unknown>): Promise<CommandResult> {
    const id = this.nextCommandId++;
    return new Promise((resolve) => {
      if (!this.send({ op: "command", id, name, args })) {
        resolve({ ok: false, reason: "not connected" });
        return;
      }
      this.pendingCommands.set(id, resolve);
    });
  }

  /** Called once each time live data resumes after a pause or a reconnect. */
  onResume(listener: () => void): () => void {
    this.resumeListeners.add(listener);
    return () => this.resumeListeners.delete(listener);
  }

  onState(listener: (state: LiveState) => void): () => void {
    this.stateListeners.add(listener);
    listener(this.state);
    return () => this.stateListeners.delete(listener);
  }

  close(): void {
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.socket?.close();
  }

  private connect(): void {
    const factory = this.options.factory ?? ((url: string) => new WebSocket(url) as SocketLike);
    const socket = factory(this.url);
    this.socket = socket;
    this.setState("connecting");
    socket.onopen = () => {
      const reconnected = this.attempts > 0;
      this.attempts = 0;
      for (const group of this.handlers.keys()) this.send({ op: "subscribe", group });
      if (this.hidden) this.send({ op: "pause" });
      this.setState(this.hidden ? "paused" : "live");
      if (reconnected) this.fireResume();
    };
    socket.onmessage = (event) => this.onMessage(String(event.data));
    socket.onclose = () => {
      for (const resolve of this.pendingCommands.values()) {
        resolve({ ok: false, reason: "connection lost" });
      }
      this.pendingCommands.clear();
      this.setState("offline");
      if (this.closed) return;
      this.attempts += 1;
      const base = this.options.reconnectDelayMs ?? 1000;
      const delay = Math.min(base * 2 ** Math.min(this.attempts - 1, 5), 30_000);
      this.reconnectTimer = setTimeout(() => this.connect(), delay);
    };
  }

  private onMessage(text: string): void {
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    const group = typeof message.group === "string" ? message.group : "";
    switch (message.op) {
      case "event": {
        if (this.hidden) return;
        for (const handler of this.handlers.get(group) ?? []) handler(message.data);
        break;
      }
      case "subscribed":
        this.refusals.delete(group);
        break;
      case "error":
        if (group) this.refusals.set(group, String(message.reason));
        break;
      case "result": {
        const resolve = this.pendingCommands.get(Number(message.id));
        if (resolve) {
          this.pendingCommands.delete(Number(message.id));
          resolve(message as unknown as CommandResult);
        }
        break;
      }
      default:
        break;
    }
  }

  private onVisibility(visibility: DocumentVisibilityState): void {
    const hidden = visibility === "hidden";
    if (hidden === this.hidden) return;
    this.hidden = hidden;
    if (hidden) {
      this.send({ op: "pause" });
      this.setState("paused");
    } else {
      this.send({ op: "resume" });
      this.setState(this.socket?.readyState === OPEN ? "live" : "offline");
      this.fireResume();
    }
  }

  private fireResume(): void {
    for (const listener of this.resumeListeners) listener();
  }

  private send(message: Record<string, unknown>): boolean {
    if (!this.socket || this.socket.readyState !== OPEN) return false;
    this.socket.send(JSON.stringify(message));
    return true;
  }

  private setState(state: LiveState): void {
    if (state === this.state) return;
    this.state = state;
    for (const listener of this.stateListeners) listener(state);
  }
}

export function socketUrl(loc: Location = window.location): string {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${loc.host}/ws/`;
}
