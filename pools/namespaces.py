"""Team namespaces: render the desired ResourceQuota and LimitRange from the portal's rows, and put them in the
cluster. A hand edit in the cluster is put back and written to the audit log."""

import logging

from django.db import connection
from django.db.models import F, Sum
from django.utils import timezone

from cluster import resources
from cluster.errors import ClusterError
from cluster.manifests import NamespaceSpec, render_limit_range, render_namespace, render_resource_quota
from portal import audit, outbox
from portal.models import Team

from .models import NamespaceLimits, Quota, TeamNamespace

log = logging.getLogger(__name__)


def desired_spec(team: Team) -> NamespaceSpec:
    limits = NamespaceLimits.objects.filter(team=team).first() or NamespaceLimits(team=team)
    gpus = Quota.objects.filter(team=team).aggregate(total=Sum("max_gpus"))["total"] or 0
    fields = {
        name: getattr(limits, name)
        for name in NamespaceSpec.__dataclass_fields__
        if name not in ("namespace", "team_slug", "gpus")
    }
    return NamespaceSpec(namespace=team.namespace, team_slug=team.slug, gpus=gpus, **fields)


def mark_changed(team: Team) -> None:
    """Record that the team's quotas or limits changed, and reconcile once the change is committed."""
    from .tasks import reconcile_team_namespace

    state, created = TeamNamespace.objects.get_or_create(team=team)
    if not created:
        TeamNamespace.objects.filter(pk=state.pk).update(desired_version=F("desired_version") + 1)
    outbox.send(reconcile_team_namespace, team.pk)


# First key of the PostgreSQL advisory lock that lets one reconcile of a team run at a time (second key: team id).
RECONCILE_LOCK = 7_340_001


def reconcile(team: Team) -> dict:
    """Make the cluster hold the team's namespace, ResourceQuota and LimitRange as the portal says.

    Reconciles of one team run one at a time (a session advisory lock, which quota writes never wait for), and
    each reads the desired version before the rows it renders: when two admins change the team at once, an older
    rendering can never be written after a newer one while the newer version is marked applied.

    Returns what was done per object ("created", "corrected" or "unchanged"). Raises ClusterError on failure
    (after recording it on the TeamNamespace row)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", [RECONCILE_LOCK, team.pk])
    try:
        return _reconcile_locked(team)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [RECONCILE_LOCK, team.pk])


def _reconcile_locked(team: Team) -> dict:
    state, _ = TeamNamespace.objects.get_or_create(team=team)
    version = state.desired_version
    spec = desired_spec(team)
    outcome = {}
    applied = dict(state.applied_spec or {})
    try:
        resources.ensure_priority_classes()
        for kind, manifest, apply in (
            ("Namespace", render_namespace(spec), resources.ensure_namespace),
            ("ResourceQuota", render_resource_quota(spec), resources.apply_resource_quota),
            ("LimitRange", render_limit_range(spec), resources.apply_limit_range),
        ):
            result = apply(manifest)
            outcome[kind] = "created" if result.created else "corrected" if result.corrected else "unchanged"
            # Drift is a difference from what the portal itself last wrote; a change of the portal's own rows is
            # an update, not a hand edit.
            last = applied.get(kind)
            if result.corrected and last is not None and result.before != last:
                log.warning(
                    "team %s: %s in %s was edited in the cluster and was put back", team.slug, kind, spec.namespace
                )
                audit.record(
                    actor=None,
                    action=f"namespace.{kind.lower()}_put_back",
                    instance=team,
                    before=result.before,
                    after=result.after,
                )
            applied[kind] = result.after
    except ClusterError as error:
        TeamNamespace.objects.filter(pk=state.pk).update(last_error=str(error), last_checked_at=timezone.now())
        raise
    now = timezone.now()
    TeamNamespace.objects.filter(pk=state.pk, applied_version__lt=version).update(
        applied_version=version, applied_at=now
    )
    TeamNamespace.objects.filter(pk=state.pk).update(last_error="", last_checked_at=now, applied_spec=applied)
    return outcome
