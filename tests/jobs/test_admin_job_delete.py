"""A platform admin could delete a job in Django admin, a running one included: its row and its recorded transitions
vanished with no audit entry, and its batch/v1 Job and pods kept running (and being metered) with nothing left in the
portal to cancel them. Jobs change state only through jobs.services: Django admin shows them and never deletes them;
a job leaves the cluster through cancel, and its record stays."""

import pytest

from jobs.choices import JobState
from jobs.models import Job, JobEvent, Words
from tests.factories import JobFactory, PoolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Training", contracted_gpus=16)


def test_a_running_job_is_not_deleted_in_django_admin(client, platform_admin, team, pool, researcher):
    job = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.RUNNING, gpus=8)
    JobEvent.note(job=job, from_state="", to_state=JobState.QUEUED, message=Words("submitted"))
    client.force_login(platform_admin)
    assert client.get(f"/admin/jobs/job/{job.pk}/change/").status_code == 200  # the admin sees the job

    answer = client.post(f"/admin/jobs/job/{job.pk}/delete/", {"post": "yes"})

    assert answer.status_code == 403
    assert Job.objects.filter(pk=job.pk).exists(), f"running job #{job.pk} deleted in Django admin"
    assert JobEvent.objects.filter(job_id=job.pk).count() == 1


def test_the_job_list_offers_no_bulk_delete(client, platform_admin, team, pool, researcher):
    job = JobFactory(team=team, pool=pool, submitted_by=researcher, state=JobState.QUEUED)
    client.force_login(platform_admin)
    listing = client.get("/admin/jobs/job/")
    assert listing.status_code == 200 and f"/admin/jobs/job/{job.pk}/change/".encode() in listing.content
    assert b"delete_selected" not in listing.content
