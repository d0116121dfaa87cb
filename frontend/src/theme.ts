// Light and dark themes: the choice is kept in localStorage; "auto" follows the system.

export type ThemeChoice = "light" | "dark" | "auto";
const KEY = "loom-theme";

export function storedTheme(storage: Storage = localStorage): ThemeChoice {
  const value = storage.getItem(KEY);
  return value === "light" || value === "dark" ? value : "auto";
}

export function effectiveTheme(choice: ThemeChoice, prefersDark: boolean): "light" | "dark" {
  if (choice === "auto") return prefersDark ? "dark" : "light";
  return choice;
}

export function applyTheme(choice: ThemeChoice, root: HTMLElement = document.documentElement): "light" | "dark" {
  const prefersDark = typeof matchMedia === "function" && matchMedia("(prefers-color-scheme: dark)").matches;
  const theme = effectiveTheme(choice, prefersDark);
  root.dataset.theme = theme;
  return theme;
}

export function nextTheme(current: "light" | "dark"): "light" | "dark" {
  return current === "dark" ? "light" : "dark";
}

export function saveTheme(choice: ThemeChoice, storage: Storage = localStorage): void {
  storage.setItem(KEY, choice);
}
