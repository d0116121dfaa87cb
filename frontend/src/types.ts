// Shapes of the dashboard's JSON (apps/dashboard/selectors.py and snapshots.py produce them).

export interface ActStats {
  p50: number | null;
  p99: number | null;
  mean: number | null;
  n: number;
}

export interface Utilisation {
  cpu: number | null;
  gpu: number | null;
  quota: number | null;
}

export interface PoolSnapshot {
  t: number;
  pool: string;
  kind?: string;
  waiting: number;
  running: number;
  oldest_wait_s: number | null;
  act: ActStats;
  util: Utilisation;
  /** The policy version the scheduler runs (only the scheduler's snapshots carry it). */
  policy_version?: number | null;
  /** A version the scheduler refused to apply, and why (it keeps running ``policy_version``). */
  policy_rejected?: { version: number; reason: string } | null;
  /** The version saved in the database (the database-backed snapshots carry it). */
  stored_policy_version?: number | null;
  head_wait_reason?: string | null;
}

/** What arrives on ``pool:<name>``: the database publisher sends every field, the scheduler
 * service a subset (``at`` for its clock, no ACT or utilisation). */
export type PoolEvent = Partial<PoolSnapshot> & { at?: number };

export interface RollupPoint {
  t: number;
  waiting: number;
  running: number;
  oldest_wait_s: number | null;
  act_p50: number | null;
  act_p99: number | null;
  act_mean: number | null;
  util_cpu: number | null;
  util_gpu: number | null;
  util_quota: number | null;
  active_trajectories?: number | null;
}

export interface OverviewResponse {
  pools: PoolSnapshot[];
  history: Record<string, RollupPoint[]>;
}

export interface Allocation {
  action: number;
  job: number | null;
  cores: number[];
  gpus: number[];
}

export interface NodeView {
  t?: number;
  id: number;
  name: string;
  pool: string;
  status: string;
  draining: boolean;
  heartbeat_age_s: number | null;
  cores_total: number;
  cores_used: number;
  gpus_total: number;
  gpus_used: number;
  allocations: Allocation[];
  services: Array<{ gpu: number | null; name: string; state: string }>;
}

export interface PoolDetail {
  pool: PoolSnapshot;
  nodes: NodeView[];
  history: RollupPoint[];
}

export interface JobSummary {
  id: number;
  name: string;
  status: string;
  counts: Record<string, number>;
  act: ActStats;
}

export interface PhaseStats {
  mean: number | null;
  p99: number | null;
}

export interface JobDetail {
  job: JobSummary;
  act_breakdown: { queueing: PhaseStats; execution: PhaseStats; overhead: PhaseStats; n: number };
  trajectories: {
    active: number;
    total: number;
    length_histogram: Array<{ lo: number; hi: number; count: number }>;
  };
  history: RollupPoint[];
}

export interface ActionRow {
  id: number;
  status: string;
  tool: string | null;
  pool: string | null;
  trajectory: number | null;
  submitted_at: string;
  started_at: string | null;
  finished_at: string | null;
  act_s: number | null;
  wait_reason: string | null;
}

export interface ActionPage {
  results: ActionRow[];
  next: string | null;
  total: number;
}

export interface ActionDetail {
  id: number;
  job: number;
  pool: string | null;
  status: string;
  tool: string | null;
  demand: unknown;
  allocation: unknown;
  node: { id: number; name: string } | null;
  timeline: Record<"submitted_at" | "scheduled_at" | "started_at" | "finished_at", string | null>;
  wait_reason: string | null;
  output_tail: string;
  output_bytes: number;
  output_truncated: boolean;
  exit_code: number | null;
  error: string;
  can_cancel: boolean;
}

export interface PolicyField {
  name: string;
  label: string;
  type: "int" | "float" | "bool" | "choice" | "json";
  min?: number | null;
  max?: number | null;
  choices?: string[];
  help?: string;
  default?: unknown;
}

export interface PolicyVersion {
  version: number;
  author: string | null;
  created_at: string;
  settings: Record<string, unknown>;
  diff: Array<{ field: string; old: unknown; new: unknown }>;
}

export interface PoolPolicies {
  pool: string;
  current: PolicyVersion | null;
  applied_version: number | null;
  versions: PolicyVersion[];
  /** Every field's default, the DoP ones clamped into this pool (the form's start values). */
  defaults?: Record<string, unknown>;
}

export interface PoliciesResponse {
  fields: PolicyField[];
  pools: PoolPolicies[];
}

export interface SimulationRun {
  id: number;
  status: string;
  params: Record<string, unknown>;
  result: {
    policies: Array<{
      label: string;
      settings: Record<string, unknown>;
      act: ActStats;
      act_cdf: Array<[number, number]>;
      makespan_s: number | null;
    }>;
  } | null;
  error: string;
}

export interface Me {
  username: string;
  role: "admin" | "operator" | "none";
}
