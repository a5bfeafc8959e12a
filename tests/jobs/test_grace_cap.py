"""The reclaim promise kept (issue 24): a job's grace period, the time its pods have to stop when a lender takes its
GPUs back, is capped by a platform setting (RESERVOIR_MAX_GRACE_SECONDS, default 60 s) in the form, the API and the
service alike; a job that asks for none gets Kubernetes' 30 s, or the cap when that is lower."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from jobs import services
from jobs.choices import JobState
from jobs.models import Job
from jobs.specs import JobSpec
from tests.factories import JobFactory, PoolFactory, QuotaFactory

BODY = {"team": "alpha", "pool": "train", "image": "registry.example.com/t/train:1", "gpus": 1}
FORM = {**BODY, "gpus": "1", "cpu": "1", "memory_gib": "4", "placement": "strict", "priority": "50"}


@pytest.fixture
def pool(team):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    return pool


@pytest.fixture
def api(researcher):
    client = APIClient()
    client.force_login(researcher)
    return client


def test_the_api_refuses_a_grace_period_above_the_platforms_cap(api, pool):
    for asked in (61, 600, 3600):
        response = api.post(
            "/api/v1/jobs/", {**BODY, "name": "long", "termination_grace_seconds": asked}, format="json"
        )
        assert response.status_code == 400, asked
        assert response.json()["termination_grace_seconds"] == ["Grace period cannot be above 60."]
    assert not Job.objects.exists()
    at_the_cap = api.post("/api/v1/jobs/", {**BODY, "name": "cap", "termination_grace_seconds": 60}, format="json")
    assert at_the_cap.status_code == 201 and at_the_cap.json()["termination_grace_seconds"] == 60


def test_the_submit_form_shows_and_keeps_the_cap(client, researcher, pool):
    client.force_login(researcher)
    page = client.get(reverse("jobs:job_submit")).content.decode()
    assert "At most 60 s on this portal." in page and 'max="60"' in page
    response = client.post(reverse("jobs:job_submit"), {**FORM, "name": "long", "termination_grace_seconds": "3600"})
    assert response.status_code == 400
    assert "Ensure this value is less than or equal to 60." in response.content.decode()
    assert not Job.objects.exists()


def test_the_service_refuses_it_too_also_on_resubmission(team, researcher, pool):
    spec = JobSpec(name="long", image="registry.example.com/t/train:1", gpus=1, termination_grace_seconds=3600)
    with pytest.raises(ValidationError) as error:
        services.submit_job(team=team, pool=pool, user=researcher, spec=spec)
    assert error.value.message_dict["termination_grace_seconds"] == ["Grace period can be at most 60."]
    # A job from before the cap is resubmitted only within it.
    old = JobFactory(team=team, pool=pool, state=JobState.SUCCEEDED, termination_grace_seconds=3600)
    with pytest.raises(ValidationError) as error:
        services.resubmit_job(job=old, user=researcher)
    assert "termination_grace_seconds" in error.value.message_dict


def test_the_cap_is_a_setting_and_a_lower_cap_lowers_the_default(settings, client, api, researcher, pool):
    settings.JOB_MAX_GRACE_SECONDS = 10
    response = api.post("/api/v1/jobs/", {**BODY, "name": "plain"}, format="json")
    assert response.status_code == 201 and response.json()["termination_grace_seconds"] == 10
    client.force_login(researcher)
    assert 'name="termination_grace_seconds" value="10"' in client.get(reverse("jobs:job_submit")).content.decode()
    settings.JOB_MAX_GRACE_SECONDS = 900
    response = api.post("/api/v1/jobs/", {**BODY, "name": "ckpt", "termination_grace_seconds": 900}, format="json")
    assert response.status_code == 201
    plain = api.post("/api/v1/jobs/", {**BODY, "name": "plain-2"}, format="json")
    assert plain.json()["termination_grace_seconds"] == 30
