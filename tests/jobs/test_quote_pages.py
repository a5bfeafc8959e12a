"""Where the quote is shown: the submit preview, the job's page (with how its quote moved), the pending page and
the API's `expected_start`, in English and Chinese; other teams' rows carry none."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs import services
from jobs.choices import JobState, Placement
from jobs.models import Job
from tests.factories import JobFactory, NodeFactory, PodFactory, PoolFactory, QuotaFactory, ReservationFactory

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
    assert expected["waits_for_node"] is False


def test_the_api_says_an_admitted_job_waits_for_a_node_when_its_pod_has_none(client, researcher, team, pool):
    """Kueue admitted it, the scheduler places its pod nowhere: `expected_start` says so, with no times, rather than
    "starts now"."""
    job = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.PENDING, gpus=8)
    PodFactory(team=team, pool=pool, job=job, pending_reason="0/1 nodes are available: 1 node(s) were unschedulable.")
    client.force_login(researcher)
    expected = client.get(f"/api/v1/jobs/{job.pk}/").json()["expected_start"]
    assert expected["waits_for_node"] is True and expected["starts_now"] is False
    assert (expected["estimate"], expected["low"], expected["high"]) == (None, None, None)
    assert expected["text"] == "waits for a node" and "finds no node for its pods" in expected["basis"]
    html = client.get(reverse("jobs:job_detail", args=[job.pk])).content.decode()
    assert "waits for a node" in html and "starts now" not in html


def test_a_quote_that_fails_after_a_submit_committed_answers_201_not_a_500(client, researcher, full, monkeypatch):
    """The job is saved when its details are put together: a 500 then would have the caller submit it twice."""

    def broken(*args, **kwargs):
        raise ValueError("the quote broke")

    monkeypatch.setattr("jobs.api.views.worded_quotes", broken)
    client.force_login(researcher)
    body = {"team": "alpha", "pool": "train", "name": "saved-anyway", "image": "registry.example.com/t/a:1", "gpus": 1}
    response = client.post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 201
    job = Job.objects.get(name="saved-anyway")
    saved = "Saved; details are unavailable for a moment."
    assert response.json() == {"id": job.pk, "state": job.state, "detail": saved}


def test_the_preview_quotes_the_job_before_it_is_submitted(client, researcher, full):
    client.force_login(researcher)
    html = client.post(reverse("jobs:job_submit_preview"), _form(), **HTMX).content.decode()
    assert "Likely start" in html and "1 job ahead of you in your team&#x27;s queue, 4 GPUs" in html


def test_the_preview_says_what_the_submit_would_refuse_rather_than_quote_it(client, researcher, lead, full):
    """High priority is for leads here: a researcher's preview says so instead of "starts now, Kueue stops 1
    lower-priority job"; the lead's preview quotes it."""
    client.force_login(researcher)
    html = client.post(reverse("jobs:job_submit_preview"), _form(priority="100"), **HTMX).content.decode()
    assert "Cannot submit: High priority can preempt other work" in html and "Likely start" not in html
    client.force_login(lead)
    html = client.post(reverse("jobs:job_submit_preview"), _form(priority="100"), **HTMX).content.decode()
    assert "Cannot submit" not in html and "Likely start" in html


@pytest.fixture
def spill(pool, team):
    """An elastic spill pool of the train pool, where the team has quota: soft placement or the pool itself start
    now there, at its hourly price."""
    elastic = PoolFactory(
        slug="burst", name="Burst", kind="elastic", contracted_gpus=None, gpus_per_node=8, max_nodes=1
    )
    pool.spill_pools.set([elastic])
    QuotaFactory(team=team, pool=elastic, max_gpus=8)
    return elastic


def test_the_preview_offers_alternatives_that_start_sooner_with_their_price(client, researcher, full, spill):
    full.state = JobState.CANCELLED  # nobody ahead: in a strict queue a waiting head holds back every pool
    full.save()
    client.force_login(researcher)
    html = client.post(reverse("jobs:job_submit_preview"), _form(), **HTMX).content.decode()
    assert "Starts sooner" in html
    assert "with soft placement" in html and "in Burst" in html
    assert "72.00 per hour" in html  # 4 GPUs at the elastic pool's 18.00 per GPU-hour
    assert 'value="placement=soft"' in html and 'value="pool=burst"' in html
    assert html.count("Take this") <= 3


def test_taking_an_alternative_prefills_the_form_and_submits_nothing(client, researcher, full, spill):
    from jobs.models import Job

    client.force_login(researcher)
    before = Job.objects.count()
    response = client.post(reverse("jobs:job_submit_take"), {**_form(), "take": "placement=soft&team=other"})
    html = response.content.decode()
    assert response.status_code == 200 and Job.objects.count() == before
    soft = re.search(r'<input[^>]*value="soft"[^>]*>', html).group(0)
    assert "checked" in soft, soft
    assert 'name="name" value="bert-base"' in html  # the rest as typed
