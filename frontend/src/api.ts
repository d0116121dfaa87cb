// JSON over fetch with the session cookie and Django's CSRF token.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(ApiError.describe(status, body));
  }

  /** Field errors in Loom's error shape: {"errors": [{"field": ..., "reason": ...}]}. */
  get fieldErrors(): Array<{ field: string; reason: string }> {
    const errors = (this.body as { errors?: unknown })?.errors;
    return Array.isArray(errors) ? (errors as Array<{ field: string; reason: string }>) : [];
  }

  static describe(status: number, body: unknown): string {
    const errors = (body as { errors?: Array<{ field?: string; reason?: string }> })?.errors;
    if (Array.isArray(errors) && errors.length) {
      return errors.map((e) => (e.field ? `${e.field}: ${e.reason}` : `${e.reason}`)).join("; ");
    }
    const detail = (body as { detail?: string })?.detail;
    return detail ? `${status}: ${detail}` : `HTTP ${status}`;
  }
}

function csrfToken(): string {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) return decodeURIComponent(match[1]);
  return document.querySelector<HTMLMetaElement>('meta[name="csrf-token"]')?.content ?? "";
}

export const API_ROOT = "/dashboard/api";

export async function apiGet<T>(path: string, params?: Record<string, string>): Promise<T> {
  const query = params ? `?${new URLSearchParams(params).toString()}` : "";
  return request<T>("GET", `${path}${query}`);
}

export async function apiPost<T>(path: string, body: unknown = {}): Promise<T> {
  return request<T>("POST", path, body);
}

async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(`${API_ROOT}${path}`, {
    method,
    credentials: "same-origin",
    headers: {
      Accept: "application/json",
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      ...(method === "GET" ? {} : { "X-CSRFToken": csrfToken() }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const parsed: unknown = text ? JSON.parse(text) : null;
  if (response.status === 401 || response.status === 403) {
    if (response.status === 401) window.location.assign(`/login/?next=${location.pathname}`);
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed as T;
}
