"""The alert of issue 29 (budgets): this month's variable spend at 80 % of the team's budget; its default rule as an
editable row, like 0002's."""

from django.conf import settings
from django.db import migrations, models


def create_default(apps, schema_editor):
    AlertRule = apps.get_model("monitoring", "AlertRule")
    AlertRule.objects.get_or_create(
        kind="budget_used", pool=None, team=None, defaults={"threshold": 80, "for_seconds": 0, "severity": "warning"}
    )


def remove_default(apps, schema_editor):
    AlertRule = apps.get_model("monitoring", "AlertRule")
    AlertRule.objects.filter(kind="budget_used", pool=None, team=None).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('monitoring', '0006_reservation_not_lent_default_rule'),
        ('pools', '0011_volume_caps'),
        ('portal', '0008_membership_source_user_break_glass'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='alertrule',
            name='monitoring_alertrule_valid_kind',
        ),
        migrations.AlterField(
            model_name='alert',
            name='kind',
            field=models.CharField(choices=[('gpu_utilisation_low', 'GPU utilisation low'), ('gpu_utilisation_high', 'GPU utilisation high'), ('queue_wait', 'Queue wait too long'), ('spill_ratio', 'Spill ratio high'), ('failure_rate', 'Job failure rate high'), ('pod_pending', 'Pod pending'), ('gpu_memory_high', 'GPU memory high'), ('gpu_temperature_high', 'GPU temperature high'), ('reservation_wasted', 'Reservation idle while the team spills'), ('reservation_not_lent', 'Reservation idle, not lent, while others wait'), ('capacity_missing', 'Paid GPUs missing'), ('budget_used', 'Budget for the variable spend nearly used')], max_length=40, verbose_name='kind'),
        ),
        migrations.AlterField(
            model_name='alertrule',
            name='kind',
            field=models.CharField(choices=[('gpu_utilisation_low', 'GPU utilisation low'), ('gpu_utilisation_high', 'GPU utilisation high'), ('queue_wait', 'Queue wait too long'), ('spill_ratio', 'Spill ratio high'), ('failure_rate', 'Job failure rate high'), ('pod_pending', 'Pod pending'), ('gpu_memory_high', 'GPU memory high'), ('gpu_temperature_high', 'GPU temperature high'), ('reservation_wasted', 'Reservation idle while the team spills'), ('reservation_not_lent', 'Reservation idle, not lent, while others wait'), ('capacity_missing', 'Paid GPUs missing'), ('budget_used', 'Budget for the variable spend nearly used')], max_length=40, verbose_name='alert'),
        ),
        migrations.AddConstraint(
            model_name='alertrule',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['gpu_utilisation_low', 'gpu_utilisation_high', 'queue_wait', 'spill_ratio', 'failure_rate', 'pod_pending', 'gpu_memory_high', 'gpu_temperature_high', 'reservation_wasted', 'reservation_not_lent', 'capacity_missing', 'budget_used'])), name='monitoring_alertrule_valid_kind'),
        ),
        migrations.RunPython(create_default, remove_default),
    ]
