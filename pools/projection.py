"""What the cluster should hold, read from the pools' rows: the desired state the reconcilers (`reconcile/`) apply,
and the marks that say it changed.

Kueue's objects are a projection of pools, teams, reservations, quotas and namespace limits; each team namespace
holds a ResourceQuota, LimitRange and NetworkPolicies rendered from the team's rows and settings. A service that
writes one of those rows calls `kueue_changed()` or `namespace_changed(team)`: once the transaction is committed,
the desired version is bumped and the reconcile task is sent by name through the outbox (a change rolled back
sends nothing). `reconcile/kueue.py` and `reconcile/namespaces.py` say when else they run.

Until a change is applied, `kueue_state()` says `applied: false` — also when a reservation boundary has passed since
the projection in the cluster was rendered, although no version changed."""

from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Sum
from django.utils import timezone

from cluster import kueue as render
from cluster.namespaces import NamespaceSpec, NetworkSpec
from portal import outbox
from portal.models import Team

from .models import KueueProjection, NamespaceLimits, Node, Pool, Quota, Reservation, TeamNamespace

# NamespaceSpec's fields that do not come from the team's NamespaceLimits row.
NOT_LIMITS = ("namespace", "team_slug", "gpus", "storage_classes", "closed_storage_classes", "stopping_gpus")


# --- Kueue's objects ---------------------------------------------------------------------------------------------


def kueue_row() -> KueueProjection:
    """The projection's state row, created when missing (concurrent creators do not conflict)."""
    KueueProjection.objects.bulk_create([KueueProjection(pk=KueueProjection.SINGLETON_PK)], ignore_conflicts=True)
    return KueueProjection.objects.get(pk=KueueProjection.SINGLETON_PK)


def kueue_changed() -> None:
    """Record that something Kueue's objects are rendered from changed; reconcile once the change is committed.

    The version is bumped after the commit, not inside the caller's transaction, so that no portal write waits on
    the one state row. A reconcile that started before the bump rendered either without the change (and marks an
    older version applied) or already with it: either way `applied` stays false until a reconcile that read the
    new version is done.

    Robust: should the broker be down, the committed change stands (the write did succeed) and the periodic
    reconcile brings it to Kueue within a minute; the failure is logged."""
    transaction.on_commit(_changed, robust=True)


# The bump and the version it made in one statement, written once (issue 30): it runs after every change of what
# Kueue's objects are rendered from, and the ORM's update and read back cost more to compile than to run.
_KUEUE_TABLE = KueueProjection._meta.db_table
_BUMP_KUEUE = f"UPDATE {_KUEUE_TABLE} SET desired_version = desired_version + 1 WHERE id = %s RETURNING desired_version"


def _changed() -> None:
    with connection.cursor() as cursor:
        cursor.execute(_BUMP_KUEUE, [KueueProjection.SINGLETON_PK])
        row = cursor.fetchone()
        if row is None:  # no state row yet: the first change makes it
            kueue_row()
            cursor.execute(_BUMP_KUEUE, [KueueProjection.SINGLETON_PK])
            row = cursor.fetchone()
    outbox.task_named("pools.reconcile_kueue").delay(row[0])


def gpus_per_node_by_pool(pools: list[Pool] | None = None) -> dict[int, int]:
    """GPUs of one node, per pool: the pool's own setting, else the largest allocatable of its synced nodes. For
    `pools` (rows the caller has loaded) or every pool; the nodes are asked only for pools without the setting."""
    pools = list(Pool.objects.only("pk", "gpus_per_node")) if pools is None else pools
    unset = [pool.pk for pool in pools if pool.gpus_per_node is None]
    largest = (
        dict(
            Node.objects.filter(pool__in=unset)
            .values("pool")
            .annotate(largest=Max("gpu_allocatable"))
            .values_list("pool", "largest")
        )
        if unset
        else {}
    )
    return {
        pool.pk: pool.gpus_per_node if pool.gpus_per_node is not None else largest.get(pool.pk, 0) for pool in pools
    }


def desired_specs(now: datetime) -> tuple[list[render.PoolFlavorSpec], list[render.TeamQueueSpec]]:
    """The pools and teams as Kueue sees them at `now` (reservations active at that moment)."""
    active = Reservation.objects.active_at(now)
    reserved_by_pool = dict(active.values("pool").annotate(total=Sum("gpus")).values_list("pool", "total"))
    per_node = gpus_per_node_by_pool()
    pools = list(Pool.objects.order_by("slug"))
    pool_specs = [
        render.PoolFlavorSpec(
            slug=pool.slug,
            kind=pool.kind,
            node_selector=dict(pool.node_selector),
            taints=tuple(pool.taints),
            contracted_gpus=pool.contracted_gpus or 0,
            reserved_gpus=reserved_by_pool.get(pool.pk, 0),
            max_nodes=pool.max_nodes,
            gpus_per_node=per_node.get(pool.pk, 0),
        )
        for pool in pools
    ]
    slugs = {pool.pk: pool.slug for pool in pools}
    shares: dict[int, dict[str, dict]] = {}
    for reservation in active.only("team", "pool", "gpus", "lending", "protected_gpus"):
        share = shares.setdefault(reservation.team_id, {}).setdefault(slugs[reservation.pool_id], {})
        share["reserved"] = share.get("reserved", 0) + reservation.gpus
        share["lendable"] = share.get("lendable", 0) + reservation.lendable_gpus
    for team_id, pool_id, gpus in Quota.objects.values_list("team", "pool", "max_gpus"):
        shares.setdefault(team_id, {}).setdefault(slugs[pool_id], {})["quota"] = gpus
    limits = {row.team_id: row for row in NamespaceLimits.objects.all()}
    default_limits = NamespaceLimits()
    team_specs = []
    for team in Team.objects.order_by("slug"):
        team_limits = limits.get(team.pk, default_limits)
        team_specs.append(
            render.TeamQueueSpec(
                slug=team.slug,
                namespace=team.namespace,
                cpu_millicores=team_limits.requests_cpu_millicores,
                memory_mib=team_limits.requests_memory_mib,
                queueing_strategy=team.queueing_strategy,
                shares=tuple(
                    render.TeamPoolShare(
                        pool=slug,
                        reserved=values.get("reserved", 0),
                        quota=values.get("quota", 0),
                        lendable=values.get("lendable", 0),
                    )
                    for slug, values in sorted(shares.get(team.pk, {}).items())
                ),
            )
        )
    return pool_specs, team_specs


def kueue_state() -> dict:
    """Whether the cluster's Kueue objects hold the latest change: versions, when, and the last error."""
    # No row yet reads like a new one: nothing applied.
    row = KueueProjection.objects.filter(pk=KueueProjection.SINGLETON_PK).first() or KueueProjection()
    boundary_passed = row.rendered_at is None or (
        Reservation.objects.starting_or_ending_between(row.rendered_at, timezone.now()).exists()
    )
    return {
        "applied": row.applied_version >= row.desired_version and not boundary_passed,
        "desired_version": row.desired_version,
        "applied_version": row.applied_version,
        "applied_at": row.applied_at,
        "last_checked_at": row.last_checked_at,
        "last_error": row.last_error,
    }


# --- team namespaces ---------------------------------------------------------------------------------------------


# A namespace's state as `_namespace_answer` takes it, in this order.
_NAMESPACE_STATE = ("desired_version", "applied_version", "applied_at", "last_error")
# The bump and the state it leaves in one statement, written once (issue 30), as `_BUMP_KUEUE`.
_BUMP_NAMESPACE = (
    f"UPDATE {TeamNamespace._meta.db_table} SET desired_version = desired_version + 1 WHERE team_id = %s "
    f"RETURNING {', '.join(_NAMESPACE_STATE)}"
)


def namespace_changed(team: Team) -> dict:
    """Record that the team's quotas or limits changed, and reconcile once the change is committed. Returns the
    namespace's state after the change (`namespace_state`'s answer), as the bump left it."""
    with connection.cursor() as cursor:
        cursor.execute(_BUMP_NAMESPACE, [team.pk])
        row = cursor.fetchone()
        if row is None:  # the team's first change: its first version
            state, created = TeamNamespace.objects.get_or_create(team=team)
            row = tuple(getattr(state, name) for name in _NAMESPACE_STATE)
            if not created:  # another change made the row meanwhile (the sync's, not under the team's lock): count this
                cursor.execute(_BUMP_NAMESPACE, [team.pk])
                row = cursor.fetchone()
    outbox.send("pools.reconcile_team_namespace", team.pk)
    return _namespace_answer(*row)


def namespace_state(team_id: int) -> dict:
    """Whether the team namespace's ResourceQuota and LimitRange hold the latest change: versions, when, the last
    error. A team never changed reads as nothing applied."""
    state = TeamNamespace.objects.filter(team_id=team_id).values_list(*_NAMESPACE_STATE).first()
    if state is None:
        return {"applied": False, "desired_version": 0, "applied_version": 0, "applied_at": None, "last_error": ""}
    return _namespace_answer(*state)


def _namespace_answer(desired_version: int, applied_version: int, applied_at, last_error: str) -> dict:
    return {
        "applied": applied_version >= desired_version,  # as TeamNamespace.is_applied
        "desired_version": desired_version,
        "applied_version": applied_version,
        "applied_at": applied_at,
        "last_error": last_error,
    }


def namespace_spec(team: Team, *, cluster_storage_classes=()) -> NamespaceSpec:
    """The namespace's quota and limits. `cluster_storage_classes` (StorageClassFacts of the cluster) are sorted
    into the classes team volumes may use and those they may not; without them, no class is named. The GPUs of the
    team's pods that are stopping, as the sync last saw them (`PodQuerySet.stopping`), are the ResourceQuota's room
    for them (`cluster.namespaces.render_resource_quota`)."""
    from jobs.models import Pod
    from teamdata.selectors import storage_class_allowed

    limits = NamespaceLimits.objects.filter(team=team).first() or NamespaceLimits(team=team)
    gpus = Quota.objects.filter(team=team).aggregate(total=Sum("max_gpus"))["total"] or 0
    stopping_gpus = Pod.objects.filter(team=team).stopping().aggregate(total=Sum("gpus"))["total"] or 0
    fields = {name: getattr(limits, name) for name in NamespaceSpec.__dataclass_fields__ if name not in NOT_LIMITS}
    allowed = tuple(sorted(c.name for c in cluster_storage_classes if c.is_default or storage_class_allowed(c.name)))
    closed = tuple(sorted(c.name for c in cluster_storage_classes if c.name not in allowed))
    return NamespaceSpec(
        namespace=team.namespace,
        team_slug=team.slug,
        gpus=gpus,
        stopping_gpus=stopping_gpus,
        storage_classes=allowed,
        closed_storage_classes=closed,
        **fields,
    )


def network_spec(team: Team) -> NetworkSpec:
    return NetworkSpec(
        namespace=team.namespace,
        team_slug=team.slug,
        ingress_namespaces=tuple(settings.NETWORK_INGRESS_NAMESPACES),
        egress_open=settings.NETWORK_EGRESS_OPEN,
        egress_cidrs=tuple(settings.NETWORK_EGRESS_CIDRS),
    )
