"""The pending view tells nothing of a team the viewer cannot see (issue 15): its queued jobs wait "for its team's
quota" without that team's quota, usage or queue position, and its pods "for a node" without the scheduler's
words (which may name its volumes); the viewer's own rows and an admin's view keep every detail."""

import pytest
from django.urls import reverse

from jobs.choices import JobState
from jobs.models import Workload
from tests.factories import JobFactory, NodeFactory, PodFactory, PoolFactory, QuotaFactory


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="train", name="Train Pool")
    NodeFactory(pool=pool, name="node-a")
    return pool


KUEUE_SAID = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor train, "
    "2 more needed"
)
KUEUE_REASON = (
    "Waiting for its team's quota in Train Pool: 2 more GPUs needed than the team's reservation and what it may "
    "borrow leave free now."
)


@pytest.fixture
def beta_waits(other_team, pool, outsider):
    """beta: 3 of 3 GPUs of its quota in use, a 2-GPU job queued behind it; a pod stuck on a missing volume."""
    QuotaFactory(team=other_team, pool=pool, max_gpus=3)
    JobFactory(team=other_team, pool=pool, submitted_by=outsider, state=JobState.RUNNING, gpus=3)
    queued = JobFactory(
        team=other_team, pool=pool, submitted_by=outsider, state=JobState.QUEUED, gpus=2, name="beta-next"
    )
    Workload.objects.create(  # as the sync mirrors Kueue's Workload; the page words its message
        uid="w-beta-next",
        namespace=other_team.namespace,
        name="job-beta-next",
        job=queued,
        message=KUEUE_SAID,
        created_at=queued.created_at,
    )
    PodFactory(
        name="beta-pod",
        team=other_team,
        pool=pool,
        gpus=1,
        pending_reason='persistentvolumeclaim "beta-private-dataset" not found',
    )


def rows(client):
    return list(client.get(reverse("jobs:pending")).context["overview"].page)


def test_another_teams_rows_say_only_that_they_wait(client, researcher, beta_waits):
    client.force_login(researcher)
    html = client.get(reverse("jobs:pending")).content.decode()
    assert "waiting for its team&#x27;s quota" in html and "waiting for a node" in html
    assert "Train Pool: 2 more GPUs" not in html and "starts when" not in html and "position" not in html
    assert "beta-private-dataset" not in html
    queued = next(row for row in rows(client) if row.kind == "queued")
    assert (queued.reason, queued.hint, queued.position) == ("waiting for its team's quota", "", None)


def test_own_rows_and_an_admins_view_keep_the_quota_reason(client, lead, platform_admin, team, other_team, beta_waits):
    client.force_login(platform_admin)
    reasons = {row.kind: row.reason for row in rows(client)}
    assert reasons["queued"] == KUEUE_REASON
    assert "beta-private-dataset" in reasons["pod"]
    # A member of beta sees beta's own details too.
    client.force_login(other_team.memberships.get().user)
    assert next(row for row in rows(client) if row.kind == "queued").reason == KUEUE_REASON
