"""Dates, times and money follow the reader's language: an English reader keeps the portal's ISO dates
(2026-04-02 00:00) and "March 2026", a Chinese reader reads 2026年4月2日 00:00 and 2026年3月; money is grouped by
thousands with a comma, to the cent, in both (portal/formats, billing.money.format_money)."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone, translation

from billing import services as billing
from billing.money import format_money
from jobs.choices import JobState
from monitoring.choices import Scope
from monitoring.models import UtilisationSample
from pools.choices import PoolKind
from portal.choices import Role
from tests.factories import JobFactory, MembershipFactory, PoolFactory, ReservationFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("compiled_translations")]
MARCH = datetime(2026, 3, 1, tzinfo=UTC)
APRIL_2 = datetime(2026, 4, 2, tzinfo=UTC)


def member(team, language, role=Role.LEAD):
    return MembershipFactory(team=team, role=role, user=UserFactory(language=language)).user


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("en", ["1,234,567.80", "0.05", "-39,200.00", "18.0000"]),
        ("zh-hans", ["1,234,567.80", "0.05", "-39,200.00", "18.0000"]),
    ],
)
def test_money_is_grouped_by_thousands_to_the_cent_in_both_languages(language, expected):
    with translation.override(language):
        figures = [format_money(Decimal("1234567.8")), format_money(Decimal("0.049")), format_money(Decimal("-39200"))]
        assert figures + [format_money(Decimal("18.0000"), places=None)] == expected


@pytest.fixture
def closed_invoice(team):
    pool = PoolFactory(slug="a800", name="A800", kind=PoolKind.RESERVED, contracted_gpus=16)
    ReservationFactory(team=team, pool=pool, gpus=4, starts_at=MARCH, ends_at=datetime(2026, 4, 1, tzinfo=UTC),
                       monthly_price_per_gpu=Decimal("9800.00"))  # fmt: skip
    with time_machine.travel(APRIL_2, tick=False):
        billing.close_month(month=MARCH.date(), now=APRIL_2)


@pytest.mark.parametrize(
    ("language", "month", "closed", "total"),
    [
        ("en", "Invoice of Alpha for March 2026", "2026-04-02 00:00 UTC", "<strong>39,200.00</strong>"),
        ("zh-hans", "2026年3月", "2026年4月2日 00:00 UTC", "<strong>39,200.00</strong>"),
    ],
)
def test_the_invoice_page_speaks_the_readers_dates_and_money(
    client, team, closed_invoice, language, month, closed, total
):
    client.force_login(member(team, language))
    body = client.get(reverse("billing:invoice_detail", args=["alpha", "2026-03"])).content.decode()
    assert month in body and closed in body and total in body
    assert "9,800.00" in body  # the unit price, grouped
    if language == "zh-hans":
        assert "March" not in body and "2026-04-02" not in body
    listing = client.get(reverse("billing:team_billing", args=["alpha"]), {"month": "2026-03"}).content.decode()
    assert closed in listing and "39,200.00" in listing


@pytest.mark.parametrize(
    ("language", "created", "since"),
    [("en", 'title="2026-03-02 10:05:07 UTC"', "ago"), ("zh-hans", 'title="2026年3月2日 10:05:07 UTC"', "前")],
)
def test_the_job_page_speaks_the_readers_dates(client, team, language, created, since):
    reader = member(team, language, role=Role.RESEARCHER)
    job = JobFactory(team=team, submitted_by=reader, state=JobState.RUNNING, name="train",
                     created_at=datetime(2026, 3, 2, 10, 5, 7, tzinfo=UTC))  # fmt: skip
    client.force_login(reader)
    body = client.get(reverse("jobs:job_detail", args=[job.pk])).content.decode()
    assert created in body
    assert re.search(rf'title="[^"]+ UTC">[^<]*{since}</time>', body), "the submitted time in words"
    listing = client.get(reverse("jobs:job_list")).content.decode()
    assert created in listing


@pytest.mark.parametrize(
    ("language", "dcgm"),
    [
        ("en", 'DCGM, <time datetime="2026-03-02T10:05:07+00:00" title="2026-03-02 10:05:07 UTC" data-age>'),
        ("zh-hans", 'DCGM，<time datetime="2026-03-02T10:05:07+00:00" title="2026年3月2日 10:05:07 UTC" data-age>'),
    ],
)
def test_the_pools_dashboard_speaks_the_readers_times(client, team, language, dcgm):
    """The card names its DCGM reading's moment (static/js/reservoir.js says its age in the page's language)."""
    pool = PoolFactory(slug="a800", name="A800", kind=PoolKind.RESERVED, contracted_gpus=16)
    with time_machine.travel(datetime(2026, 3, 2, 10, 10, 7, tzinfo=UTC), tick=False):
        UtilisationSample.objects.create(scope=Scope.POOL, pool=pool, at=timezone.now() - timedelta(minutes=5), gpus=8,
                                         gpus_busy=8, util_avg=61.0, util_max=90.0)  # fmt: skip
        client.force_login(member(team, language, role=Role.RESEARCHER))
        body = client.get(reverse("pools:pool_list")).content.decode()
    assert "61 %" in body and f"{dcgm}10:05:07 UTC</time>" in body
