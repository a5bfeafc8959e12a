"""The jobs list of the API writes its rows without DRF's fields (jobs/api/serializers.py, `job_list_rows`, for its
CPU time: bench/api.py): each row must be what JobSerializer writes for the same job, field for field, in every
language; and the borrowed GPUs of a page come from one query that fills each team's reservation in Kueue's order."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from jobs import selectors
from jobs.api.serializers import JobSerializer
from jobs.choices import FINAL_STATES, JobState, Placement, Priority
from jobs.models import Job, Workload
from jobs.quote_selectors import worded_quotes
from pools import services as pool_services
from tests.factories import JobFactory, PoolFactory, UserFactory


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    monkeypatch.setattr("reconcile.tasks.reconcile_kueue.delay", lambda version=None: None)
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)


@pytest.fixture
def pool(db):
    return PoolFactory(slug="a800", name="Reserved A800", contracted_gpus=16)


@pytest.fixture
def jobs(team, other_team, pool):
    """Jobs with every kind of value a row carries: admitted elsewhere or not at all, started and finished, a high
    priority, soft placement, one borrowing (above its team's 4 reserved GPUs) and one straddling the line."""
    now = timezone.now()
    pool_services.create_reservation(
        team=team, pool=pool, gpus=4, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
    )
    elastic = PoolFactory(slug="elastic", name="Elastic", kind="elastic", contracted_gpus=None)
    return [
        JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=3, admitted_pool=pool, started_at=now),
        JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=2, admitted_pool=pool, priority=Priority.HIGH),
        JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=1, pending_reason="waiting for quota"),
        JobFactory(
            team=other_team,
            pool=pool,
            state=JobState.SUCCEEDED,
            admitted_pool=elastic,
            placement=Placement.SOFT,
            started_at=now - timedelta(hours=2, microseconds=7),
            finished_at=now - timedelta(hours=1),
            node_name="gpu-node-7",
        ),
        JobFactory(team=other_team, pool=pool, state=JobState.ADMITTED, gpus=4, nodes=2),
    ]


def serializer_page(jobs: list[Job]) -> list[dict]:
    """The rows JobSerializer writes for `jobs`, newest first, through DRF's renderer and back."""
    import json

    ordered = sorted(Job.objects.filter(pk__in=[job.pk for job in jobs]), key=lambda job: (job.created_at, job.pk))
    ordered.reverse()
    context = {
        "borrowed_gpus": selectors.borrowed_gpus(ordered),
        "quotes": worded_quotes(job.pk for job in ordered if job.state not in FINAL_STATES),
    }
    data = JobSerializer(ordered, many=True, context=context).data
    return json.loads(JSONRenderer().render(data))


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_each_row_of_the_list_is_what_the_job_serializer_writes(jobs, language):
    admin = UserFactory(username="ada", is_platform_admin=True)
    client = APIClient()
    client.force_authenticate(admin)
    from django.utils import translation

    # One moment for both: a quote's times are counted from now.
    with time_machine.travel(timezone.now(), tick=False), translation.override(language):
        listed = client.get("/api/v1/jobs/", HTTP_ACCEPT_LANGUAGE=language).json()["results"]
        expected = serializer_page(jobs)
    assert listed == expected
    # beta reserves nothing: its gang borrows all 8 GPUs; alpha holds 2 + 3 GPUs of its 4 reserved: one borrowed
    assert [row["borrowed_gpus"] for row in listed if row["borrowed_gpus"]] == [8, 1]
    assert all(list(row) == JobSerializer.Meta.fields for row in listed)
    assert ("借来的" in listed[0]["borrowed_note"]) == (language == "zh-hans")
    # The jobs not running yet carry their start-time quote (issue 28), the others none.
    quoted = {row["id"] for row in listed if row["expected_start"]}
    assert quoted == {job.pk for job in jobs if job.state in (JobState.QUEUED, JobState.ADMITTED)}


def test_a_filtered_and_reordered_page_is_written_the_same(jobs):
    admin = UserFactory(username="ada", is_platform_admin=True)
    client = APIClient()
    client.force_authenticate(admin)
    with time_machine.travel(timezone.now(), tick=False):
        listed = client.get("/api/v1/jobs/", {"state": ["running", "succeeded"], "ordering": "gpus"}).json()
        by_id = {row["id"]: row for row in serializer_page(jobs)}
    listed = listed["results"]
    assert [row["gpus"] for row in listed] == [1, 2, 3]
    assert listed == [by_id[row["id"]] for row in listed]


def test_a_teams_jobs_fill_its_reservation_in_order_of_admission_and_unknown_admissions_last(team, pool):
    now = timezone.now()
    pool_services.create_reservation(
        team=team, pool=pool, gpus=8, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
    )
    later, earlier, unknown = (
        JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=4, admitted_pool=pool) for _ in range(3)
    )

    def workload(job, name, admitted_at, *, finished=False):
        Workload.objects.create(
            uid=name,
            namespace=team.namespace,
            name=name,
            job=job,
            created_at=now - timedelta(hours=3),
            admitted=True,
            admitted_at=admitted_at,
            finished=finished,
        )

    # The later job's finished Workload was admitted first: only a live Workload's admission counts.
    workload(later, "wl-later-old", now - timedelta(hours=2), finished=True)
    workload(later, "wl-later", now - timedelta(minutes=10))
    workload(earlier, "wl-earlier", now - timedelta(hours=1))
    # earlier (4) and later (4) fill the 8 reserved GPUs; the job whose admission is unknown borrows.
    assert selectors.borrowed_gpus([later, earlier, unknown]) == {unknown.pk: 4}
    assert selectors.borrowed_gpus([later.pk, earlier.pk, unknown.pk]) == {unknown.pk: 4}
    # Only the jobs asked about are answered; the running sums still count every job of the team in the pool.
    assert selectors.borrowed_gpus([unknown.pk]) == {unknown.pk: 4}
    assert selectors.borrowed_gpus([later]) == {}


def test_a_page_of_running_jobs_reads_no_quotes(jobs, django_assert_num_queries):
    """Quotes are for jobs not running yet: a page without any reads none (its rows, their count and their borrowed
    GPUs, all in one query: jobs/api/listing.py), and a page with one queued job reads its team's queue."""
    admin = UserFactory(username="ada", is_platform_admin=True)
    client = APIClient()
    client.force_authenticate(admin)
    with django_assert_num_queries(1):
        running = client.get("/api/v1/jobs/", {"state": "running"}).json()["results"]
    assert {row["state"] for row in running} == {"running"} and len(running) == 2
    assert all(row["expected_start"] is None for row in running)
    with django_assert_num_queries(1) as captured:
        client.get("/api/v1/jobs/", {"state": "succeeded"})
    assert not any("jobs_jobquote" in query["sql"] for query in captured.captured_queries)
    queued = client.get("/api/v1/jobs/", {"state": "queued"}).json()["results"]
    assert len(queued) == 1 and queued[0]["expected_start"] is not None
