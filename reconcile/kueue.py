"""Kueue's objects as a projection of the portal's pools, teams, reservations, quotas and namespace limits.

PostgreSQL is the source of truth; `reconcile()` makes the cluster hold exactly what `cluster.kueue` renders from
it: it creates what is missing, replaces what differs, and deletes the objects carrying the portal's label that no
pool or team wants any more. An object the portal did not create is never touched, even when it has a name the
portal wants (that is reported as an error instead). Order: ResourceFlavors and WorkloadPriorityClasses, then
ClusterQueues, then LocalQueues (each team namespace is made first, by `reconcile.namespaces`); deletions run the
other way round, so a flavor goes only once no queue of the portal names it.

A hand edit is put back and audited, as for team namespaces: drift is a difference from what the portal itself
last wrote (a digest per object in `KueueProjection.applied_digests`), not a change of the portal's own rows.

When it runs:
- on every change of pools, reservations (their lending setting too), quotas, namespace limits and teams: the
  service that writes the change calls `pools.projection.kueue_changed()`, which, once the transaction is
  committed, bumps the desired version and sends the reconcile task (a change rolled back sends nothing);
- every minute (beat): puts back hand edits and anything a failed attempt left behind;
- at reservation boundaries. A reservation that starts or ends changes nominal quotas at that moment, though no
  row changes. Every few seconds (beat, `pools.beat.KUEUE_BOUNDARY_CHECK_SECONDS`) one indexed query asks whether any
  reservation started or ended since the moment the last projection was rendered (`last_rendered_at`); if one
  did, the projection is reconciled at once. No Celery message is scheduled for the future (an ETA message sits
  in Redis unacknowledged and is lost or redelivered with the broker), so nothing is lost when Redis, the worker
  or beat restarts: the next check after they are back sees the boundary, because it compares moments, not
  messages.

The desired state is read by `pools.projection` (`desired_specs`); whether it is applied, by
`pools.projection.kueue_state()`.
"""

import hashlib
import json
import logging
from dataclasses import replace
from datetime import datetime

from django.db import connection
from django.utils import timezone

from billing.budget import budget_statuses
from cluster import kueue as render
from cluster import kueue_objects, resources
from cluster.errors import ClusterError, TransientClusterError
from pools.models import KueueProjection, Pool, Reservation
from pools.projection import desired_specs, kueue_row
from portal import audit
from portal.models import Team

from . import namespaces

log = logging.getLogger(__name__)

# A ClusterQueue still being deleted this long after it was asked to go is nudged (see `_nudge_if_stuck`).
STUCK_DELETING_SECONDS = 30
NUDGE_ANNOTATION = "reservoir.io/deletion-nudged-at"

# First key of the PostgreSQL advisory lock that lets one Kueue reconcile run at a time (second key: 0).
RECONCILE_LOCK = 7_340_002


def _digest(compared: dict | None) -> str:
    return hashlib.sha256(json.dumps(compared, sort_keys=True).encode()).hexdigest()[:24]


# --- reconcile ---------------------------------------------------------------------------------------------------


def reconcile(*, unless_applied: int | None = None) -> dict:
    """Make Kueue's objects in the cluster what the portal says now. One reconcile runs at a time (a session
    advisory lock); with `unless_applied`, nothing is done when that version is applied already (another
    reconcile rendered the change meanwhile).

    Returns what was done per object ("created", "corrected", "unchanged", "deleted"). Raises ClusterError when
    an object could not be written, or has the name of an object the portal did not create (after recording it;
    the other objects are still written)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, 0)", [RECONCILE_LOCK])
    try:
        state = kueue_row()
        if unless_applied is not None and state.applied_version >= unless_applied:
            return {"skipped": f"version {unless_applied} is applied"}
        return _reconcile_locked(state)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, 0)", [RECONCILE_LOCK])


def summary(outcome: dict[str, str]) -> dict:
    """A reconcile's outcome in short (what a task returns and Celery logs): how many objects were left as they
    were, and which ones were created, corrected, deleted or failed."""
    short: dict = {"unchanged": 0}
    for key, done in outcome.items():
        if done == "unchanged":
            short["unchanged"] += 1
        else:
            short.setdefault(done, []).append(key)
    return short


def _audit_instance(manifest: dict, pools: dict[str, Pool], teams: dict[str, Team], state: KueueProjection):
    labels = manifest["metadata"]["labels"]
    if render.LABEL_TEAM in labels and labels[render.LABEL_TEAM] in teams:
        return teams[labels[render.LABEL_TEAM]]
    if render.LABEL_POOL in labels and labels[render.LABEL_POOL] in pools:
        return pools[labels[render.LABEL_POOL]]
    return state


def _reconcile_locked(state: KueueProjection) -> dict:
    version = state.desired_version
    now = timezone.now()
    KueueProjection.objects.filter(pk=state.pk).update(last_rendered_at=now)
    pool_specs, team_specs = with_budget_checks(*desired_specs(now), now)
    desired = render.render_projection(pool_specs, team_specs)
    digests = dict(state.applied_digests or {})
    outcome: dict[str, str] = {}
    errors: list[str] = []
    pools = {pool.slug: pool for pool in Pool.objects.all()}
    teams = {team.slug: team for team in Team.objects.all()}
    try:
        listed = {kind: kueue_objects.list_kueue_objects(kind) for kind in render.KINDS}
        existing = {render.object_key(obj): obj for objects in listed.values() for obj in objects}
        unmade = _ensure_namespaces(team_specs, teams, errors)
        for manifest in desired:
            key = render.object_key(manifest)
            if manifest["metadata"].get("namespace") in unmade:
                outcome[key] = "failed"  # its namespace could not be made (in `errors`)
                continue
            try:
                outcome[key] = _apply(
                    manifest, existing.get(key), digests, _audit_instance(manifest, pools, teams, state)
                )
                if manifest["kind"] == "AdmissionCheck" and not kueue_objects.admission_check_active(
                    existing.get(key) or {}
                ):
                    # The portal is the check's controller: Active at once, or the queues naming it stop admitting.
                    kueue_objects.mark_admission_check_active(
                        manifest["metadata"]["name"], at=now.strftime("%Y-%m-%dT%H:%M:%SZ")
                    )
            except TransientClusterError:
                raise
            except ClusterError as error:
                outcome[key] = "failed"
                errors.append(f"{key}: {error}")
        wanted = {render.object_key(manifest) for manifest in desired}
        for kind in reversed(render.KINDS):
            for obj in listed[kind]:
                key = render.object_key(obj)
                if key in wanted:
                    continue
                metadata = obj["metadata"]
                quiet = render.without_lending(obj) if kind == "ClusterQueue" else None
                if quiet is not None:
                    kueue_objects.apply_kueue_object(quiet, obj)
                    log.info("Kueue projection: %s lends nothing while it goes", key)
                if metadata.get("deletionTimestamp"):
                    outcome[key] = "deleting"  # Kueue holds it until nothing uses it
                    if kind == "ClusterQueue":
                        _nudge_if_stuck(obj, now)
                    continue
                kueue_objects.delete_kueue_object(kind, metadata["name"], metadata.get("namespace"))
                log.info("Kueue projection: deleted %s (no pool or team wants it any more)", key)
                outcome[key] = "deleted"
                digests.pop(key, None)
    except ClusterError as error:
        _record_failure(state, [*errors, str(error)], digests)
        raise
    if errors:
        _record_failure(state, errors, digests)
        raise ClusterError("; ".join(errors))
    finished = timezone.now()
    KueueProjection.objects.filter(pk=state.pk, applied_version__lt=version).update(
        applied_version=version, applied_at=finished
    )
    KueueProjection.objects.filter(pk=state.pk).update(
        rendered_at=now, last_error="", last_checked_at=finished, applied_digests=digests
    )
    return outcome


def with_budget_checks(pool_specs, team_specs, now: datetime | None = None):
    """The teams with a budget get the budget's AdmissionCheck on their ClusterQueue (`cluster.kueue`), on every
    flavor once it is reached: the budget is billing's, which the domain's desired state (`pools.projection`) does
    not read."""
    statuses = budget_statuses(now=now or timezone.now())
    slugs = dict(Team.objects.filter(pk__in=statuses).values_list("pk", "slug"))
    reached = {slugs[team_id]: status.reached for team_id, status in statuses.items()}
    return pool_specs, [
        replace(spec, budget_checked=spec.slug in reached, budget_reached=reached.get(spec.slug, False))
        for spec in team_specs
    ]


def _nudge_if_stuck(cluster_queue: dict, now: datetime) -> None:
    """Kueue v0.17.0 can keep a deleted ClusterQueue for good: when an admission fails because its Workload went
    meanwhile (a namespace being deleted takes Workloads and LocalQueue together), Kueue drops the Workload from its
    cache but does not look at the queue again, so the queue's finalizer stays although nothing uses it any more
    (kueue#10759, fixed after v0.17.0). Any change of the object makes Kueue look again: a queue still deleting
    `STUCK_DELETING_SECONDS` after it was deleted gets an annotation with the time, once per reconcile (every
    minute), until it is gone. A queue that still holds Workloads keeps its finalizer: Kueue decides, as always."""
    from django.utils.dateparse import parse_datetime

    metadata = cluster_queue["metadata"]
    deleted_at = parse_datetime(metadata["deletionTimestamp"])
    if deleted_at is None or (now - deleted_at).total_seconds() < STUCK_DELETING_SECONDS:
        return
    kueue_objects.annotate_kueue_object("ClusterQueue", metadata["name"], {NUDGE_ANNOTATION: now.isoformat()})
    log.info("Kueue projection: ClusterQueue %s deleting since %s: nudged", metadata["name"], deleted_at)


def _record_failure(state: KueueProjection, errors: list[str], digests: dict) -> None:
    log.warning("Kueue projection incomplete: %s", "; ".join(errors))
    KueueProjection.objects.filter(pk=state.pk).update(
        last_error="; ".join(errors)[:4000], last_checked_at=timezone.now(), applied_digests=digests
    )


def _ensure_namespaces(team_specs: list[render.TeamQueueSpec], teams: dict[str, Team], errors: list[str]) -> set[str]:
    """A LocalQueue lives in its team's namespace: make the namespaces that are missing (with their quota and
    limits) before the queues. Returns the namespaces that could not be made: a refusal (someone else's namespace of
    that name, a webhook, RBAC) is one team's, added to `errors`, and only that team's LocalQueue waits for it; a
    transient failure stops the reconcile, as for any object."""
    present = resources.namespace_names()
    unmade = set()
    for spec in team_specs:
        if spec.namespace in present:
            continue
        try:
            namespaces.reconcile(teams[spec.slug])
        except TransientClusterError:
            raise
        except ClusterError as error:
            unmade.add(spec.namespace)
            errors.append(f"Namespace/{spec.namespace}: {error}")
    return unmade


def _apply(manifest: dict, listed: dict | None, digests: dict, instance) -> str:
    key = render.object_key(manifest)
    if listed is None:
        found = kueue_objects.read_kueue_object(
            manifest["kind"], manifest["metadata"]["name"], manifest["metadata"].get("namespace")
        )
        if found is not None and key not in digests:
            # There, without the portal's label, and never written by the portal: somebody else's object.
            raise ClusterError(
                f"{manifest['kind']} {manifest['metadata']['name']} exists and was not created by the "
                "portal: rename or delete it, or label it app.kubernetes.io/managed-by=reservoir"
            )
        listed = found
    result = kueue_objects.apply_kueue_object(manifest, listed)
    last = digests.get(key)
    if result.corrected and last is not None and _digest(result.before) != last:
        log.warning("Kueue projection: %s was edited in the cluster and was put back", key)
        audit.record(
            actor=None,
            action=f"kueue.{manifest['kind'].lower()}_put_back",
            instance=instance,
            before={"object": key, **result.before},
            after={"object": key, **result.after},
        )
    digests[key] = _digest(result.after)
    return "created" if result.created else "corrected" if result.corrected else "unchanged"


# --- reservation boundaries --------------------------------------------------------------------------------------


def reconcile_at_reservation_boundary(now: datetime | None = None) -> dict | None:
    """Reconcile when a reservation started or ended since the last projection was rendered (or none ever was);
    None when nothing changed. Cheap: one indexed query."""
    now = now or timezone.now()
    last = KueueProjection.objects.filter(pk=KueueProjection.SINGLETON_PK).values_list("last_rendered_at", flat=True)
    last_rendered_at = last.first()
    if last_rendered_at is not None and not (
        Reservation.objects.starting_or_ending_between(last_rendered_at, now).exists()
    ):
        return None
    return reconcile()
