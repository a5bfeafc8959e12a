"""The Kueue projection's bookkeeping, without a cluster: what is rendered from the rows at a given moment, when a
change is sent to Kueue, when a reservation boundary calls for a new projection, and what `applied` says.
tests/pools/test_cluster_kueue.py checks the same projection against the real cluster and real Kueue."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.admin.sites import site
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from cluster import kueue as render
from pools import projection
from pools import services as pool_services
from pools.choices import Lending, PoolKind
from pools.models import KueueProjection
from portal.models import AuditEntry, Team
from reconcile import kueue
from tests.factories import NodeFactory, PoolFactory, ReservationFactory, TeamFactory

T0 = timezone.now().replace(microsecond=0) + timedelta(days=1)


@pytest.fixture
def sent(monkeypatch):
    """Versions handed to the Kueue reconcile task (no cluster here); team namespaces are not reconciled either."""
    calls: list[int | None] = []
    monkeypatch.setattr("reconcile.tasks.reconcile_kueue.delay", lambda version=None: calls.append(version))
    monkeypatch.setattr("reconcile.tasks.reconcile_team_namespace.delay", lambda team_id: None)
    return calls


@pytest.fixture
def world(db):
    a800 = PoolFactory(slug="a800", contracted_gpus=32)
    elastic = PoolFactory(slug="spot", kind=PoolKind.ELASTIC, contracted_gpus=None, max_nodes=5, gpus_per_node=None)
    NodeFactory(pool=elastic, gpu_capacity=4, gpu_allocatable=4)
    NodeFactory(pool=elastic, gpu_capacity=8, gpu_allocatable=8)
    llm, vision = TeamFactory(slug="llm"), TeamFactory(slug="vision")
    ReservationFactory(team=llm, pool=a800, gpus=8, starts_at=T0 - timedelta(days=10), ends_at=T0 + timedelta(days=10))
    ReservationFactory(team=llm, pool=a800, gpus=4, starts_at=T0 - timedelta(days=30), ends_at=T0 - timedelta(days=10))
    ReservationFactory(
        team=vision, pool=a800, gpus=4, starts_at=T0 + timedelta(hours=1), ends_at=T0 + timedelta(days=5)
    )
    pool_services.set_quota(team=llm, pool=a800, max_gpus=12)
    pool_services.set_quota(team=llm, pool=elastic, max_gpus=4)
    pool_services.set_namespace_limits(team=vision, requests_cpu_millicores=4000, requests_memory_mib=8192)
    return {"a800": a800, "spot": elastic, "llm": llm, "vision": vision}


def by_slug(specs):
    return {spec.slug: spec for spec in specs}


def test_the_projection_holds_the_reservations_active_at_the_moment_it_is_rendered(world):
    pools, teams = projection.desired_specs(T0)
    pools, teams = by_slug(pools), by_slug(teams)
    assert pools["a800"].reserved_gpus == 8 and pools["a800"].contracted_gpus == 32
    assert teams["llm"].share("a800") == render.TeamPoolShare(pool="a800", reserved=8, quota=12, lendable=8)
    assert teams["llm"].share("spot") == render.TeamPoolShare(pool="spot", reserved=0, quota=4)
    assert teams["vision"].share("a800").reserved == 0
    assert (teams["vision"].cpu_millicores, teams["vision"].memory_mib) == (4000, 8192)
    assert teams["llm"].cpu_millicores == 32_000  # no limits row: the namespace's defaults

    pools, teams = projection.desired_specs(T0 + timedelta(hours=1))  # vision's reservation starts
    assert by_slug(pools)["a800"].reserved_gpus == 12
    assert by_slug(teams)["vision"].share("a800").reserved == 4


def test_what_a_team_lends_in_a_pool_is_the_sum_of_its_active_reservations_lendable_gpus(world):
    llm, a800 = world["llm"], world["a800"]
    small = ReservationFactory(
        team=llm, pool=a800, gpus=4, starts_at=T0 - timedelta(days=1), ends_at=T0 + timedelta(days=1)
    )
    large = llm.reservations.get(pool=a800, gpus=8)
    assert by_slug(projection.desired_specs(T0)[1])["llm"].share("a800").lendable == 12  # default: both lend idle GPUs
    pool_services.set_lending(reservation=small, lending=Lending.NONE)
    pool_services.set_lending(reservation=large, lending=Lending.PROTECT, protected_gpus=3)
    share = by_slug(projection.desired_specs(T0)[1])["llm"].share("a800")
    assert (share.reserved, share.lendable) == (12, 5)  # the ended 4-GPU reservation counts for neither


def test_an_elastic_pool_is_sized_from_its_setting_or_else_its_largest_synced_node(world):
    spot = by_slug(projection.desired_specs(T0)[0])["spot"]
    assert (spot.gpus_per_node, render.unreserved_gpus(spot)) == (8, 40)
    world["spot"].gpus_per_node = 2
    world["spot"].save()
    assert render.unreserved_gpus(by_slug(projection.desired_specs(T0)[0])["spot"]) == 10


def test_a_committed_change_bumps_the_version_and_sends_it_to_kueue(world, sent, django_capture_on_commit_callbacks):
    before = projection.kueue_state()["desired_version"]
    with django_capture_on_commit_callbacks(execute=True):
        pool_services.set_quota(team=world["vision"], pool=world["a800"], max_gpus=6)
    assert projection.kueue_state()["desired_version"] == before + 1
    assert sent == [before + 1]
    assert projection.kueue_state()["applied"] is False


def test_a_change_rolled_back_sends_nothing(world, sent, django_capture_on_commit_callbacks):
    before = projection.kueue_state()["desired_version"]
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError), transaction.atomic():
        pool_services.set_quota(team=world["vision"], pool=world["a800"], max_gpus=6)
        raise RuntimeError("something after the quota failed: the whole request is rolled back")
    assert sent == [] and projection.kueue_state()["desired_version"] == before


@pytest.mark.parametrize(
    "write",
    [
        lambda w: pool_services.create_reservation(
            team=w["vision"], pool=w["a800"], gpus=2, starts_at=T0 + timedelta(days=20), ends_at=T0 + timedelta(days=40)
        ),
        lambda w: pool_services.end_reservation(
            reservation=w["llm"].reservations.order_by("-starts_at").first(), ends_at=T0 + timedelta(days=2)
        ),
        lambda w: pool_services.set_namespace_limits(team=w["llm"], max_pods=10),
        lambda w: pool_services.save_pool(pool=w["spot"]),
        lambda w: pool_services.delete_pool(pool=PoolFactory(slug="unused")),
        lambda w: pool_services.set_lending(
            reservation=w["llm"].reservations.order_by("-starts_at").first(), lending=Lending.NONE
        ),
    ],
    ids=["reservation", "reservation-end", "namespace-limits", "pool", "pool-deleted", "lending"],
)
def test_every_write_kueue_is_rendered_from_is_sent(world, sent, write, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        write(world)
    assert len(sent) == 1


def test_a_reservation_boundary_calls_for_a_new_projection_at_that_moment(world, monkeypatch):
    reconciled: list = []
    monkeypatch.setattr(kueue, "reconcile", lambda **kwargs: reconciled.append(timezone.now()) or {"done": True})
    KueueProjection.objects.create(pk=1, last_rendered_at=T0, rendered_at=T0)
    starts = T0 + timedelta(hours=1)  # vision's reservation
    with time_machine.travel(starts - timedelta(seconds=1), tick=False):
        assert kueue.reconcile_at_reservation_boundary() is None
    with time_machine.travel(starts, tick=False):
        assert kueue.reconcile_at_reservation_boundary() == {"done": True}
    assert reconciled == [starts]
    # Once a projection was rendered after the start, the start is no longer news.
    KueueProjection.objects.filter(pk=1).update(last_rendered_at=starts)
    with time_machine.travel(starts + timedelta(minutes=30), tick=False):
        assert kueue.reconcile_at_reservation_boundary() is None
    # An end is a boundary too (llm's reservation ends at T0 + 10 days).
    with time_machine.travel(T0 + timedelta(days=10), tick=False):
        assert kueue.reconcile_at_reservation_boundary() == {"done": True}


def test_a_projection_never_rendered_is_rendered_at_the_first_check(db, monkeypatch):
    monkeypatch.setattr(kueue, "reconcile", lambda **kwargs: {"done": True})
    assert kueue.reconcile_at_reservation_boundary() == {"done": True}


def test_applied_means_the_latest_version_and_no_boundary_passed_since(world):
    KueueProjection.objects.create(pk=1, desired_version=3, applied_version=3, rendered_at=T0, last_rendered_at=T0)
    with time_machine.travel(T0 + timedelta(minutes=59), tick=False):
        assert projection.kueue_state()["applied"] is True
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        assert projection.kueue_state()["applied"] is False  # vision's reservation started: Kueue does not know yet
    KueueProjection.objects.filter(pk=1).update(desired_version=4)
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        assert projection.kueue_state()["applied"] is False


def test_the_quota_api_says_whether_kueue_has_the_change(world, platform_admin):
    KueueProjection.objects.create(pk=1, desired_version=2, applied_version=1, last_error="ClusterQueue/team-x: 422")
    client = APIClient()
    client.force_login(platform_admin)
    answer = client.get("/api/v1/quotas/").json()["results"]
    assert answer and all(row["kueue"]["applied"] is False for row in answer)
    assert answer[0]["kueue"]["last_error"] == "ClusterQueue/team-x: 422"
    assert "applied" in answer[0]["namespace"]


def test_admins_choose_a_teams_queueing_order_in_the_api(
    team, platform_admin, lead, sent, django_capture_on_commit_callbacks
):
    admin_client, lead_client = APIClient(), APIClient()
    admin_client.force_login(platform_admin)
    lead_client.force_login(lead)
    assert admin_client.get("/api/v1/teams/alpha/").json()["queueing_strategy"] == "StrictFIFO"
    assert lead_client.patch("/api/v1/teams/alpha/", {"queueing_strategy": "BestEffortFIFO"}).status_code == 403
    assert admin_client.patch("/api/v1/teams/alpha/", {"queueing_strategy": "Fastest"}).status_code == 400
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.patch("/api/v1/teams/alpha/", {"queueing_strategy": "BestEffortFIFO"})
    assert response.status_code == 200
    assert Team.objects.get(slug="alpha").queueing_strategy == "BestEffortFIFO"
    assert len(sent) == 1
    assert AuditEntry.objects.filter(action="team.update", object_id=str(team.pk)).exists()


def test_admins_choose_a_teams_queueing_order_in_django_admin(
    team, platform_admin, sent, client, django_capture_on_commit_callbacks
):
    client.force_login(platform_admin)
    form = {
        "slug": "alpha",
        "name": "Alpha",
        "description": "",
        "queueing_strategy": "BestEffortFIFO",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/portal/team/{team.pk}/change/", form)
    assert response.status_code == 302, response.content[:2000]
    assert Team.objects.get(pk=team.pk).queueing_strategy == "BestEffortFIFO"
    assert AuditEntry.objects.filter(action="team.update", object_id=str(team.pk)).count() == 1
    assert len(sent) == 1
    assert "queueing_strategy" in site._registry[Team].list_filter
