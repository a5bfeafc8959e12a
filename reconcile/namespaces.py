"""Team namespaces: render the desired ResourceQuota, LimitRange and NetworkPolicies from the portal's rows and
settings, and put them in the cluster. A hand edit in the cluster is put back and written to the audit log.

The NetworkPolicies (cluster/namespaces.py) are the namespace's two standing ones and one per multi-node job that
should be in the cluster (its rendezvous port, open to the pods of that job only); the portal's policies of jobs
that are over are deleted. The ResourceQuota caps the namespace's claims at the team's volume limits, and closes the
cluster's storage classes that team volumes may not use (`teamdata.selectors.storage_class_allowed`)."""

import logging

from django.conf import settings
from django.db import connection
from django.utils import timezone

from cluster import resources
from cluster.errors import ClusterError, NamespaceNotMade
from cluster.namespaces import (
    parse_role_bindings,
    render_limit_range,
    render_namespace,
    render_network_policies,
    render_rendezvous_policy,
    render_resource_quota,
    render_role_bindings,
    rendezvous_policy_name,
)
from pools.models import TeamNamespace
from pools.projection import namespace_spec, network_spec
from portal import audit
from portal.models import Team

log = logging.getLogger(__name__)


def _gang_ids(team: Team) -> list[int]:
    """The team's multi-node jobs that should be in the cluster (`Job.objects.expected_in_cluster`)."""
    from jobs.models import Job

    return list(
        Job.objects.expected_in_cluster().filter(team=team, nodes__gt=1).order_by("pk").values_list("pk", flat=True)
    )


def desired_network_policies(team: Team) -> list[dict]:
    """The namespace's standing NetworkPolicies, and one per multi-node job of the team in the cluster."""
    from jobs.models import job_name_for

    per_job = [
        render_rendezvous_policy(
            namespace=team.namespace, team_slug=team.slug, job_id=job_id, job_name=job_name_for(job_id)
        )
        for job_id in _gang_ids(team)
    ]
    return [*render_network_policies(network_spec(team)), *per_job]


def _stale_policies(team: Team, wanted: set[str]) -> list[str]:
    """The portal's NetworkPolicies of the namespace that are no longer wanted: those of jobs that are over. The
    jobs are read again after the list, so a gang submitted meanwhile (its policy made by its submit task after
    its commit) keeps its policy."""
    from jobs.models import job_name_for

    stale = resources.network_policy_names(team.namespace) - wanted
    if stale:
        stale -= {rendezvous_policy_name(job_name_for(job_id)) for job_id in _gang_ids(team)}
    return sorted(stale)


def ensure(team: Team, *, made_once_is_enough: bool = False) -> None:
    """The team namespace exists as the portal wants it before anything is put in it: reconciled unless the last
    reconcile applied the current version. With `made_once_is_enough` (the web process, saving a secret), a
    namespace some reconcile made is enough: a pending quota change is the worker's to apply, with rights the web
    process does not hold (docs/running-in-a-cluster.md, "Permissions"); one never made that it fails to make
    raises NamespaceNotMade. Raises ClusterError."""
    state = TeamNamespace.objects.filter(team=team).first()
    never_made = state is None or state.applied_at is None
    if not never_made and (state.is_applied or made_once_is_enough):
        return
    try:
        reconcile(team)
    except ClusterError as error:
        if never_made and made_once_is_enough:
            raise NamespaceNotMade(str(error)) from error
        raise


def _apply_binding(manifest: dict) -> resources.ApplyResult:
    """A team RoleBinding; a new one reaches the API server's authorizer a moment after it is stored, so wait until
    this process may write the namespace's quota before going on (at once with an admin's kubeconfig)."""
    result = resources.apply_role_binding(manifest)
    if result.created or result.corrected:
        namespace = manifest["metadata"]["namespace"]
        resources.wait_until_allowed(namespace, verb="create", resource="resourcequotas")
    return result


# First key of the PostgreSQL advisory lock that lets one reconcile of a team run at a time (second key: team id).
RECONCILE_LOCK = 7_340_001


def reconcile(team: Team) -> dict:
    """Make the cluster hold the team's namespace, ResourceQuota, LimitRange and NetworkPolicies as the portal says.

    Reconciles of one team run one at a time (a session advisory lock, which quota writes never wait for), and
    each reads the desired version before the rows it renders: when two admins change the team at once, an older
    rendering can never be written after a newer one while the newer version is marked applied.

    Returns what was done per object ("created", "corrected", "unchanged" or "deleted"; NetworkPolicies as
    `NetworkPolicy/<name>`). Raises ClusterError on failure (after recording it on the TeamNamespace row)."""
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
    outcome = {}
    applied = dict(state.applied_spec or {})
    try:
        spec = namespace_spec(team, cluster_storage_classes=resources.storage_classes())
        policies = desired_network_policies(team)
        resources.ensure_priority_classes()
        # The Helm chart's processes get their rights inside the namespace from these RoleBindings (its
        # <release>-team-* ClusterRoles, RESERVOIR_TEAM_ROLE_BINDINGS); none with an admin's kubeconfig.
        bindings = render_role_bindings(spec.namespace, team.slug, parse_role_bindings(settings.TEAM_ROLE_BINDINGS))
        objects = [
            ("Namespace", "Namespace", render_namespace(spec), resources.ensure_namespace),
            *[
                (f"RoleBinding/{binding['metadata']['name']}", "RoleBinding", binding, _apply_binding)
                for binding in bindings
            ],
            # Isolation first: a ResourceQuota or LimitRange the API server refuses must not leave the namespace
            # open to the others.
            *[
                (f"NetworkPolicy/{policy['metadata']['name']}", "NetworkPolicy", policy, resources.apply_network_policy)
                for policy in policies
            ],
            ("ResourceQuota", "ResourceQuota", render_resource_quota(spec), resources.apply_resource_quota),
            ("LimitRange", "LimitRange", render_limit_range(spec), resources.apply_limit_range),
        ]
        for key, kind, manifest, apply in objects:
            result = apply(manifest)
            outcome[key] = "created" if result.created else "corrected" if result.corrected else "unchanged"
            # Drift is a difference from what the portal itself last wrote; a change of the portal's own rows is
            # an update, not a hand edit. (A deleted object is created again, and so put back, without an entry.)
            last = applied.get(key)
            if result.corrected and last is not None and result.before != last:
                log.warning(
                    "team %s: %s in %s was edited in the cluster and was put back", team.slug, key, spec.namespace
                )
                audit.record(
                    actor=None,
                    action=f"namespace.{kind.lower()}_put_back",
                    instance=team,
                    before=result.before,
                    after=result.after,
                )
            applied[key] = result.after
        for name in _stale_policies(team, {policy["metadata"]["name"] for policy in policies}):
            resources.delete_network_policy(spec.namespace, name)
            applied.pop(f"NetworkPolicy/{name}", None)
            outcome[f"NetworkPolicy/{name}"] = "deleted"
    except ClusterError as error:
        TeamNamespace.objects.filter(pk=state.pk).update(last_error=str(error), last_checked_at=timezone.now())
        raise
    now = timezone.now()
    TeamNamespace.objects.filter(pk=state.pk, applied_version__lt=version).update(
        applied_version=version, applied_at=now
    )
    TeamNamespace.objects.filter(pk=state.pk).update(last_error="", last_checked_at=now, applied_spec=applied)
    return outcome
