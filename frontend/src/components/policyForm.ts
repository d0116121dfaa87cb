// The validated policy form: built from the server's field specs, checked in the browser for
// quick feedback and again by the server (whose field errors are shown next to each input).

import { h, replace } from "../dom";
import type { PolicyField } from "../types";

export type PolicyValues = Record<string, unknown>;

/** Check one value against its spec; returns the reason it is invalid, or null. */
export function validateField(field: PolicyField, raw: string | boolean): string | null {
  if (field.type === "bool") return null;
  const text = String(raw).trim();
  if (field.type === "choice") {
    return field.choices?.includes(text) ? null : `must be one of ${field.choices?.join(", ")}`;
  }
  if (field.type === "json") {
    if (!text) return null;
    try {
      JSON.parse(text);
      return null;
    } catch {
      return "must be valid JSON";
    }
  }
  if (text === "") return "is required";
  const value = Number(text);
  if (!Number.isFinite(value)) return "must be a number";
  if (field.type === "int" && !Number.isInteger(value)) return "must be a whole number";
  if (field.min !== null && field.min !== undefined && value < field.min) return `must be ≥ ${field.min}`;
  if (field.max !== null && field.max !== undefined && value > field.max) return `must be ≤ ${field.max}`;
  return null;
}

export function parseField(field: PolicyField, raw: string | boolean): unknown {
  if (field.type === "bool") return Boolean(raw);
  if (field.type === "int" || field.type === "float") return Number(String(raw).trim());
  if (field.type === "json") return String(raw).trim() ? JSON.parse(String(raw)) : null;
  return String(raw).trim();
}

/** Cross-field rules the browser can check (the server checks them too). */
export function crossFieldErrors(values: PolicyValues): Record<string, string> {
  const errors: Record<string, string> = {};
  const low = values.min_dop;
  const high = values.max_dop;
  if (typeof low === "number" && typeof high === "number" && low > high) {
    errors.max_dop = `must be ≥ min_dop (${low})`;
  }
  return errors;
}

export class PolicyForm {
  readonly element: HTMLFormElement;
  private readonly inputs = new Map<string, HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>();
  private readonly messages = new Map<string, HTMLElement>();
  private readonly submit: HTMLButtonElement;
  readonly status: HTMLElement;

  constructor(
    private readonly fields: PolicyField[],
    values: PolicyValues,
    readOnly: boolean,
    private readonly onSubmit: (values: PolicyValues) => Promise<void>,
  ) {
    this.submit = h("button", { type: "submit", class: "btn primary", disabled: readOnly }, "Save new version");
    this.status = h("p", { class: "notice", role: "status" });
    const rows = fields.map((field) => {
      const input = this.inputFor(field, values[field.name] ?? field.default, readOnly);
      this.inputs.set(field.name, input);
      const message = h("span", { class: "field-error", "data-error-for": field.name });
      this.messages.set(field.name, message);
      return h(
        "label",
        { class: "field" },
        h("span", { class: "field-label" }, field.label),
        input,
        field.help ? h("small", { class: "muted" }, field.help) : null,
        message,
      );
    });
    this.element = h(
      "form",
      { class: "policy-form", novalidate: true },
      ...rows,
      readOnly ? h("p", { class: "muted read-only" }, "Read-only role: you can look but not change policies.") : null,
      this.submit,
      this.status,
    );
    this.element.addEventListener("submit", (event) => {
      event.preventDefault();
      if (!readOnly) void this.trySubmit();
    });
  }

  /** Collect and validate; null if anything is invalid (messages shown). */
  collect(): PolicyValues | null {
    const values: PolicyValues = {};
    let ok = true;
    for (const field of this.fields) {
      const input = this.inputs.get(field.name)!;
      const raw = input instanceof HTMLInputElement && input.type === "checkbox" ? input.checked : input.value;
      const reason = validateField(field, raw);
      this.showError(field.name, reason);
      if (reason) ok = false;
      else values[field.name] = parseField(field, raw);
    }
    if (!ok) return null;
    const cross = crossFieldErrors(values);
    for (const [name, reason] of Object.entries(cross)) this.showError(name, reason);
    return Object.keys(cross).length ? null : values;
  }

  showServerErrors(errors: Array<{ field: string; reason: string }>): void {
    for (const error of errors) {
      const name = error.field.replace(/^settings\./, "");
      if (this.messages.has(name)) this.showError(name, error.reason);
      else this.status.textContent = `${error.field}: ${error.reason}`;
    }
  }

  private showError(name: string, reason: string | null): void {
    const message = this.messages.get(name);
    if (message) replace(message, reason ?? "");
    this.inputs.get(name)?.setAttribute("aria-invalid", reason ? "true" : "false");
  }

  private async trySubmit(): Promise<void> {
    const values = this.collect();
    if (!values) {
      this.status.textContent = "Fix the highlighted fields.";
      return;
    }
    this.submit.disabled = true;
    try {
      await this.onSubmit(values);
    } finally {
      this.submit.disabled = false;
    }
  }

  private inputFor(field: PolicyField, value: unknown, readOnly: boolean) {
    if (field.type === "bool") {
      return h("input", { type: "checkbox", name: field.name, checked: Boolean(value), disabled: readOnly });
    }
    if (field.type === "choice") {
      return h(
        "select",
        { name: field.name, disabled: readOnly },
        ...(field.choices ?? []).map((c) => h("option", { value: c, selected: c === value }, c)),
      );
    }
    if (field.type === "json") {
      const area = h("textarea", { name: field.name, rows: 3, disabled: readOnly });
      area.value = value === null || value === undefined ? "" : JSON.stringify(value);
      return area;
    }
    return h("input", {
      name: field.name,
      type: "number",
      step: field.type === "int" ? 1 : "any",
      min: field.min ?? null,
      max: field.max ?? null,
      value: value === null || value === undefined ? "" : String(value),
      disabled: readOnly,
    });
  }
}
