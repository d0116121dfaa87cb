// The dashboard's entry point: header, router, one live socket, theme.

import "./styles.css";
import { apiGet } from "./api";
import type { Page, PageContext } from "./context";
import { h, replace } from "./dom";
import { LiveSocket, socketUrl } from "./live";
import { actionPage } from "./pages/action";
import { bufferPage, buffersPage } from "./pages/buffers";
import { gpusPage } from "./pages/gpus";
import { jobPage, jobsPage } from "./pages/jobs";
import { launchPage } from "./pages/launch";
import { overviewPage } from "./pages/overview";
import { policiesPage } from "./pages/policies";
import { poolPage } from "./pages/pool";
import { rolloutsPage } from "./pages/rollouts";
import { matchRoute } from "./router";
import { applyTheme, nextTheme, saveTheme, storedTheme } from "./theme";
import type { Me } from "./types";

const PAGES: Record<string, (ctx: PageContext) => Page> = {
  overview: overviewPage,
  pool: poolPage,
  jobs: jobsPage,
  job: jobPage,
  action: actionPage,
  policies: policiesPage,
  launch: launchPage,
  gpus: gpusPage,
  buffers: buffersPage,
  buffer: bufferPage,
  rollouts: rolloutsPage,
};

async function boot(): Promise<void> {
  let theme = applyTheme(storedTheme());
  const me = await apiGet<Me>("/me");
  const live = new LiveSocket(socketUrl());
  const main = h("main", { id: "content" });
  const liveBadge = h("span", { class: "live-state", "data-live-state": "connecting", title: "live updates" }, "connecting");
  live.onState((state) => {
    liveBadge.textContent = state;
    liveBadge.dataset.liveState = state;
  });
  const nav = h(
    "nav",
    {},
    ...[
      ["/", "Overview"],
      ["/jobs", "Jobs"],
      ["/gpus", "GPUs"],
      ["/rollouts", "Rollouts"],
      ["/buffers", "Buffers"],
      ["/policies", "Policies"],
      ["/launch", "Launch"],
    ].map(([href, label]) => h("a", { href, "data-link": "", "data-nav": label.toLowerCase() }, label)),
  );
  const themeButton = h("button", { type: "button", class: "btn ghost", "aria-label": "toggle theme" }, theme === "dark" ? "☀ light" : "☾ dark");
  const header = h(
    "header",
    { class: "topbar" },
    h("a", { class: "brand", href: "/", "data-link": "" }, "Loom"),
    nav,
    h("span", { class: "spacer" }),
    liveBadge,
    themeButton,
    h("span", { class: "user" }, `${me.username} · ${me.role}`),
    h("form", { method: "post", action: "/logout/" }, csrfInput(), h("button", { type: "submit", class: "btn ghost" }, "Log out")),
  );
  document.body.replaceChildren(header, main);

  let page: Page | null = null;
  const render = () => {
    page?.destroy();
    const route = matchRoute(location.pathname, location.search);
    for (const link of nav.querySelectorAll("a")) {
      link.classList.toggle("active", link.getAttribute("href") === `/${location.pathname.split("/")[1]}`);
    }
    const factory = PAGES[route.name];
    if (!factory) {
      page = { element: h("div", { class: "page" }, h("h1", {}, "Not found"), h("p", {}, location.pathname)), destroy() {} };
    } else {
      page = factory({ live, route, me, navigate });
    }
    replace(main, page.element);
    document.title = `Loom · ${route.name}`;
  };
  const navigate = (path: string) => {
    history.pushState(null, "", path);
    render();
  };
  document.addEventListener("click", (event) => {
    const link = (event.target as Element).closest?.("a[data-link]");
    if (!link || (event as MouseEvent).ctrlKey || (event as MouseEvent).metaKey) return;
    event.preventDefault();
    navigate(link.getAttribute("href") ?? "/");
  });
  window.addEventListener("popstate", render);
  themeButton.addEventListener("click", () => {
    theme = nextTheme(theme);
    saveTheme(theme);
    applyTheme(theme);
    themeButton.textContent = theme === "dark" ? "☀ light" : "☾ dark";
    page?.retheme?.();
  });
  render();
}

function csrfInput(): HTMLInputElement {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return h("input", { type: "hidden", name: "csrfmiddlewaretoken", value: match ? decodeURIComponent(match[1]) : "" });
}

void boot();
