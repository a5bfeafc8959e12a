"""A job submitted through the page that has committed is answered as saved, whatever fails afterwards.

Users saw: PostgreSQL went away right after the submit committed, the page read the job's queue position (or saved
the template asked for) and answered "Back in a moment" (503), which reloads itself into an empty submit form with no
sign of the job; they submitted again: two jobs, twice the GPUs and the bill. docs/failures.md, "PostgreSQL down": a
write that committed just before the database went away still answers success; the API keeps it
(`jobs.api.views._committed`, tests/api/test_outages.py), the page now does too: it sends the user to the job's page
saying the job is saved (messages live in a cookie, not the database)."""

import pytest
from django.contrib.messages import get_messages
from django.db import OperationalError
from django.test import Client
from django.urls import reverse

from jobs import job_templates, services
from jobs.models import Job, JobTemplate
from tests.factories import NodeFactory, PoolFactory, QuotaFactory
from tests.faultkit import database_down

pytestmark = pytest.mark.django_db(transaction=True)

FORM = {
    "team": "alpha",
    "pool": "train",
    "name": "through-outage",
    "image": "registry.example.com/t/train:1",
    "gpus": "1",
    "cpu": "1",
    "memory_gib": "4",
    "placement": "strict",
    "priority": "50",
    "max_run_minutes": "60",
}


@pytest.fixture
def client(researcher, team):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    NodeFactory(pool=pool, name="gpu-outage")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    return client


def _said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def test_a_page_submit_that_committed_does_not_answer_an_error(client, monkeypatch):
    real_submit = services.submit_job
    outage = database_down()
    lost: list[bool] = []

    def submit_then_lose_the_database(**kwargs):
        job = real_submit(**kwargs)  # committed
        outage.__enter__()
        lost.append(True)
        return job

    monkeypatch.setattr(services, "submit_job", submit_then_lose_the_database)
    try:
        response = client.post(reverse("jobs:job_submit"), FORM)
        said = _said(response)
    finally:
        if lost:
            outage.__exit__(None, None, None)
    assert lost, f"the form did not submit: {response.status_code}"

    job = Job.objects.get(name="through-outage")  # accepted and persisted, once
    assert response.status_code == 302, f"answered {response.status_code} for a job it saved (#{job.pk})"
    assert response.url == reverse("jobs:job_detail", kwargs={"pk": job.pk})
    assert said == [f"Job #{job.pk} saved; its details are unavailable for a moment."]


def test_a_template_lost_with_the_database_is_said_not_saved(client, monkeypatch):
    def lose_the_database(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(job_templates, "save_template", lose_the_database)
    response = client.post(reverse("jobs:job_submit"), {**FORM, "save_as_template": "nightly"})

    job = Job.objects.get(name="through-outage")
    assert response.status_code == 302
    assert response.url == reverse("jobs:job_detail", kwargs={"pk": job.pk})
    assert not JobTemplate.objects.exists()
    assert _said(response) == [
        "The template “nightly” was not saved: save it again in a moment.",
        f"Job #{job.pk} saved; its details are unavailable for a moment.",
    ]


def test_a_page_submit_says_its_queue_position_when_nothing_fails(client):
    """The positive control: the usual answer, with the position the page could read."""
    response = client.post(reverse("jobs:job_submit"), {**FORM, "save_as_template": "nightly"})

    job = Job.objects.get(name="through-outage")
    assert response.status_code == 302
    said = _said(response)
    assert said[0] == "Saved as template “nightly”."
    assert said[1].startswith(f"Job #{job.pk} ")
    assert "unavailable" not in said[1]
