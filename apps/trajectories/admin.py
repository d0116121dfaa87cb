from django.contrib import admin

from apps.trajectories.models import Trajectory


@admin.register(Trajectory)
class TrajectoryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "job",
        "training_step",
        "group_id",
        "sample_index",
        "status",
        "tokens",
        "steps",
        "predicted_remaining_tokens",
        "llm_worker",
        "reward",
        "updated_at",
    ]
    list_filter = ["status", "job", "training_step"]
    search_fields = ["=id", "prompt_id", "group_id", "llm_worker", "job__name"]
    readonly_fields = ["created_at", "updated_at", "finished_at"]
    raw_id_fields = ["job"]
    list_select_related = ["job"]
