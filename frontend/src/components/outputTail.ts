// A bounded output tail: the server sends at most its last N bytes and the browser never renders
// more than MAX_LINES lines, so a multi-gigabyte log cannot hang the tab.

import { h } from "../dom";

export const MAX_LINES = 2000;

export function boundedLines(text: string, maxLines = MAX_LINES): { lines: string[]; dropped: number } {
  const lines = text.split("\n");
  if (lines.length <= maxLines) return { lines, dropped: 0 };
  return { lines: lines.slice(lines.length - maxLines), dropped: lines.length - maxLines };
}

export function outputTailView(text: string, totalBytes: number, truncated: boolean): HTMLElement {
  const { lines, dropped } = boundedLines(text);
  const note =
    truncated || dropped
      ? h(
          "p",
          { class: "muted" },
          `showing the last ${lines.length} lines of ${totalBytes.toLocaleString("en-US")} bytes`,
        )
      : null;
  const pre = h("pre", { class: "output-tail", tabindex: 0 });
  pre.textContent = lines.join("\n") || "(no output)";
  return h("div", {}, note, pre);
}
