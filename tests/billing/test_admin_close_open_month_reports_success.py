"""Invoice admin's "Close the month of the selected invoices" on a month that had not ended (or while an earlier month
still had something to invoice) told the admin "Closing 2026-03: the billing queue meters and freezes them.", queued
the close, and the close then refused in the worker's log only: the month stayed open while the admin believed it was
being closed. `manage.py close_month` refuses the same input with its reason; the action now does too (an error
message, nothing queued), and still queues a month that can be closed."""

import pytest
import time_machine
from django.contrib import messages as message_levels
from django.urls import reverse

from billing.models import ClosedMonth, Invoice
from portal.models import OutboxMessage
from tests.billing.conftest import at

pytestmark = pytest.mark.django_db

MARCH = at(1).date()


def _close_from_the_list(client, invoice, *, now, capture):
    with time_machine.travel(now, tick=False), capture(execute=False):
        response = client.post(
            reverse("admin:billing_invoice_changelist"),
            {"action": "close_months", "_selected_action": [invoice.pk]},
            follow=True,
        )
    return [(message.level, str(message)) for message in response.context["messages"]]


def _queued(month: str) -> bool:
    return OutboxMessage.objects.filter(task="billing.close_month", args=[month]).exists()


def test_closing_a_month_that_has_not_ended_is_refused_with_a_message(
    client, platform_admin, team, reservation, django_capture_on_commit_callbacks
):
    draft = Invoice.objects.create(team=team, month=MARCH, metered_until=at(15), computed_at=at(15))
    client.force_login(platform_admin)
    told = _close_from_the_list(client, draft, now=at(16, 12), capture=django_capture_on_commit_callbacks)
    assert told == [(message_levels.ERROR, "2026-03 has not ended yet.")], f"the admin was told: {told}"
    assert not _queued("2026-03") and not ClosedMonth.objects.exists()


def test_closing_a_month_before_an_earlier_one_with_drafts_is_refused_with_a_message(
    client, platform_admin, team, reservation, pod, django_capture_on_commit_callbacks
):
    pod(at(10, month=2), at(11, month=2), gpus=2)
    Invoice.objects.create(team=team, month=at(1, month=2).date(), metered_until=at(1), computed_at=at(1))
    draft = Invoice.objects.create(team=team, month=MARCH, metered_until=at(1, month=4), computed_at=at(1, month=4))
    client.force_login(platform_admin)
    told = _close_from_the_list(client, draft, now=at(2, 12, month=4), capture=django_capture_on_commit_callbacks)
    assert told == [(message_levels.ERROR, "Close 2026-02 before 2026-03.")], f"the admin was told: {told}"
    assert not _queued("2026-03")


def test_a_month_that_has_ended_is_queued_for_closing(
    client, platform_admin, team, reservation, django_capture_on_commit_callbacks
):
    draft = Invoice.objects.create(team=team, month=MARCH, metered_until=at(15), computed_at=at(15))
    client.force_login(platform_admin)
    told = _close_from_the_list(client, draft, now=at(2, 12, month=4), capture=django_capture_on_commit_callbacks)
    assert told == [(message_levels.INFO, "Closing 2026-03: the billing queue meters and freezes them.")]
    assert _queued("2026-03")
