"""Lending in the pages and the API: the team page shows each reservation's setting, protected GPUs and what it lends
now, and its leads change the setting there (errors beside the fields, what was typed kept); the pool card shows
what is lent; the API's lending action is for the team's leads and admins; borrowed GPUs are said on the job page,
the list and the API; the pending view says when a lender's job waits for a reclaim."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import selectors as job_selectors
from jobs.choices import JobState
from jobs.models import Workload
from pools import services as pool_services
from pools.choices import Lending
from pools.models import LendingChange
from portal.models import AuditEntry
from tests.factories import JobFactory, PoolFactory, QuotaFactory


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    monkeypatch.setattr("reconcile.tasks.reconcile_kueue.delay", lambda version=None: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)


@pytest.fixture
def api():
    def make(user):
        client = APIClient()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def pool(db):
    return PoolFactory(slug="a800", name="Reserved A800", contracted_gpus=16)


@pytest.fixture
def reservation(team, pool):
    now = timezone.now()
    return pool_services.create_reservation(
        team=team, pool=pool, gpus=8, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
    )


@pytest.fixture
def borrowing(pool, other_team):
    """The other team runs 12 GPUs without a reservation: 8 unreserved ones and 4 of alpha's idle ones."""
    QuotaFactory(team=other_team, pool=pool, max_gpus=16)
    return JobFactory(team=other_team, pool=pool, state=JobState.RUNNING, gpus=12, admitted_pool=pool)


def lending_url(team, reservation):
    return reverse("portal:team_reservation_lending", args=[team.slug, reservation.pk])


def test_the_team_page_shows_what_each_reservation_lends_now(client, lead, team, reservation, borrowing):
    client.force_login(lead)
    html = client.get(reverse("portal:team_detail", args=["alpha"])).content.decode()
    assert 'id="lending"' in html and "Lend idle GPUs" in html
    assert 'data-lent="4"' in html and "4 GPUs to 1 team(s)" in html


def test_a_lead_changes_the_setting_on_the_team_page_and_kueue_is_told(
    client, lead, team, reservation, sent_to_kueue, django_capture_on_commit_callbacks
):
    client.force_login(lead)
    prefix = f"r{reservation.pk}"
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            lending_url(team, reservation), {f"{prefix}-lending": "protect", f"{prefix}-protected_gpus": "3"}
        )
    assert response.status_code == 302 and response["Location"].endswith("#lending")
    reservation.refresh_from_db()
    assert (reservation.lending, reservation.protected_gpus, reservation.lendable_gpus) == ("protect", 3, 5)
    assert LendingChange.objects.get().changed_by == lead
    assert AuditEntry.objects.filter(action="reservation.set_lending").exists()
    assert sent_to_kueue  # the projection is reconciled at once, as for a quota change


def test_errors_come_back_beside_the_fields_with_what_was_typed(client, lead, team, reservation):
    client.force_login(lead)
    prefix = f"r{reservation.pk}"
    response = client.post(
        lending_url(team, reservation), {f"{prefix}-lending": "protect", f"{prefix}-protected_gpus": "9"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Protect between 1 and the reservation&#x27;s 8 GPUs." in html
    assert 'value="9"' in html and '<option value="protect" selected>' in html
    response = client.post(lending_url(team, reservation), {f"{prefix}-lending": "sometimes"})
    assert response.status_code == 400
    reservation.refresh_from_db()
    assert reservation.lending == Lending.IDLE and not LendingChange.objects.exists()


def test_only_the_teams_leads_change_it(client, researcher, outsider, team, reservation):
    prefix = f"r{reservation.pk}"
    for user in (researcher, outsider):
        client.force_login(user)
        response = client.post(lending_url(team, reservation), {f"{prefix}-lending": "none"})
        assert response.status_code == 404
    reservation.refresh_from_db()
    assert reservation.lending == Lending.IDLE


def test_the_pool_card_shows_what_is_lent_and_the_viewers_reservations(client, lead, team, reservation, borrowing):
    client.force_login(lead)
    html = client.get(reverse("pools:pool_detail", args=["a800"])).content.decode()
    assert 'data-lent="4"' in html and "4 reserved GPUs borrowed by other teams" in html
    assert f'data-reservation="{reservation.pk}"' in html and "lent now: 4 GPUs to 1 team(s)" in html
    assert f"#reservation-{reservation.pk}" in html  # a lead's way to change it


def test_a_lead_sets_lending_through_the_api(api, lead, team, reservation):
    response = api(lead).post(
        f"/api/v1/reservations/{reservation.pk}/lending/", {"lending": "protect", "protected_gpus": 2}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["lending"], body["protected_gpus"], body["lendable_gpus"]) == ("protect", 2, 6)
    wrong = api(lead).post(
        f"/api/v1/reservations/{reservation.pk}/lending/", {"lending": "protect", "protected_gpus": 0}, format="json"
    )
    assert wrong.status_code == 400 and "protected_gpus" in wrong.json()


def test_a_job_on_borrowed_gpus_says_so_on_its_page_the_list_and_the_api(
    client, api, outsider, other_team, reservation, borrowing
):
    # All its 12 GPUs are above its (nil) reservation: 8 of them the pool's unreserved ones, 4 lent by alpha.
    note = "On 12 borrowed GPUs — may be preempted when the owner needs them back."
    client.force_login(outsider)
    assert note in client.get(reverse("jobs:job_detail", args=[borrowing.pk])).content.decode()
    assert 'data-borrowed="12"' in client.get(reverse("jobs:job_list")).content.decode()
    listed = api(outsider).get("/api/v1/jobs/").json()["results"]
    assert [(row["id"], row["borrowed_gpus"], row["borrowed_note"]) for row in listed] == [(borrowing.pk, 12, note)]
    assert api(outsider).get(f"/api/v1/jobs/{borrowing.pk}/").json()["borrowed_gpus"] == 12


def test_a_teams_jobs_fill_its_reservation_by_priority_then_admission_and_the_rest_borrow(team, pool, reservation):
    early = JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=6, admitted_pool=pool)
    late = JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=4, admitted_pool=pool)
    urgent = JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=1, admitted_pool=pool, priority=100)
    queued = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=8)
    # 8 reserved: urgent (1) and early (6) inside, late straddles (1 inside, 3 borrowed).
    assert job_selectors.borrowed_gpus([early, late, urgent, queued]) == {late.pk: 3}


def test_the_pending_view_says_a_lenders_job_waits_for_its_lent_gpus_and_the_cap_on_that_wait(
    client, lead, team, pool, reservation, borrowing
):
    # (the team's quota is its reservation's 8 GPUs: the reservation made it so)
    mine = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=8, termination_grace_seconds=30)
    borrowing.termination_grace_seconds = 45
    borrowing.save()
    Workload.objects.create(
        uid="wl-mine",
        namespace=team.namespace,
        name="mine",
        job=mine,
        created_at=timezone.now(),
        message="couldn't assign flavors to pod set main: Pending the preemption of 1 workload(s)",
    )
    client.force_login(lead)
    html = client.get(reverse("jobs:pending")).content.decode()
    # The platform caps every grace period (RESERVOIR_MAX_GRACE_SECONDS, 60 s by default): the lender is told.
    assert "waiting for lent GPUs to be reclaimed (≈ 45 s; grace periods are capped at 60 s)" in html
    detail = client.get(reverse("jobs:job_detail", args=[mine.pk])).content.decode()
    assert "(≈ 45 s, their grace period; the portal caps grace periods at 60 s)" in detail
    team_page = client.get(reverse("portal:team_detail", args=[team.slug])).content.decode()
    assert "their pods get at most 60 s to stop" in team_page


@pytest.fixture
def sent_to_kueue(monkeypatch):
    versions = []
    monkeypatch.setattr("reconcile.tasks.reconcile_kueue.delay", lambda version=None: versions.append(version))
    return versions


def test_leads_see_what_lending_earned_this_month_on_the_team_page_and_pool_card_and_researchers_do_not(
    client, lead, researcher, team, reservation
):
    from decimal import Decimal

    from billing import selectors as billing_selectors
    from billing.models import DailyUsage

    today = timezone.now()
    DailyUsage.objects.create(
        team=team,
        pool=reservation.pool,
        day=today.date(),
        reserved_gpu_seconds=8 * 3600,
        in_reservation_gpu_seconds=2 * 3600,
        overage_gpu_seconds=0,
        spill_gpu_seconds=0,
        lent_gpu_seconds=6 * 3600,
        computed_at=today,
    )
    earned = billing_selectors.reservation_earned_this_month(reservation=reservation, now=today)
    assert earned > Decimal("0")  # 6 GPU-hours at the pool's lending price
    client.force_login(lead)
    html = client.get(reverse("portal:team_detail", args=["alpha"])).content.decode()
    assert "Earned this month" in html and f'data-earned="{earned}"' in html
    assert earned == Decimal("54.00")  # 6 GPU-hours × 9.0000 (18.0000 × the default share 0.5)
    pool_card = client.get(reverse("pools:pool_detail", args=["a800"])).content.decode()
    assert f'data-earned="{earned}"' in pool_card and "earned this month: 54.00" in pool_card
    assert f'data-earned="{earned}"' in client.get(reverse("pools:pool_list")).content.decode()
    client.force_login(researcher)
    html = client.get(reverse("portal:team_detail", args=["alpha"])).content.decode()
    assert "Earned this month" not in html and "data-earned" not in html
    pool_card = client.get(reverse("pools:pool_detail", args=["a800"])).content.decode()
    assert f'data-reservation="{reservation.pk}"' in pool_card and "data-earned" not in pool_card
