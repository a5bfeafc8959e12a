"""Cluster reconcile tasks for pools and team namespaces (queue: cluster).

The tasks that call the cluster use the one retry policy of `portal.retry.ClusterTask` (each cluster call tried
once, the task retried with backoff and jitter on a transient failure). Two periodic sweeps do not retry as tasks:
the namespace sweep goes on to the next team when one fails, and the reservation-boundary check runs every few
seconds, so its next run is its retry (retries of it would pile up during an outage); their cluster calls are tried once
(portal/retry.py)."""

import logging

from celery import shared_task

from cluster.errors import single_attempt
from portal.retry import ClusterTask

log = logging.getLogger(__name__)


@shared_task(base=ClusterTask, name="pools.reconcile_team_namespace")
def reconcile_team_namespace(team_id: int) -> dict | None:
    from portal.models import Team

    from .namespaces import reconcile

    team = Team.objects.filter(pk=team_id).first()
    if team is None:
        return None
    return reconcile(team)


@shared_task(name="pools.reconcile_all_namespaces", acks_late=True)
def reconcile_all_namespaces() -> int:
    """Periodic: put back any hand edit of a team's ResourceQuota or LimitRange."""
    from portal.models import Team

    from .namespaces import reconcile

    count = 0
    for team in Team.objects.order_by("pk"):
        try:
            with single_attempt():
                reconcile(team)
            count += 1
        except Exception:  # noqa: BLE001 - one team's failure must not stop the others; it is logged and recorded
            log.exception("reconcile of team %s failed", team.slug)
    return count


@shared_task(base=ClusterTask, name="pools.reconcile_node_taints")
def reconcile_node_taints() -> dict:
    from .isolation import reconcile_taints

    return reconcile_taints()


@shared_task(base=ClusterTask, name="pools.reconcile_kueue")
def reconcile_kueue(version: int | None = None) -> dict:
    """Make Kueue's objects match the portal. With `version` (sent by a change), nothing is done when a reconcile
    already applied it; without (the periodic run), always: that is what puts back hand edits."""
    from . import kueue

    return kueue.summary(kueue.reconcile(unless_applied=version))


@shared_task(name="pools.reconcile_kueue_at_reservation_boundary", acks_late=True)
def reconcile_kueue_at_reservation_boundary() -> dict | None:
    """Frequent and cheap: reconcile Kueue's objects when a reservation started or ended since the last rendering."""
    from . import kueue

    with single_attempt():
        outcome = kueue.reconcile_at_reservation_boundary()
    return None if outcome is None else kueue.summary(outcome)
