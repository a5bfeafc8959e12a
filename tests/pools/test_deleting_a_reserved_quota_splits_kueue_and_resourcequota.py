"""Deleting a team's quota in a pool where it holds a reservation (Django admin, one or in bulk) used to succeed: the
namespace's ResourceQuota then dropped to 0 GPUs there (it sums the Quota rows) while the team's ClusterQueue kept the
reservation as its nominal quota. Kueue admitted the team's jobs and the ResourceQuota refused their pods: admitted
jobs that never started, holding the team's reservation while they waited.

A quota is "its reservation, plus any extra" (PRODUCT.md, Quota): a deletion is refused wherever a quota of 0 would be
(`set_quota`): while the team reserves GPUs there from now on, or its jobs hold GPUs there; Django admin's delete page
says why. Pure: the desired state read from the rows (`pools.projection`) and rendered (`cluster.kueue`,
`cluster.namespaces`), no cluster."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from cluster import kueue as render
from cluster.labels import GPU_RESOURCE
from cluster.namespaces import render_resource_quota
from jobs.choices import JobState
from pools import projection, services
from pools.choices import PoolKind
from pools.models import Quota
from portal.models import AuditEntry
from tests.factories import JobFactory, PoolFactory, QuotaFactory, TeamFactory


def kueue_gpus_the_team_may_be_admitted(team_slug: str) -> int:
    """Sum over the team ClusterQueue's flavors of nominal + borrowingLimit for GPUs: what Kueue may admit for it."""
    pools, teams = projection.desired_specs(timezone.now())
    team_spec = next(spec for spec in teams if spec.slug == team_slug)
    queue = render.render_team_cluster_queue(team_spec, render.flavor_order(pools))
    total = 0
    for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
        for resource in flavor["resources"]:
            if resource["name"] == GPU_RESOURCE:
                total += int(resource["nominalQuota"]) + int(resource["borrowingLimit"])
    return total


def resource_quota_gpus(team) -> int:
    return int(render_resource_quota(projection.namespace_spec(team))["spec"]["hard"][f"requests.{GPU_RESOURCE}"])


@pytest.fixture
def reserved(platform_admin):
    """Team llm reserves 8 GPUs of a800 from yesterday for a month: its quota there is raised to 8."""
    team = TeamFactory(slug="llm", name="LLM")
    pool = PoolFactory(slug="a800", name="A800", contracted_gpus=16)
    now = timezone.now()
    services.create_reservation(
        team=team, pool=pool, gpus=8, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=29)
    )
    quota = Quota.objects.get(team=team, pool=pool)
    assert quota.max_gpus == 8
    return quota


@pytest.mark.django_db
def test_deleting_the_quota_of_a_reserved_pool_leaves_kueue_and_the_resourcequota_agreeing(reserved, platform_admin):
    with pytest.raises(ValidationError, match="LLM reserves up to 8 GPUs of A800 from now on"):
        services.delete_quota(quota=reserved, user=platform_admin)

    assert Quota.objects.filter(pk=reserved.pk).exists()
    kueue_gpus = kueue_gpus_the_team_may_be_admitted("llm")
    assert resource_quota_gpus(reserved.team) >= kueue_gpus == 8, (
        f"Kueue may admit {kueue_gpus} GPUs for the team, its namespace's ResourceQuota lets pods hold only "
        f"{resource_quota_gpus(reserved.team)}: admitted jobs whose pods are refused"
    )


@pytest.mark.django_db
def test_a_quota_its_jobs_hold_gpus_under_is_not_deleted(team, platform_admin):
    pool = PoolFactory(slug="spot", name="Spot", kind=PoolKind.ELASTIC, contracted_gpus=None)
    quota = QuotaFactory(team=team, pool=pool, max_gpus=4)
    JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=2, admitted_pool=pool)

    with pytest.raises(ValidationError, match="jobs use 2 GPUs of Spot now"):
        services.delete_quota(quota=quota, user=platform_admin)
    assert Quota.objects.filter(pk=quota.pk).exists()


@pytest.mark.django_db
def test_django_admin_says_why_and_keeps_the_quota(client, reserved, platform_admin):
    client.force_login(platform_admin)
    url = reverse("admin:pools_quota_delete", args=[reserved.pk])

    page = client.get(url).content.decode()
    answer = client.post(url, {"post": "yes"})
    bulk = client.post(
        reverse("admin:pools_quota_changelist"),
        {"action": "delete_selected", "_selected_action": [reserved.pk], "post": "yes"},
    )

    assert "cannot be deleted: LLM reserves up to 8 GPUs of A800 from now on" in page
    assert answer.status_code == 200 and bulk.status_code == 200
    assert Quota.objects.filter(pk=reserved.pk).exists()
    assert not AuditEntry.objects.filter(action="quota.delete").exists()


@pytest.mark.django_db
def test_a_quota_nothing_needs_is_deleted_once_the_reservation_has_ended(reserved, platform_admin, client):
    """Positive control: the same quota, once its reservation has ended, is deleted (and audited) in Django admin."""
    services.end_reservation(reservation=reserved.team.reservations.get(), ends_at=timezone.now(), user=platform_admin)
    client.force_login(platform_admin)

    client.post(reverse("admin:pools_quota_delete", args=[reserved.pk]), {"post": "yes"})

    assert not Quota.objects.filter(pk=reserved.pk).exists()
    assert AuditEntry.objects.filter(action="quota.delete").exists()
    assert resource_quota_gpus(reserved.team) >= kueue_gpus_the_team_may_be_admitted("llm") == 0
