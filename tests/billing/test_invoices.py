"""Invoices: drafts kept current while the month is open, frozen at close, later data as adjustments."""

import io
from decimal import Decimal

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import DatabaseError, transaction
from django.urls import reverse

from billing import services, tasks, usage
from billing.choices import InvoiceStatus, LineKind
from billing.models import ClosedMonth, Invoice, InvoiceLine, StaleDay, UsageInterval
from portal.models import AuditEntry
from tests.billing.conftest import at

MARCH = at(1).date()
APRIL = at(1, month=4).date()
FULL_MARCH_FEE = Decimal("39200.00")  # 4 GPUs × 9,800.00


def refresh(now):
    with time_machine.travel(now, tick=False):
        return services.refresh_usage(now=now)


def lines(invoice):
    return sorted((line.kind, line.amount) for line in invoice.lines.all())


def test_draft_accrues_while_the_month_is_open_and_follows_new_data(team, reservation, pod):
    pod(at(2, 10), at(2, 12), gpus=6)  # 2 GPUs over the reservation for 2 hours: 4 GPU-hours × 18 = 72.00
    refresh(at(16, 12))  # March is exactly half over
    draft = Invoice.objects.get(team=team, month=MARCH)
    assert draft.status == InvoiceStatus.DRAFT
    assert lines(draft) == [(LineKind.OVERAGE, Decimal("72.00")), (LineKind.RESERVATION_FEE, Decimal("19600.00"))]
    assert draft.total == Decimal("19672.00")

    pod(at(16, 13), at(16, 14), gpus=5)  # arrives later: 1 GPU-hour over → 18.00 more
    refresh(at(20))
    draft.refresh_from_db()
    assert (LineKind.OVERAGE, Decimal("90.00")) in lines(draft)
    assert Invoice.objects.filter(team=team, month=MARCH).count() == 1


def test_closing_freezes_the_invoice_and_closing_twice_does_nothing(team, reservation, pod, platform_admin):
    pod(at(2, 10), at(2, 12), gpus=6)
    refresh(at(20))
    result = services.close_month(month=MARCH, now=at(2, month=4), user=platform_admin)
    assert result.closed_now
    invoice = Invoice.objects.get(team=team, month=MARCH)
    assert invoice.status == InvoiceStatus.CLOSED
    assert invoice.total == FULL_MARCH_FEE + Decimal("72.00")
    assert AuditEntry.objects.filter(action="billing.close_month", actor=platform_admin).count() == 1

    again = services.close_month(month=MARCH, now=at(3, month=4))
    assert not again.closed_now
    assert Invoice.objects.filter(team=team, month=MARCH).count() == 1
    assert ClosedMonth.objects.count() == 1
    assert Invoice.objects.get(pk=invoice.pk).closed_at == at(2, month=4)


def test_the_database_refuses_to_change_a_closed_invoice(team, reservation):
    services.close_month(month=MARCH, now=at(2, month=4))
    invoice = Invoice.objects.get(team=team, month=MARCH)
    with pytest.raises(DatabaseError), transaction.atomic():
        Invoice.objects.filter(pk=invoice.pk).update(total=Decimal("1.00"))
    with pytest.raises(DatabaseError), transaction.atomic():
        invoice.lines.update(amount=Decimal("0.00"))
    with pytest.raises(DatabaseError), transaction.atomic():
        InvoiceLine.objects.create(
            invoice=invoice,
            kind=LineKind.OVERAGE,
            key="x",
            description="x",
            quantity=1,
            unit="x",
            unit_price=1,
            amount=1,
        )
    assert Invoice.objects.get(pk=invoice.pk).total == FULL_MARCH_FEE


def test_data_arriving_after_the_close_becomes_an_adjustment_on_the_next_invoice(team, reservation, pod):
    services.close_month(month=MARCH, now=at(2, month=4))
    closed = Invoice.objects.get(team=team, month=MARCH)
    assert closed.total == FULL_MARCH_FEE

    late = pod(at(30, 8), at(30, 10), gpus=7)  # 3 over for 2 hours: 6 GPU-hours × 18 = 108.00
    assert StaleDay.objects.filter(day=at(30).date()).exists()
    refresh(at(5, month=4))
    closed.refresh_from_db()
    assert closed.total == FULL_MARCH_FEE  # never changes
    april = Invoice.objects.get(team=team, month=APRIL)
    adjustments = april.lines.filter(kind=LineKind.ADJUSTMENT)
    assert [(a.adjusts_month, a.amount, a.quantity) for a in adjustments] == [(MARCH, Decimal("108.00"), Decimal(6))]
    assert "Correction for 2026-03" in adjustments[0].description

    refresh(at(6, month=4))  # again: the adjustment is not repeated
    assert april.lines.filter(kind=LineKind.ADJUSTMENT).count() == 1

    services.close_month(month=APRIL, now=at(1, month=5))
    # A later correction to March: the pod really ended at 09:00 (an admin deletes the interval, the pod's end is
    # recorded again) → half of the 108.00 comes back.
    usage.delete_usage(intervals=UsageInterval.objects.filter(pk=late.pk))
    late.pk, late.ended_at = None, at(30, 9)
    usage.record_usage(intervals=[late])
    refresh(at(3, month=5))
    may = Invoice.objects.get(team=team, month=at(1, month=5).date())
    may_adjustments = may.lines.filter(kind=LineKind.ADJUSTMENT, adjusts_month=MARCH)
    assert [a.amount for a in may_adjustments] == [Decimal("-54.00")]


def test_a_month_cannot_close_before_it_ends_nor_before_an_earlier_open_month(team, reservation, pod):
    with pytest.raises(ValidationError, match="has not ended"):
        services.close_month(month=MARCH, now=at(31, 23, 59))
    with pytest.raises(ValidationError, match="Close 2026-03 before 2026-04"):
        services.close_month(month=APRIL, now=at(2, month=5))
    assert not ClosedMonth.objects.exists()


def test_close_month_command_defaults_to_the_previous_month_and_is_idempotent(team, reservation):
    out = io.StringIO()
    with time_machine.travel(at(2, 6, month=4), tick=False):
        call_command("close_month", stdout=out)
        call_command("close_month", "2026-03", stdout=out)
    assert out.getvalue().splitlines() == ["closed 2026-03: 1 invoices", "2026-03 was already closed (1 invoices)"]
    assert Invoice.objects.get(team=team, month=MARCH).is_closed


def test_close_month_task(team, reservation):
    with time_machine.travel(at(2, month=4), tick=False):
        assert tasks.close_month.delay("2026-03").get() == {"month": "2026-03", "closed_now": True, "invoices": 1}


def test_admin_action_closes_the_selected_month(
    client, platform_admin, team, reservation, django_capture_on_commit_callbacks
):
    refresh(at(31, 12))
    draft = Invoice.objects.get(team=team, month=MARCH)
    client.force_login(platform_admin)
    with time_machine.travel(at(2, month=4), tick=False), django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:billing_invoice_changelist"),
            {"action": "close_months", "_selected_action": [draft.pk]},
        )
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.is_closed
    assert ClosedMonth.objects.get().closed_by == platform_admin


def test_refresh_task_is_idempotent(team, reservation, pod):
    pod(at(2, 10), at(2, 12), gpus=6)
    with time_machine.travel(at(10), tick=False):
        tasks.refresh_usage.delay()
        first = list(InvoiceLine.objects.values_list("kind", "amount", "quantity").order_by("kind"))
        tasks.refresh_usage.delay()
    assert list(InvoiceLine.objects.values_list("kind", "amount", "quantity").order_by("kind")) == first
    assert Invoice.objects.count() == 1


def test_recording_the_end_of_a_running_pod_marks_only_the_days_from_its_end(team, reserved_pool, pod):
    running = pod(at(2, 10), None, gpus=2)
    StaleDay.objects.all().delete()
    ended = UsageInterval(
        pod_uid=running.pod_uid,
        namespace=running.namespace,
        pod_name=running.pod_name,
        team=team,
        pool=reserved_pool,
        node_name=running.node_name,
        gpus=2,
        started_at=at(2, 10),
        ended_at=at(28, 9),
    )
    assert usage.record_usage(intervals=[ended]) == 1  # what reconcile/sync does when the pod finishes
    stale = set(StaleDay.objects.values_list("day", flat=True))
    assert at(28).date() in stale
    assert at(27).date() not in stale  # it was running then either way: those days stay valid
    StaleDay.objects.all().delete()
    assert usage.record_usage(intervals=[ended]) == 0  # a replay changes nothing and marks nothing
    assert not StaleDay.objects.exists()
