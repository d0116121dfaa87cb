// Bars of an equal-width histogram (apps/metrics/stats.py ``histogram``): one per bucket.

import { type Child, h } from "../dom";

export interface Bucket {
  lo: number;
  hi: number;
  count: number;
}

/** The bars of `buckets`, each titled with its range and count in `unit`, or `empty` when none. */
export function histogramBars(buckets: Bucket[], unit: string, empty: string): Child[] {
  if (!buckets.length) return [h("p", { class: "muted" }, empty)];
  const peak = Math.max(1, ...buckets.map((b) => b.count));
  return buckets.map((bucket) =>
    h(
      "div",
      { class: "bar", title: `${bucket.lo}–${bucket.hi} ${unit}: ${bucket.count}` },
      h("span", { style: `height:${((bucket.count / peak) * 100).toFixed(0)}%` }),
      h("small", {}, String(bucket.lo)),
    ),
  );
}
