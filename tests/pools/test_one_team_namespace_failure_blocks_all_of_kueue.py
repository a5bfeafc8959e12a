"""One team whose namespace could not be made stopped the Kueue projection for every team and pool.

What users saw: an admin made a team whose slug matched a namespace somebody else already had (the portal refuses to
take it over, 409), or a webhook, RBAC or the apiserver refused that team's namespace or its ResourceQuota. From then
on, every minute, no Kueue object was written for anybody: a new pool got no ResourceFlavor, other teams' quota
changes and new reservations (or ones starting at their boundary) never reached Kueue, until that one team was fixed.
`reconcile.kueue.reconcile` promises that an object it cannot write is recorded "and the other objects are still
written": a refused namespace now holds back only its own team's LocalQueue. A transient failure (the apiserver away)
still stops the reconcile, which is retried.

No cluster: the `cluster.kueue_objects` / `cluster.resources` calls the reconcile makes are faked at the function level
(their answers only: nothing exists yet, writes succeed), and the one team's namespace reconcile answers a verdict (or
a transient failure)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import kueue_objects, resources
from cluster.errors import ClusterError, TransientClusterError
from cluster.resources import ApplyResult
from pools.models import KueueProjection
from reconcile import kueue
from reconcile import namespaces as namespace_reconciler
from tests.factories import PoolFactory, ReservationFactory, TeamFactory

REFUSED = ClusterError(
    "namespace team-newbie exists and was not made by the portal (no label app.kubernetes.io/managed-by=reservoir): "
    "it is not taken over; rename the team, or label the namespace to hand it over",
    status=409,
)


@pytest.fixture
def applied(monkeypatch):
    written: list[str] = []

    def apply(manifest, existing=None):
        written.append(kueue.render.object_key(manifest))
        return ApplyResult(created=True, after={})

    monkeypatch.setattr(kueue_objects, "list_kueue_objects", lambda kind: [])
    monkeypatch.setattr(kueue_objects, "read_kueue_object", lambda kind, name, namespace=None: None)
    monkeypatch.setattr(kueue_objects, "apply_kueue_object", apply)
    monkeypatch.setattr(kueue_objects, "mark_admission_check_active", lambda name, at: True)
    monkeypatch.setattr(kueue_objects, "delete_kueue_object", lambda *a, **k: True)
    monkeypatch.setattr(resources, "namespace_names", lambda: {"team-llm"})  # the new team's is not made yet
    return written


def namespace_answers(monkeypatch, error: ClusterError) -> None:
    """The newbie's namespace reconcile raises `error` (what `cluster.resources.ensure_namespace` answers for a
    namespace of that name without the portal's label, or a webhook / RBAC refusal, or the apiserver away)."""

    def reconcile_namespace(team):
        raise error

    monkeypatch.setattr(namespace_reconciler, "reconcile", reconcile_namespace)


@pytest.fixture
def teams():
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    llm = TeamFactory(slug="llm")
    TeamFactory(slug="newbie")
    now = timezone.now()
    ReservationFactory(team=llm, pool=pool, gpus=8, starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=9))


@pytest.mark.django_db
def test_one_team_whose_namespace_cannot_be_made_does_not_stop_the_others_queues(applied, teams, monkeypatch):
    namespace_answers(monkeypatch, REFUSED)

    with pytest.raises(ClusterError, match="team-newbie"):
        kueue.reconcile()  # the failure is still reported

    assert {"ResourceFlavor/a800", "ClusterQueue/team-llm", "LocalQueue/team-llm/reservoir"} <= set(applied)
    assert "ClusterQueue/team-newbie" in applied  # cluster-wide: it needs no namespace
    assert "LocalQueue/team-newbie/reservoir" not in applied  # its namespace is not there: it waits for it
    assert "Namespace/team-newbie" in KueueProjection.objects.get().last_error


@pytest.mark.django_db
def test_a_transient_failure_of_a_namespace_still_stops_the_reconcile(applied, teams, monkeypatch):
    namespace_answers(monkeypatch, TransientClusterError("the apiserver did not answer"))

    with pytest.raises(TransientClusterError):
        kueue.reconcile()

    assert applied == []  # retried as a whole once the apiserver is back
