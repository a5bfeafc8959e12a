"""The pending page's "Waiting" column counts a queued job's wait from its last move to Queued, as the queue-wait
alert does (`JobQuerySet.with_waiting_since`, docs/features.md: "a preemption restarts it"): a job preempted back to
Queued a minute ago after running for hours showed hours of waiting, on top of the longest-wait-first list."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.choices import JobState
from jobs.models import Job, JobEvent
from jobs.selectors import pending_overview
from monitoring.evaluators import queue_wait
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory

pytestmark = pytest.mark.django_db


def test_a_job_preempted_a_minute_ago_has_waited_a_minute(team, researcher):
    now = timezone.now()
    pool = PoolFactory(slug="p", name="P")
    NodeFactory(pool=pool)
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    job = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=4)
    submitted = now - timedelta(hours=5)
    Job.objects.filter(pk=job.pk).update(created_at=submitted, state_changed_at=now - timedelta(minutes=1))
    JobEvent.objects.create(job=job, from_state="", to_state=JobState.QUEUED, at=submitted)
    JobEvent.objects.create(job=job, from_state=JobState.QUEUED, to_state=JobState.ADMITTED, at=submitted)
    JobEvent.objects.create(job=job, from_state=JobState.ADMITTED, to_state=JobState.RUNNING, at=submitted)
    JobEvent.objects.create(
        job=job, from_state=JobState.RUNNING, to_state=JobState.QUEUED, at=now - timedelta(minutes=1)
    )

    [alert] = [each for each in queue_wait(now) if each.job_id == job.pk]
    assert alert.value == 1.0  # the alert: waiting one minute

    [row] = [row for row in pending_overview(researcher, now=now).page if row.job_id == job.pk]
    assert row.wait_seconds <= 120, row.wait_seconds

    # A job never preempted waits from its submission (the rule's other branch).
    fresh = JobFactory(team=team, pool=pool, state=JobState.QUEUED, gpus=4)
    Job.objects.filter(pk=fresh.pk).update(created_at=now - timedelta(minutes=30))
    [row] = [row for row in pending_overview(researcher, now=now).page if row.job_id == fresh.pk]
    assert 1790 <= row.wait_seconds <= 1810, row.wait_seconds
