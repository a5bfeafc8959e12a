"""Where the quote is shown: the submit preview, the job's page (with how its quote moved), the pending page and
the API's `expected_start`, in English and Chinese; other teams' rows carry none."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs import services
from jobs.choices import JobState, Placement
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory, ReservationFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="train", name="Train Pool", contracted_gpus=8)
    NodeFactory(pool=pool, name="node-a")
    return pool


@pytest.fixture
def full(team, pool, researcher):
    """The team's quota of 8 is held by a running job of 8 GPUs started an hour ago with a 3-hour maximum; a job of
    4 GPUs waits."""
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    ReservationFactory(team=team, pool=pool, gpus=8)
    JobFactory(
        team=team,
        pool=pool,
        submitted_by=researcher,
        state=JobState.RUNNING,
        gpus=8,
        admitted_pool=pool,
        started_at=timezone.now() - timedelta(hours=1),
        max_run_minutes=180,
    )
    return JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED, gpus=4, name="waiter")


def _form(**changes):
    data = {
        "team": "alpha",
        "pool": "train",
        "name": "bert-base",
        "image": "registry.example.com/nlp/bert:2.1",
        "command": "python train.py",
        "gpus": "4",
        "cpu": "4",
        "memory_gib": "16",
        "placement": Placement.STRICT,
        "priority": "50",
        "max_run_minutes": "120",
    }
    data.update(changes)
    return data


def test_the_job_page_says_when_a_queued_job_is_likely_to_start_and_how_its_quote_moved(client, researcher, full):
    services.record_quotes()
    client.force_login(researcher)
    html = client.get(reverse("jobs:job_detail", args=[full.pk])).content.decode()
    assert "Expected start" in html and "likely " in html and "80 %" in html
    assert "your team&#x27;s running jobs free 8 GPUs by" in html
    assert "How its expected start moved" in html
    status = client.get(reverse("jobs:job_status", args=[full.pk]), **HTMX).content.decode()
    assert "likely " in status  # the polled status fragment carries it: it follows the queue


def test_the_job_page_of_a_running_job_has_no_quote(client, researcher, team, pool):
    running = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING)
    client.force_login(researcher)
    assert "Expected start" not in client.get(reverse("jobs:job_detail", args=[running.pk])).content.decode()


def test_the_job_page_says_it_in_chinese(client, researcher, full, compiled_translations):
    researcher.language = "zh-hans"
    researcher.save()
    client.force_login(researcher)
    html = client.get(reverse("jobs:job_detail", args=[full.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "预计" in html and "你团队正在运行的作业最晚于" in html


def test_the_pending_page_quotes_the_viewer_s_jobs_and_not_other_teams(client, researcher, full, other_team, pool):
    QuotaFactory(team=other_team, pool=pool, max_gpus=0)
    JobFactory(team=other_team, pool=pool, state=JobState.QUEUED, gpus=2, name="theirs")
    client.force_login(researcher)
    html = client.get(reverse("jobs:pending")).content.decode()
    assert html.count("likely ") == 1
    assert "cannot start with your team" not in html


def test_the_api_gives_expected_start_with_its_interval_and_basis(client, researcher, full, team, pool):
    client.force_login(researcher)
    body = client.get(f"/api/v1/jobs/{full.pk}/").json()
    expected = body["expected_start"]
    assert not expected["starts_now"]
    assert expected["low"] <= expected["estimate"] <= expected["high"]
    assert "running jobs free 8 GPUs" in expected["basis"]
    listed = {row["id"]: row["expected_start"] for row in client.get("/api/v1/jobs/").json()["results"]}
    assert listed[full.pk]["estimate"] == expected["estimate"]
    assert [value for key, value in listed.items() if key != full.pk] == [None]  # the running job


def test_the_preview_quotes_the_job_before_it_is_submitted(client, researcher, full):
    client.force_login(researcher)
    html = client.post(reverse("jobs:job_submit_preview"), _form(), **HTMX).content.decode()
    assert "Likely start" in html and "1 job ahead of you in your team&#x27;s queue, 4 GPUs" in html
