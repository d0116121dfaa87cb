"""Services registered before the registry's rules: ``allowed_dop`` kept to the GPU manager's
chunk sizes (1, 2, 4, 8), one GPU where none is left, so every stored service passes the rules
the REST API and the admin apply (``apps.resources.service_rules``)."""

from django.db import migrations

CHUNK_SIZES = (1, 2, 4, 8)


def clean_chunk_sizes(apps, schema_editor):
    Service = apps.get_model("resources", "Service")
    for service in Service.objects.all():
        sizes = service.allowed_dop if isinstance(service.allowed_dop, list) else []
        cleaned = sorted({size for size in sizes if size in CHUNK_SIZES}) or [1]
        if cleaned != sizes:
            service.allowed_dop = cleaned
            service.save(update_fields=["allowed_dop"])


class Migration(migrations.Migration):
    dependencies = [("resources", "0005_service_vocab_size")]

    operations = [migrations.RunPython(clean_chunk_sizes, migrations.RunPython.noop)]
