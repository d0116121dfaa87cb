// A plain data table: columns describe how to render a row.

import { type Child, h, replace } from "../dom";

export interface Column<T> {
  header: string;
  cell: (row: T) => Child;
  className?: string;
}

export class DataTable<T> {
  readonly element: HTMLTableElement;
  private readonly body: HTMLTableSectionElement;

  constructor(
    private readonly columns: Column<T>[],
    private readonly emptyText = "Nothing here yet.",
  ) {
    this.body = h("tbody", {});
    this.element = h(
      "table",
      { class: "data" },
      h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { class: c.className ?? "" }, c.header)))),
      this.body,
    );
  }

  render(rows: T[], append = false): void {
    const trs = rows.map((row) =>
      h("tr", {}, ...this.columns.map((c) => h("td", { class: c.className ?? "" }, c.cell(row)))),
    );
    if (append) {
      for (const tr of trs) this.body.appendChild(tr);
      return;
    }
    if (!trs.length) {
      replace(this.body, h("tr", {}, h("td", { colspan: this.columns.length, class: "muted" }, this.emptyText)));
      return;
    }
    replace(this.body, ...trs);
  }
}

export function statusBadge(status: string): HTMLElement {
  return h("span", { class: `badge status-${status}` }, status);
}
