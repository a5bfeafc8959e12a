"""Every write is throttled on the pages as in the API (issue 24): one setting, one count per user shared by the
browser and the API, job submissions on top; over the limit a page answers 429 with Retry-After and says when to try
again (an htmx request gets the words as a fragment at the top of the page); reads and the live preview are not
counted; signed out, the count is per address and a made-up X-Forwarded-For does not get a new one."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.choices import JobState
from jobs.models import Job
from teamdata.models import TeamVolume
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="train", name="Train Pool")
    NodeFactory(pool=pool, name="node-a")
    return pool


def submit_form(name: str) -> dict:
    return {
        "team": "alpha",
        "pool": "train",
        "name": name,
        "image": "registry.example.com/nlp/bert:2.1",
        "gpus": "1",
        "cpu": "1",
        "memory_gib": "4",
        "placement": "strict",
        "priority": "50",
        "max_run_minutes": "60",
    }


def test_the_submit_form_meets_the_same_submission_limit_as_the_api(settings, client, team, researcher, lead, pool):
    settings.THROTTLE_RATES = {"writes": "", "job_submissions": "3/minute"}
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client.force_login(researcher)
    api = APIClient()
    api.force_login(researcher)
    assert client.post(reverse("jobs:job_submit"), submit_form("page-1")).status_code == 302
    body = {"team": "alpha", "pool": "train", "name": "api-1", "image": "registry.example.com/a/b:1", "gpus": 1}
    assert api.post("/api/v1/jobs/", body, format="json").status_code == 201
    assert client.post(reverse("jobs:job_submit"), submit_form("page-2")).status_code == 302
    # The live preview only renders what is typed: it is no submission and no write.
    for _ in range(5):
        assert client.post(reverse("jobs:job_submit_preview"), submit_form("typing"), **HTMX).status_code == 200

    refused = client.post(reverse("jobs:job_submit"), submit_form("page-3"))
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    html = refused.content.decode()
    assert "You submitted more jobs in a short time than the portal takes from one person." in html
    assert f"Try again in {refused['Retry-After']} seconds." in html and "Nothing was changed." in html
    assert api.post("/api/v1/jobs/", {**body, "name": "api-2"}, format="json").status_code == 429
    assert sorted(Job.objects.values_list("name", flat=True)) == ["api-1", "page-1", "page-2"]
    # Reads go on, and another user of the same team has an allowance of their own.
    assert client.get(reverse("jobs:job_list")).status_code == 200
    client.force_login(lead)
    assert client.post(reverse("jobs:job_submit"), submit_form("by-lead")).status_code == 302


def test_resubmit_counts_as_a_submission_and_htmx_gets_the_words_as_a_fragment(
    settings, client, team, researcher, pool
):
    settings.THROTTLE_RATES = {"writes": "", "job_submissions": "1/minute"}
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    finished = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.SUCCEEDED, name="done")
    client.force_login(researcher)
    assert client.post(reverse("jobs:job_resubmit", args=[finished.pk]), **HTMX).status_code == 200
    refused = client.post(reverse("jobs:job_resubmit", args=[finished.pk]), **HTMX)
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert (refused["HX-Retarget"], refused["HX-Reswap"]) == ("#main", "afterbegin")
    html = refused.content.decode()
    assert "<html" not in html and 'role="alert"' in html and "Try again in" in html
    assert Job.objects.filter(resubmitted_from=finished).count() == 1


def test_every_page_write_counts_toward_the_users_write_limit(settings, client, team, lead, researcher, pool):
    settings.THROTTLE_RATES = {"writes": "3/minute", "job_submissions": ""}
    running = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING)
    client.force_login(lead)
    volume = {"name": "data-1", "source": "existing"}
    assert client.post(reverse("teamdata:volume_create", args=["alpha"]), volume).status_code == 302
    assert client.post(reverse("jobs:job_cancel", args=[running.pk]), **HTMX).status_code == 200
    api = APIClient()
    api.force_login(lead)
    assert api.post("/api/v1/volumes/", {"team": "alpha", "name": "data-2", "source": "existing"}).status_code == 201

    refused = client.post(reverse("teamdata:volume_create", args=["alpha"]), {**volume, "name": "data-3"})
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "You made more changes in a short time than the portal takes from one person." in refused.content.decode()
    assert client.post(reverse("portal:team_quota_request", args=["alpha"]), {}).status_code == 429
    assert api.post("/api/v1/volumes/", {"team": "alpha", "name": "data-4", "source": "existing"}).status_code == 429
    assert sorted(TeamVolume.objects.values_list("name", flat=True)) == ["data-1", "data-2"]
    assert client.get(reverse("portal:team_detail", args=["alpha"])).status_code == 200


def test_signed_out_writes_count_per_address_whatever_x_forwarded_for_says(settings, client, db):
    settings.THROTTLE_RATES = {"writes": "2/minute", "job_submissions": ""}
    login = reverse("portal:login")
    answers = [
        client.post(login, {"username": f"user{n}", "password": "x"}, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
        for n in range(3)
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
