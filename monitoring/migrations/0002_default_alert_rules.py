"""The default alert rules of PRODUCT.md ("Alerts") as rows admins can edit."""

from django.db import migrations

DEFAULTS = [
    # kind, threshold, for (seconds), severity
    ("gpu_utilisation_low", 30, 3600, "warning"),
    ("gpu_utilisation_high", 80, 3600, "warning"),
    ("queue_wait", 30, 0, "warning"),
    ("spill_ratio", 20, 0, "warning"),
    ("failure_rate", 5, 0, "warning"),
    ("pod_pending", 3, 0, "critical"),
    ("gpu_memory_high", 85, 300, "warning"),
    ("gpu_temperature_high", 85, 120, "warning"),
    ("reservation_wasted", 30, 0, "warning"),
    ("capacity_missing", 0, 300, "critical"),
]


def create_defaults(apps, schema_editor):
    AlertRule = apps.get_model("monitoring", "AlertRule")
    for kind, threshold, for_seconds, severity in DEFAULTS:
        AlertRule.objects.get_or_create(
            kind=kind,
            pool=None,
            team=None,
            defaults={"threshold": threshold, "for_seconds": for_seconds, "severity": severity},
        )


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0001_initial")]

    operations = [migrations.RunPython(create_defaults, migrations.RunPython.noop)]
