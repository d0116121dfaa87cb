// The live LLM routers' policy on the Rollouts page: each router's routing policy and length
// predictor, who changed it and when, and (for the admin role only: the API refuses others with
// 403) a form to change it; the router adopts a change without a restart. Errors from the API
// name their field.

import { apiPost } from "../api";
import { h, replace } from "../dom";
import type { RouterPolicies, RouterPolicyRow } from "../planeTypes";

export function routerPolicyPanel(canChange: boolean): { element: HTMLElement; render(data: RouterPolicies | undefined): void } {
  const list = h("div", { "data-router-policies": "" });
  const status = h("p", { class: "muted", role: "status", "data-router-policy-status": "" });
  const routerInput = h("input", { name: "router", type: "text", placeholder: "router name", size: 12, required: true });
  const policySelect = h("select", { name: "policy" });
  const predictorSelect = h("select", { name: "predictor" });
  const form = h(
    "form",
    { class: "router-policy", "data-router-policy-form": "" },
    h("label", {}, "Router ", routerInput),
    h("label", {}, "Policy ", policySelect),
    h("label", {}, "Predictor ", predictorSelect),
    h("button", { type: "submit", class: "btn" }, "Set policy"),
  );
  let choicesShown = false;

  function row(p: RouterPolicyRow): HTMLElement {
    const when = new Date(p.changed_at * 1000).toLocaleString();
    return h(
      "li",
      { "data-router": p.router },
      h("strong", {}, p.router),
      `: ${p.policy}, ${p.predictor} (v${p.version}) — changed by ${p.changed_by ?? "unknown"} at ${when}`,
    );
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const router = routerInput.value.trim();
    status.textContent = "Saving…";
    apiPost<RouterPolicyRow>(`/rollouts/routers/${encodeURIComponent(router)}/policy`, {
      policy: policySelect.value,
      predictor: predictorSelect.value,
    }).then(
      (saved) => {
        status.textContent = `Router ${saved.router} now routes with ${saved.policy} (v${saved.version}).`;
      },
      (error: Error) => {
        status.textContent = error.message;
      },
    );
  });

  const readOnly = h("p", { class: "muted", "data-router-policy-read-only": "" }, "Changing a router's policy needs the admin role.");
  return {
    element: canChange ? h("div", {}, list, form, status) : h("div", {}, list, readOnly),
    render(data) {
      if (!data) return;
      if (!choicesShown) {
        replace(policySelect, ...data.policy_choices.map((c) => h("option", { value: c.value }, c.label)));
        replace(predictorSelect, ...data.predictor_choices.map((c) => h("option", { value: c.value }, c.label)));
        choicesShown = true;
      }
      const unset = data.unset.map((name) => h("li", { "data-router": name }, h("strong", {}, name), ": the policy it was started with (never set here)"));
      replace(list, data.policies.length || unset.length ? h("ul", {}, ...data.policies.map(row), ...unset) : h("p", { class: "muted" }, "No router has reported yet."));
    },
  };
}
