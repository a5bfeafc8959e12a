"""The pending page filtered by pool (`/jobs/pending/?pool=<slug>`) keeps each queued job's position in its team's
queue (one ClusterQueue per team, all its pools): the position was numbered over the filtered rows only, so a job
behind one queued in another pool read "position 1 … Kueue admits it at its next pass"."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs import services
from jobs.choices import JobState
from tests.factories import JobFactory, NodeFactory, PoolFactory, QuotaFactory

pytestmark = pytest.mark.django_db


def test_a_queued_job_keeps_its_team_queue_position_when_the_page_is_filtered_by_pool(client, team, researcher):
    first = PoolFactory(slug="first", name="First")
    second = PoolFactory(slug="second", name="Second")
    for pool in (first, second):
        NodeFactory(pool=pool)
        QuotaFactory(team=team, pool=pool, max_gpus=8)
    now = timezone.now()
    head = JobFactory(team=team, pool=first, state=JobState.QUEUED, gpus=2)
    behind = JobFactory(team=team, pool=second, state=JobState.QUEUED, gpus=2)
    JobFactory._meta.model.objects.filter(pk=head.pk).update(created_at=now - timedelta(minutes=10))
    JobFactory._meta.model.objects.filter(pk=behind.pk).update(created_at=now - timedelta(minutes=5))
    behind.refresh_from_db()
    assert services.queue_position(behind) == 2  # the job page: one job of the team ahead of it

    client.force_login(researcher)
    unfiltered = {row.job_id: row for row in client.get(reverse("jobs:pending")).context["overview"].page}
    assert unfiltered[behind.pk].position == 2
    filtered = client.get(reverse("jobs:pending"), {"pool": "second"}).context["overview"].page
    [row] = [row for row in filtered if row.job_id == behind.pk]
    assert row.position == 2
    assert "1 job of the team is ahead of it" in row.hint
