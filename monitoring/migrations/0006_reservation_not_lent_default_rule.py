"""The alert of issue 12 (lending): a reservation idle, not lent, while other teams' jobs wait; its default rule as
an editable row, like 0002's."""

from django.db import migrations, models


def create_default(apps, schema_editor):
    AlertRule = apps.get_model("monitoring", "AlertRule")
    AlertRule.objects.get_or_create(
        kind="reservation_not_lent",
        pool=None,
        team=None,
        defaults={"threshold": 0, "for_seconds": 600, "severity": "warning"},
    )


def remove_default(apps, schema_editor):
    AlertRule = apps.get_model("monitoring", "AlertRule")
    AlertRule.objects.filter(kind="reservation_not_lent", pool=None, team=None).delete()


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0005_reservation_not_lent_kind")]

    operations = [migrations.RunPython(create_default, remove_default)]
