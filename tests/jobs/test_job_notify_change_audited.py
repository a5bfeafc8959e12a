"""Changing a job's e-mail choice on its page (POST /jobs/<id>/notify/) and in the API is audited with who made it,
before and after (docs/features.md: "every write through a service ... records who, what, before and after"): it
wrote the job row and no audit entry."""

import pytest
from django.urls import reverse

from jobs.choices import JobState
from portal.models import AuditEntry
from tests.factories import JobFactory, PoolFactory, QuotaFactory


@pytest.fixture
def job(team, researcher):
    pool = PoolFactory(slug="train", name="Train Pool")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    return JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, notify=["fail"])


def test_changing_a_jobs_emails_on_its_page_is_audited_with_who(client, researcher, job):
    client.force_login(researcher)
    response = client.post(reverse("jobs:job_notify", args=[job.pk]), {"notify": ["start", "fail"]})
    assert response.status_code == 302
    job.refresh_from_db()
    assert set(job.notify) == {"start", "fail"}  # the page changed the job
    entries = AuditEntry.objects.filter(object_type__icontains="job", object_id=str(job.pk)).exclude(
        action="job.submit"
    )
    assert entries.filter(actor=researcher).exists(), "the change to the job's e-mails left no audit entry"
