"""A closed invoice's page in Django admin showed every field read-only but still offered "Save": pressing it saved
the unchanged row, the database trigger that freezes closed invoices refused the UPDATE, and the admin got a 500.
Invoices are written by the billing services only: their pages are view-only (no Save), and the list's "close the
month" action still works."""

from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from billing.choices import InvoiceStatus
from billing.models import Invoice
from portal.models import OutboxMessage
from tests.billing.conftest import at

pytestmark = pytest.mark.django_db


@pytest.fixture
def closed_invoice(team):
    return Invoice.objects.create(
        team=team,
        month=at(1).date(),
        status=InvoiceStatus.CLOSED,
        total=Decimal("100.00"),
        metered_until=at(1, month=4),
        computed_at=at(1, month=4),
        closed_at=timezone.now(),
    )


def test_a_closed_invoices_page_offers_no_save_and_a_post_changes_nothing(client, platform_admin, closed_invoice):
    client.force_login(platform_admin)
    client.raise_request_exception = False
    page = client.get(f"/admin/billing/invoice/{closed_invoice.pk}/change/")
    assert page.status_code == 200 and b"100.00" in page.content  # the admin sees the invoice
    assert b'name="_save"' not in page.content and b'name="_continue"' not in page.content
    answer = client.post(
        f"/admin/billing/invoice/{closed_invoice.pk}/change/",
        {
            "lines-TOTAL_FORMS": "0",
            "lines-INITIAL_FORMS": "0",
            "lines-MIN_NUM_FORMS": "0",
            "lines-MAX_NUM_FORMS": "1000",
            "_save": "Save",
        },
    )
    assert answer.status_code != 500, "saving a closed invoice's admin page answered 500"
    closed_invoice.refresh_from_db()
    assert closed_invoice.total == Decimal("100.00")


def test_the_close_action_still_runs_from_the_list(client, platform_admin, team, django_capture_on_commit_callbacks):
    draft = Invoice.objects.create(team=team, month=at(1).date(), metered_until=at(15), computed_at=at(15))
    client.force_login(platform_admin)
    with time_machine.travel(at(2, 12, month=4), tick=False), django_capture_on_commit_callbacks(execute=False):
        listing = client.post(
            reverse("admin:billing_invoice_changelist"),
            {"action": "close_months", "_selected_action": [draft.pk]},
        )
    assert listing.status_code == 302
    assert OutboxMessage.objects.filter(task="billing.close_month", args=["2026-03"]).exists()
