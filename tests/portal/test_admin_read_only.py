"""What Django admin shows but does not let anyone write: rows that mirror the cluster or Prometheus, rows derived by
metering, what audited services set, and a job's history. A platform admin sees them; a change made there would
invent a node or a reading, drop billed usage, or rewrite what happened, without an audit entry."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import DailyUsage
from jobs.choices import JobState
from jobs.models import JobEvent, Words
from monitoring.models import TelemetryRun
from tests.factories import JobFactory, NodeFactory, PoolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Training", contracted_gpus=16)


@pytest.fixture
def admin_client(client, platform_admin):
    client.force_login(platform_admin)
    return client


def test_nodes_are_seen_not_made_or_edited(admin_client, pool):
    node = NodeFactory(name="gpu-a", pool=pool, gpu_capacity=8, gpu_allocatable=8)
    assert admin_client.get("/admin/pools/node/").status_code == 200
    assert admin_client.get(f"/admin/pools/node/{node.pk}/change/").status_code == 200
    assert admin_client.get("/admin/pools/node/add/").status_code == 403
    answer = admin_client.post(
        f"/admin/pools/node/{node.pk}/change/", {"name": "gpu-a", "pool": pool.pk, "gpu_allocatable": 64}
    )
    assert answer.status_code == 403
    node.refresh_from_db()
    assert node.gpu_allocatable == 8


def test_a_jobs_history_is_shown_and_never_edited(admin_client, team, pool, researcher):
    job = JobFactory(team=team, pool=pool, submitted_by=researcher)
    event = JobEvent.note(job=job, from_state="", to_state=JobState.QUEUED, message=Words("submitted"))
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert page.status_code == 200 and b"submitted" in page.content
    assert b'name="events-0-message_id"' not in page.content and b'name="events-0-message_args"' not in page.content
    admin_client.post(
        f"/admin/jobs/job/{job.pk}/change/",
        {
            "events-TOTAL_FORMS": "1",
            "events-INITIAL_FORMS": "1",
            "events-MIN_NUM_FORMS": "0",
            "events-MAX_NUM_FORMS": "1000",
            "events-0-id": str(event.pk),
            "events-0-job": str(job.pk),
            "events-0-message_id": "cancelled",
            "events-0-message_args": "",
        },
    )
    event.refresh_from_db()
    assert (event.message_id, event.message_args) == ("submitted", {})


def test_rollups_budgets_and_telemetry_are_not_written_by_hand(admin_client, team, pool):
    day = DailyUsage.objects.create(
        team=team,
        pool=pool,
        day=date(2026, 11, 2),
        reserved_gpu_seconds=Decimal("3600"),
        in_reservation_gpu_seconds=Decimal("1800"),
        overage_gpu_seconds=Decimal("0"),
        spill_gpu_seconds=Decimal("0"),
        computed_at=timezone.now(),
    )
    assert admin_client.get(f"/admin/billing/dailyusage/{day.pk}/delete/").status_code == 403
    assert admin_client.post(f"/admin/billing/dailyusage/{day.pk}/delete/", {"post": "yes"}).status_code == 403
    assert DailyUsage.objects.filter(pk=day.pk).exists()
    for model in ("gpureading", "jobutilisation", "telemetryrun"):
        assert admin_client.get(f"/admin/monitoring/{model}/add/").status_code == 403, model
    run = TelemetryRun.objects.create(at=timezone.now(), collected_at=timezone.now() + timedelta(seconds=1), ok=True)
    answer = admin_client.post(f"/admin/monitoring/telemetryrun/{run.pk}/change/", {"ok": "", "gpus": "99"})
    assert answer.status_code == 403
    run.refresh_from_db()
    assert run.ok and run.gpus == 0
    for model in ("budget", "budgetlift"):
        assert admin_client.get(f"/admin/billing/{model}/").status_code == 200, model
        assert b"delete_selected" not in admin_client.get(f"/admin/billing/{model}/").content, model
