"""A month with nothing to invoice is closed with the month after it, without an invoice: late usage for it is then
reconciled onto the next invoice like any closed month's (it was metered and invoiced nowhere), and installs whose
closes skipped such months before get them recorded by a migration, reconciled at the next refresh."""

from decimal import Decimal
from importlib import import_module

import time_machine
from django.apps import apps

from billing import services
from billing.choices import LineKind
from billing.models import ClosedMonth, Invoice, InvoiceLine
from portal.models import AuditEntry
from tests.billing.conftest import at

JAN, FEB, MARCH, APRIL = (at(1, month=month).date() for month in (1, 2, 3, 4))


def refresh(now):
    with time_machine.travel(now, tick=False):
        return services.refresh_usage(now=now)


def close(month, now):
    with time_machine.travel(now, tick=False):
        return services.close_month(month=month, now=now)


def billed_for(team, month) -> Decimal:
    own = sum((invoice.total for invoice in Invoice.objects.filter(team=team, month=month)), Decimal(0))
    adjusted = sum(
        (line.amount for line in InvoiceLine.objects.filter(invoice__team=team, adjusts_month=month)), Decimal(0)
    )
    return own + adjusted


def january_and_march_spill(pod, elastic_pool):
    pod(at(10, 10, month=1), at(10, 12, month=1), pool=elastic_pool)  # 2 GPU-hours × 6.50 = 13.00
    pod(at(10, 10, month=3), at(10, 12, month=3), pool=elastic_pool)
    refresh(at(1, 1, month=2))
    close(JAN, at(1, 1, month=2))
    refresh(at(1, 1, month=4))


def test_closing_a_month_closes_the_empty_months_before_it(team, elastic_pool, pod):
    january_and_march_spill(pod, elastic_pool)
    result = close(MARCH, at(1, 2, month=4))
    assert result.closed_now and result.invoices == 1
    assert set(ClosedMonth.objects.values_list("month", flat=True)) == {JAN, FEB, MARCH}
    assert not Invoice.objects.filter(month=FEB).exists()
    closes = AuditEntry.objects.filter(action="billing.close_month").order_by("pk")
    assert [(entry.after["month"], entry.after["invoices"]) for entry in closes] == [
        ("2026-01", 1),
        ("2026-02", 0),
        ("2026-03", 1),
    ]


def test_late_usage_of_a_month_closed_empty_is_invoiced_as_an_adjustment(team, elastic_pool, pod):
    january_and_march_spill(pod, elastic_pool)
    close(MARCH, at(1, 2, month=4))
    pod(at(14, 8, month=2), at(14, 18, month=2), pool=elastic_pool)  # recorded late: 10 GPU-hours × 6.50 = 65.00
    refresh(at(3, month=4))
    [line] = InvoiceLine.objects.filter(invoice__team=team, adjusts_month=FEB)
    assert (line.kind, line.quantity, line.amount) == (LineKind.ADJUSTMENT, Decimal("10.000000"), Decimal("65.00"))
    assert line.invoice.month == APRIL and billed_for(team, FEB) == Decimal("65.00")


def test_the_migration_records_months_skipped_before_and_the_refresh_bills_them(team, elastic_pool, pod):
    january_and_march_spill(pod, elastic_pool)
    close(MARCH, at(1, 2, month=4))
    ClosedMonth.objects.filter(month=FEB).delete()  # as a close before this change left it
    pod(at(14, 8, month=2), at(14, 18, month=2), pool=elastic_pool)
    refresh(at(3, month=4))
    assert billed_for(team, FEB) == Decimal("0")  # metered, invoiced nowhere

    migration = import_module("billing.migrations.0011_close_skipped_months")
    migration.close_skipped_months(apps, None)
    february = ClosedMonth.objects.get(month=FEB)
    assert february.needs_reconciling and not february.figures_kept
    assert february.closed_at == ClosedMonth.objects.get(month=MARCH).closed_at
    refresh(at(4, month=4))
    assert billed_for(team, FEB) == Decimal("65.00")
    migration.close_skipped_months(apps, None)  # again: nothing more
    assert ClosedMonth.objects.count() == 3
