// Shapes of the GPU map, buffer and Rollouts endpoints (apps/dashboard/selectors_*.py).

import type { Bucket } from "./components/histogram";
import type { ActStats } from "./types";

export interface GpuCell {
  index: number;
  state: "busy" | "restoring" | "warm" | "free";
  warm: string[];
  action: number | null;
  service: string | null;
}

export interface CachedInstance {
  service: string;
  start: number;
  size: number;
  last_used: number | null;
  idle_s: number | null;
}

export interface GpuRunning {
  action: number;
  service: string | null;
  status: string;
  gpus: number[];
  held_s: number | null;
}

export interface GpuNode {
  id: number;
  name: string;
  pool: string;
  status: string;
  heartbeat_age_s: number | null;
  gpus: Array<{ index: number; memory_mb: number; model: string }>;
  nvlink_groups: number[][];
  cache: CachedInstance[];
  running: GpuRunning[];
  cells: GpuCell[];
  hosted: Record<string, { sizes?: number[]; kind?: string; error?: string }>;
}

export interface GpuService {
  name: string;
  pool: string | null;
  backend: string;
  task: string;
  allowed_dop: number[];
  memory_mb: number;
  queued: number;
  running: number;
  act: ActStats;
  queueing_mean_s: number | null;
  execution_mean_s: number | null;
  agent: AgentPhases;
  warm: Array<{ node: string; start: number; size: number }>;
  load_failures: Record<string, string>;
}

export interface GpuMap {
  t: number;
  pools: string[];
  nodes: GpuNode[];
  services: GpuService[];
  missing: string[];
}

export interface BufferSnapshotView {
  t: number;
  taken_at: string;
  held: number;
  fill: number;
  complete: number;
  actors: number;
  steps_written: number;
  steps_dropped: number;
  steps_evicted: number;
  samples: number;
  firings: Record<string, number>;
}

export interface BufferSummary {
  id: number;
  name: string;
  job: { id: number; name: string };
  capacity: number;
  eviction: string;
  sampler: string;
  sync_mode: string;
  latest: BufferSnapshotView | null;
}

export interface BuffersResponse {
  buffers: BufferSummary[];
}

export interface TriggerView {
  name: string;
  kind: string;
  params: Record<string, unknown>;
  target: string;
  enabled: boolean;
  firings: number | null;
}

/** An elastic actor of a workflow writing to the buffer, as it last reported (artos §4.3). */
export interface BufferActorView {
  workflow: string;
  actor: string;
  state: "checkpointed" | "prewarming" | "prewarmed" | "running" | "failed";
  invocations: number;
  restored: number;
  cold: number;
  last_startup_wait_s: number | null;
  last_restore_s: number | null;
  startup_wait_p50_s: number | null;
  startup_wait_p99_s: number | null;
  reported_at: string;
}

export interface BufferDetail {
  t: number;
  buffer: BufferSummary & { schema: Record<string, unknown>; config: Record<string, unknown> };
  triggers: TriggerView[];
  actors: BufferActorView[];
  history: BufferSnapshotView[];
  snapshot_age_s: number | null;
  missing: string[];
}

export interface LlmWorkerRow {
  name: string;
  trajectories: number;
  generating: number;
  tool_call: number;
  pending: number;
  tokens: number;
  predicted_remaining_tokens: number;
  // The worker's newest report through its router (null: none in the last 30 s, or the engine
  // does not report that figure).
  router?: string | null;
  healthy?: boolean | null;
  running_requests?: number | null;
  queued_requests?: number | null;
  kv_usage?: number | null;
  kv_used_tokens?: number | null;
  reported_at?: number | null;
}

export interface RouterPolicyRow {
  router: string;
  policy: string;
  predictor: string;
  version: number;
  changed_by: string | null;
  changed_at: number;
}

export interface RouterPolicies {
  policies: RouterPolicyRow[];
  unset: string[];
  policy_choices: { value: string; label: string }[];
  predictor_choices: { value: string; label: string }[];
}

export interface TrajectoryRow {
  id: number;
  job: number;
  training_step: number;
  group: string;
  sample: number;
  status: string;
  steps: number;
  tokens: number;
  predicted_remaining_tokens: number | null;
  worker: string | null;
  priority: number | null;
  migrations: number | null;
  queueing_s: number;
  generation_s: number;
  tool_s: number;
  total_s: number;
}

export interface GroupRow {
  job: number;
  training_step: number;
  group: string;
  samples: number;
  finished: number;
  pruned: number;
  failed: number;
  running: number;
}

export interface RouterGroupRow {
  group: string;
  job: string | null;
  prompts: number;
  candidates: number;
  running: number;
  finished: number;
  aborted: number;
  failed: number;
  at: number;
}

export interface RolloutsResponse {
  t: number;
  job: number | null;
  status: string;
  counts: Record<string, number>;
  unplaced: number;
  workers: LlmWorkerRow[];
  trajectories: TrajectoryRow[];
  router_fields: boolean;
  groups: GroupRow[];
  remaining_histogram: Bucket[];
  router_groups: RouterGroupRow[] | null;
  routers?: RouterPolicies;
  missing: string[];
}

/** What the GPU agents reported for a service's newest completions (arl-tangram §5.3). */
export interface AgentPhases {
  reported: number;
  restores: number;
  restore_mean_s: number | null;
  agent_queue_mean_s: number | null;
  execute_mean_s: number | null;
}
