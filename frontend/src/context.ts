// What every page receives: the live socket, the route, the user's role and navigation.

import type { LiveSocket } from "./live";
import type { RouteMatch } from "./router";
import type { Me } from "./types";

export interface PageContext {
  live: LiveSocket;
  route: RouteMatch;
  me: Me;
  navigate: (path: string) => void;
}

export interface Page {
  element: HTMLElement;
  destroy(): void;
  /** Called when the theme changes (charts rebuild their colours). */
  retheme?(): void;
}
