"""The job page shows the job's GPU utilisation from the monitoring rollups, and flags an idle job."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.choices import JobState
from monitoring.models import JobUtilisation
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_job_page_without_telemetry_says_so(client, team, researcher):
    job = JobFactory(team=team, submitted_by=researcher)
    client.force_login(researcher)
    response = client.get(reverse("jobs:job_detail", args=[job.pk]))
    assert response.status_code == 200
    assert b"No GPU telemetry for this job yet" in response.content


def test_job_page_shows_utilisation_and_flags_an_idle_job(client, team, researcher):
    now = timezone.now()
    job = JobFactory(team=team, submitted_by=researcher, state=JobState.RUNNING, gpus=2)
    JobUtilisation.objects.create(
        job=job,
        samples=4,
        util_sum=8.0,
        last_util=1.5,
        gpus=2,
        first_at=now - timedelta(hours=1),
        last_at=now,
        idle_since=now - timedelta(minutes=45),
    )
    client.force_login(researcher)
    content = client.get(reverse("jobs:job_detail", args=[job.pk])).content.decode()
    assert "GPU utilisation" in content
    assert "1.5 %" in content
    assert "Idle: this job holds its GPUs" in content
