"""Invoice lines keep their figures frozen and their wording translatable: a closed invoice reads in the reader's
language on its page, in the exports and the API, while its stored English text, codes and amounts stay exactly as
invoiced; lines written before descriptions kept their words still show what was stored."""

import csv
import io
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse
from django.utils import translation

from billing import services, wording
from billing.choices import InvoiceStatus, LineKind
from billing.models import Invoice, InvoiceLine
from portal.choices import Role
from tests.billing.conftest import at
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.usefixtures("compiled_translations")
MARCH = at(1).date()
FEE_EN = "Reservation of 4 GPUs in A800 reserved, 2026-03-01 00:00 → 2026-04-01 00:00"
FEE_ZH = "预留 A800 reserved 的 4 块 GPU，2026年3月1日 00:00 → 2026年4月1日 00:00"  # dates in the reader's format


def lead_reading(team, language):
    return MembershipFactory(team=team, role=Role.LEAD, user=UserFactory(language=language)).user


@pytest.fixture
def closed_march(team, reservation, pod):
    pod(at(2, 10), at(2, 12), gpus=6)  # 4 GPU-hours of overage
    with time_machine.travel(at(2, month=4), tick=False):
        services.close_month(month=MARCH, now=at(2, month=4))
    return Invoice.objects.get(team=team, month=MARCH)


def test_a_closed_invoice_keeps_its_english_text_and_its_words(closed_march):
    overage, fee = closed_march.lines.order_by("kind")
    assert closed_march.status == InvoiceStatus.CLOSED
    assert (fee.description, fee.unit, fee.amount) == (FEE_EN, "GPU-months", Decimal("39200.00"))
    assert fee.description_id == "Reservation of %(gpus)s GPUs in %(pool)s, %(start)s → %(end)s"
    assert overage.description == "Overage above the reservation in A800 reserved"


def test_the_invoice_page_reads_in_the_readers_language(client, team, closed_march):
    url = reverse("billing:invoice_detail", args=["alpha", "2026-03"])
    client.force_login(lead_reading(team, "zh-hans"))
    body = client.get(url).content.decode()
    assert FEE_ZH in body and "A800 reserved 中超出预留的用量" in body
    assert "GPU·月" in body and "GPU·时" in body
    assert FEE_EN not in body and "GPU-months" not in body
    client.force_login(lead_reading(team, "en"))
    body = client.get(url).content.decode()
    assert FEE_EN in body and "GPU-months" in body and "预留" not in body


def test_exports_keep_the_invoiced_english_and_codes_beside_the_readers_words(client, team, closed_march):
    client.force_login(lead_reading(team, "zh-hans"))
    data = client.get(reverse("billing:team_usage_json", args=["alpha", "2026-03"])).json()
    fee = next(line for line in data["lines"] if line["kind"] == LineKind.RESERVATION_FEE)
    assert (fee["description"], fee["description_localised"]) == (FEE_EN, FEE_ZH)
    assert (fee["unit"], fee["unit_localised"]) == ("GPU-months", "GPU·月")
    assert Decimal(fee["amount"]) == Decimal("39200.00")

    answer = client.get(reverse("billing:team_usage_csv", args=["alpha", "2026-03"]))
    rows = list(csv.reader(io.StringIO(answer.content.decode())))
    header = rows.index(["kind", "description", "quantity", "unit", "unit_price", "amount", "adjusts_month",
                         "description_localised", "unit_localised"])  # fmt: skip
    fee_row = next(row for row in rows[header:] if row[0] == LineKind.RESERVATION_FEE)
    assert fee_row[1] == FEE_EN and fee_row[3] == "GPU-months" and fee_row[5] == "39200.00"
    assert fee_row[7:] == [FEE_ZH, "GPU·月"]


def test_the_api_gives_the_invoiced_text_and_the_readers_words(client, team, closed_march):
    client.force_login(lead_reading(team, "zh-hans"))
    invoice = client.get(f"/api/v1/invoices/{closed_march.pk}/").json()
    fee = next(line for line in invoice["lines"] if line["kind"] == LineKind.RESERVATION_FEE)
    assert (fee["description"], fee["description_localised"], fee["unit_localised"]) == (FEE_EN, FEE_ZH, "GPU·月")
    client.force_login(lead_reading(team, "en"))
    invoice = client.get(f"/api/v1/invoices/{closed_march.pk}/").json()
    fee = next(line for line in invoice["lines"] if line["kind"] == LineKind.RESERVATION_FEE)
    assert fee["description_localised"] == FEE_EN and fee["unit_localised"] == "GPU-months"


def test_a_correction_names_the_line_it_corrects_in_the_readers_language(client, team, closed_march, pod):
    pod(at(30, 8), at(30, 10), gpus=7)  # late data for March: 6 GPU-hours of overage
    with time_machine.travel(at(5, month=4), tick=False):
        services.refresh_usage(now=at(5, month=4))
    correction = InvoiceLine.objects.get(kind=LineKind.ADJUSTMENT)
    assert correction.description == "Correction for 2026-03: Overage above the reservation in A800 reserved"
    client.force_login(lead_reading(team, "zh-hans"))
    with time_machine.travel(at(5, month=4), tick=False):
        body = client.get(reverse("billing:team_billing", args=["alpha"]), {"month": "2026-04"}).content.decode()
    assert "2026年3月的更正：A800 reserved 中超出预留的用量" in body


def test_a_line_written_before_descriptions_kept_their_words_shows_what_was_stored(client, team, reserved_pool):
    invoice = Invoice.objects.create(team=team, month=MARCH, metered_until=at(1, month=4), computed_at=at(1, month=4))
    InvoiceLine.objects.create(
        invoice=invoice, kind=LineKind.OVERAGE, key="overage:pool:1", pool=reserved_pool,
        description="Overage above the reservation in A800 reserved", quantity=1, unit="GPU-hours",
        unit_price=Decimal("18"), amount=Decimal("18.00"),
    )  # fmt: skip
    Invoice.objects.filter(pk=invoice.pk).update(status=InvoiceStatus.CLOSED, closed_at=at(2, month=4))
    client.force_login(lead_reading(team, "zh-hans"))
    body = client.get(reverse("billing:invoice_detail", args=["alpha", "2026-03"])).content.decode()
    assert "Overage above the reservation in A800 reserved" in body and "GPU·时" in body


def test_the_dates_of_a_closed_line_follow_the_reader_while_its_stored_row_never_changes(client, team, closed_march):
    fee = closed_march.lines.get(kind=LineKind.RESERVATION_FEE)
    stored = InvoiceLine.objects.filter(pk=fee.pk).values("description", "description_args").get()
    assert stored["description_args"]["start"] == "2026-03-01 00:00"  # kept as ISO text, as it always was
    url = reverse("billing:invoice_detail", args=["alpha", "2026-03"])
    client.force_login(lead_reading(team, "zh-hans"))
    assert "2026年3月1日 00:00 → 2026年4月1日 00:00" in client.get(url).content.decode()
    client.force_login(lead_reading(team, "en"))
    assert FEE_EN in client.get(url).content.decode()  # English's format is the stored one
    assert InvoiceLine.objects.filter(pk=fee.pk).values("description", "description_args").get() == stored


def test_a_correction_says_its_month_and_the_corrected_lines_dates_in_the_readers_format(team, closed_march):
    fee = closed_march.lines.get(kind=LineKind.RESERVATION_FEE)
    correction = InvoiceLine(
        description_id=wording.CORRECTION,
        description_args={"month": "2026-03", "what": {"msgid": fee.description_id, "args": fee.description_args}},
    )
    with translation.override("zh-hans"):
        assert correction.description_in_words == f"2026年3月的更正：{FEE_ZH}"
    with translation.override("en"):
        assert correction.description_in_words == f"Correction for March 2026: {FEE_EN}"


def test_a_date_argument_that_does_not_parse_is_shown_as_stored(team):
    line = InvoiceLine(
        description_id=wording.RESERVATION_FEE,
        description_args={"gpus": 2, "pool": "P", "start": "1 March", "end": "2026-04-01 00:00"},
    )
    with translation.override("zh-hans"):
        assert line.description_in_words == "预留 P 的 2 块 GPU，1 March → 2026年4月1日 00:00"
