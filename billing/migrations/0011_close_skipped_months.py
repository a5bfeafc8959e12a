"""Months that a close skipped because they had nothing to invoice were left without a ClosedMonth: late usage for
one of them was metered but invoiced nowhere (no draft is made for a month before the open ones, and only closed
months are reconciled). Each such month, from the oldest data to the last closed month, is recorded as closed when
the month after it was, and marked for reconciling: the next refresh puts whatever it costs now onto the next invoice
as adjustment lines (nothing, for a month that still has nothing)."""

from django.db import migrations
from django.db.models import Min


def _month(moment):
    return moment.date().replace(day=1) if hasattr(moment, "date") else moment.replace(day=1)


def _next(month):
    return month.replace(year=month.year + 1, month=1) if month.month == 12 else month.replace(month=month.month + 1)


def close_skipped_months(apps, schema_editor):
    ClosedMonth = apps.get_model("billing", "ClosedMonth")
    UsageInterval = apps.get_model("billing", "UsageInterval")
    Reservation = apps.get_model("pools", "Reservation")
    closed = {row.month: row for row in ClosedMonth.objects.all()}
    if not closed:
        return
    starts = [
        UsageInterval.objects.filter(team__isnull=False).aggregate(at=Min("started_at"))["at"],
        Reservation.objects.aggregate(at=Min("starts_at"))["at"],
    ]
    month = min([_month(moment) for moment in starts if moment is not None] + list(closed))
    last = max(closed)
    while month < last:
        if month not in closed:
            after = next(closed[later] for later in sorted(closed) if later > month)
            ClosedMonth.objects.create(
                month=month, closed_at=after.closed_at, closed_by=None, needs_reconciling=True, figures_kept=False
            )
        month = _next(month)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0010_invoiced_usage"),
        ("pools", "0012_contract_changes"),
    ]

    operations = [migrations.RunPython(close_skipped_months, migrations.RunPython.noop)]
