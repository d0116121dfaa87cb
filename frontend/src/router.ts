// History-API routing. Filters live in the query string so a URL reproduces what a person saw.

export interface RouteMatch {
  name: string;
  params: Record<string, string>;
  query: URLSearchParams;
}

const ROUTES: Array<[string, RegExp]> = [
  ["overview", /^\/$/],
  ["pool", /^\/pools\/(?<pool>[^/]+)\/?$/],
  ["jobs", /^\/jobs\/?$/],
  ["job", /^\/jobs\/(?<job>\d+)\/?$/],
  ["action", /^\/actions\/(?<action>\d+)\/?$/],
  ["policies", /^\/policies\/?$/],
  ["launch", /^\/launch\/?$/],
  ["gpus", /^\/gpus\/?$/],
  ["buffers", /^\/buffers\/?$/],
  ["buffer", /^\/buffers\/(?<buffer>\d+)\/?$/],
  ["rollouts", /^\/rollouts\/?$/],
];

export function matchRoute(pathname: string, search = ""): RouteMatch {
  for (const [name, pattern] of ROUTES) {
    const match = pattern.exec(pathname);
    if (match) {
      const params: Record<string, string> = {};
      for (const [key, value] of Object.entries(match.groups ?? {})) {
        params[key] = decodeURIComponent(value);
      }
      return { name, params, query: new URLSearchParams(search) };
    }
  }
  return { name: "not-found", params: {}, query: new URLSearchParams(search) };
}

/** Write `filters` into the URL's query string without a reload or a new history entry. */
export function replaceQuery(filters: Record<string, string | null | undefined>): void {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(filters)) {
    if (value !== null && value !== undefined && value !== "") query.set(key, value);
  }
  const text = query.toString();
  history.replaceState(history.state, "", `${location.pathname}${text ? `?${text}` : ""}`);
}
